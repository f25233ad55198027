"""The sweep's sampler: Optuna's TPE, seeded per trial. A sampler seeded once per process repeats itself whenever a
process starts afresh: workers sharing a study (a SLURM array) drew the same values side by side, and a continued sweep
drew again what it drew before the stop. Trial numbers are unique in a study, so (--seed, trial number) never repeats,
and one worker's sweep is still the same from run to run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

STARTUP_TRIALS = 4  # random draws before TPE models the results: a tiny sweep is mostly these


def trial_seed(seed: int, number: int) -> int:
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


class TrialSeededTPE(BaseSampler):
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.by_trial: dict[int, TPESampler] = {}  # one per running trial, so its parameters are drawn independently

    def _of(self, trial: FrozenTrial) -> TPESampler:
        if trial.number not in self.by_trial:
            seed = trial_seed(self.seed, trial.number)
            self.by_trial[trial.number] = TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS)
        return self.by_trial[trial.number]

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}  # univariate TPE: each parameter is drawn on its own, in sample_independent

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._of(trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self.by_trial.pop(trial.number, None)
