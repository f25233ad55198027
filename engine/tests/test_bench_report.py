"""bench.py's verdict on Lightning against plain PyTorch: a ratio is read only with the spread of its rounds."""

from __future__ import annotations

import pytest

from lightning_gpu_engine.bench.report import compare, ratio_line


@pytest.mark.parametrize(
    ("rounds", "verdict"),
    [
        ([(100.0, 104.0), (98.0, 100.0), (99.0, 100.0)], "(median of 3 interleaved rounds, 0.962 to 0.990)"),
        (
            [(100.0, 104.0), (70.0, 10.0), (99.0, 101.0)],
            "(median of 3 interleaved rounds, 0.962 to 7.000; spread 616% > 5%: too noisy to mean anything, rerun "
            "on an idle machine)",
        ),
        ([(100.0, 104.0)], "(1 round: no spread to judge it by; --rounds 3 or more)"),
    ],
)
def test_a_lightning_over_plain_ratio_whose_rounds_disagree_is_called_too_noisy(
    rounds: list[tuple[float, float]], verdict: str
) -> None:
    """What a loaded CPU once printed as "7.113" with no warning: a ratio is read only with its spread."""
    results = {"plain": {"name": "plain"}, **compare(rounds)}
    assert ratio_line(results).endswith(verdict)
    assert results["lightning_over_plain_noisy"] == (len(rounds) != 3 or rounds[1][1] == 10.0)
