"""`sweep.py`: hyperparameter search on Optuna; every trial is a real `train.py` run, with its resume and signals."""
