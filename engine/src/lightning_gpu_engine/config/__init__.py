"""The options of a run: the engine's Config and a task's own, parsed from flags and YAML into one-line refusals, and
the warnings kept quiet.

Layer 0: imports no other part.
"""
