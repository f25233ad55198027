"""The sweep's results: a table of the best trials, the command that reproduces the best, and plots as PNG files."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from lightning_gpu_engine import ConfigError, check_output, fail, open_output, publish, write_text

from .trials import counted

TOP = 5
PLOTS = {
    "history.png": "plot_optimization_history",
    "importances.png": "plot_param_importances",
    "parallel_coordinates.png": "plot_parallel_coordinate",
    "intermediate_values.png": "plot_intermediate_values",
}


def report(study: optuna.Study, sweep_dir: Path, metric: str, option: str = "output_dir") -> list[Path]:
    """Print the table, write report.txt and the plots; the plots that could be drawn. `option`: the flag that
    named `sweep_dir`, which a folder that cannot take them is blamed on."""
    try:  # before the table is printed: one line, not a traceback after it
        check_output(sweep_dir / "report.txt", option, wait=True)
    except ConfigError as err:
        fail(str(err))
    trials = counted(study.get_trials(deepcopy=False))  # a trial stopped and continued shows once, as it ended
    sign = 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0
    done = sorted((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: sign * float(t.value or 0))
    states = [t.state.name.lower() for t in trials]
    names = {"complete": "complete", "pruned": "pruned", "fail": "failed", "running": "running", "waiting": "waiting"}
    counts = ", ".join(f"{states.count(s)} {name}" for s, name in names.items() if s in states)
    lines = [f"{len(trials)} trials: {counts or 'none'}"]
    if done:
        lines.append(f"{'trial':>5}  {metric:>10}  {'steps':>6}  {'seconds':>8}  parameters")
        for t in done[:TOP]:
            shown = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items())
            steps, seconds = t.user_attrs.get("steps", "?"), t.user_attrs.get("seconds", "?")
            lines.append(f"{t.number:>5}  {t.value:>10.4f}  {steps:>6}  {seconds:>8}  {shown}")
        best = done[0]
        checkpoints = sorted(Path(best.user_attrs["output_dir"], "checkpoints").glob("best-*.ckpt"))
        kept = checkpoints[-1] if checkpoints else "none"
        lines.append(f"best: trial {best.number}, {metric}={best.value:.4f}, checkpoint {kept}")
        lines.append(f"reproduce: {best.user_attrs['command']}")
    failed = [t for t in trials if t.state == TrialState.FAIL and "error" in t.user_attrs]
    lines += [f"trial {t.number} failed: {t.user_attrs['error']}" for t in failed]
    text = "\n".join(lines)
    print(text, flush=True)
    write_text(sweep_dir / "report.txt", text + "\n", wait=True)
    return plot(study, sweep_dir / "plots")


def plot(study: optuna.Study, folder: Path) -> list[Path]:
    """Each plot as a PNG, drawn without a display; one that needs more trials than there are is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, function in PLOTS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
            try:
                axes: Any = getattr(plots, function)(study)
            except (ValueError, RuntimeError, ZeroDivisionError):  # e.g. importances of a single completed trial
                continue
        figure = (axes[0] if hasattr(axes, "__len__") else axes).figure
        figure.set_size_inches(9, 6)
        # a plot whole or not at all, as every output; the sweep's other workers write it too, each in turn
        partial = open_output(folder / name, "output_dir", watched=False, wait=True)
        figure.savefig(partial.name, format="png", dpi=100, bbox_inches="tight")
        partial.close()
        publish(Path(partial.name), folder / name)
        plt.close(figure)
        written.append(folder / name)
    return written
