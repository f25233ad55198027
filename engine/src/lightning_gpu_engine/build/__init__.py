"""Turning the options into Lightning's parts: the Trainer, its strategy and launchers, the logger, the optimizers and
what counts as a step."""
