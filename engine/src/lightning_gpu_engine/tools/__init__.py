"""The mechanics every part stands on: files written whole or not at all, the run folder and its lock, object
storage within a bound, and the stop signals a run waits on.

Layer 1: imports `config`.
"""
