"""TODO: one sentence."""
