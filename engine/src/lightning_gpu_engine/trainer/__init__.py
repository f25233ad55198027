"""Turning the options into Lightning's parts: the Trainer, its callbacks in their order, its strategy and launchers,
the logger, and what counts as a step.

Layer 6: imports `config`, `tools`, `checkpoint`, `data`, `perf`, `reliability` and `task`.
"""
