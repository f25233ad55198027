"""The loaders a task's DataModule builds on: resumable training batches, evaluation that counts each sample once, and
LitData chunks streamed from disk or S3.

Layer 2: imports `config` and `tools`.
"""
