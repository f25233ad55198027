"""The conformance suite a task's tests subclass, with the script runs it shares between its checks."""
