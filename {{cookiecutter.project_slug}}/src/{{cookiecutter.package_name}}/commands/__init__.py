"""The entry points as functions: each root script (train.py, predict.py, ...) and each console script that
pyproject.toml's [project.scripts] installs (<project>-train, <project>-predict, ...) calls the same `cli()`, so an
installed project runs from any directory with the same flags and exit codes as a clone. `main(argv)` is the command
for code and tests, returning what it did (a run's metrics); `cli()` returns nothing, as a console script exits with
what its function returns."""
