"""Surviving stops: exact resume with the epoch's metrics, signals and preemption, nan and out-of-memory guards, and the
changes a resume may make."""
