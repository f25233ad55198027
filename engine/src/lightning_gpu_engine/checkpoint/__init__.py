"""Writing and reading checkpoints: atomic single files and sharded folders, when they are saved and after which hooks,
their mirror on object storage, and the checks before a resume.

Layer 2: imports `config` and `tools`.
"""
