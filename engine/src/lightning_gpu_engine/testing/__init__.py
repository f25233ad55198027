"""The conformance suite a task's tests subclass, with the script runs it shares between its checks.

Layer 10: imports `lightning_gpu_engine`, `checkpoint`, `run` and `trainer`.
"""
