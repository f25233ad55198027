"""One folder per task, each with a `TASK` for `lightning_gpu_engine.train`; the engine never imports them."""
