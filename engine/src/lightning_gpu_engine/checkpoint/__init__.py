"""Writing and reading checkpoints: atomic single files and sharded folders, when they are saved, the run folder that
holds them, and the checks before a resume."""
