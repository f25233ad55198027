"""Surviving stops: exact resume with the epoch's metrics, preemption, nan and out-of-memory guards, and the changes a
resume may make.

Layer 5: imports `config`, `tools`, `checkpoint`, `data`, `module` and `task`.
"""
