"""One folder per task, each with a `TASK` for `engine.run.main`; the engine never imports them."""
