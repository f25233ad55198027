"""Speed: the hardware's resolved defaults, compiling the networks, throughput and MFU, and the speed promises a task
can break.

Layer 2: imports `config` and `tools`.
"""
