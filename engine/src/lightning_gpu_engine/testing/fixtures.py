"""The fixtures every suite of a project and the engine's own share, for runs on one machine that several suites
share (machine_sharing.py): import them into a conftest.py from `lightning_gpu_engine.testing`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lightning_gpu_engine.testing.machine_sharing import cores_to_myself, free_port, session_folder
from lightning_gpu_engine.testing.machine_sharing import private_caches as private_caches_in
from lightning_gpu_engine.testing.reference_runs import ReferenceRuns


@pytest.fixture(scope="session", autouse=True)
def private_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every library cache in this session's folder (shared by its xdist workers): no run reads what another
    suite's left, or loses what it wrote to another's clean-up."""
    root = session_folder(tmp_path_factory.getbasetemp()) / "caches"
    with pytest.MonkeyPatch.context() as patch:
        for variable, folder in private_caches_in(root).items():
            patch.setenv(variable, folder)
        yield root


@pytest.fixture(autouse=True)
def master_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """Every run a test starts, a plain --devices 2 included, meets its ranks on a port of this worker's range: where
    Lightning picks one itself, it binds in the ephemeral range, which another process may have been handed."""
    port = free_port()
    monkeypatch.setenv("MASTER_PORT", str(port))
    return port


@pytest.fixture(autouse=True)
def multiprocess_tests_one_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A test marked `multiprocess` (or a conformance check its class names in `multiprocess_checks`) waits for any
    other such test on the machine to end: two runs of two ranks each on two cores starve each other into timeouts."""
    checks = getattr(getattr(request.node, "cls", None), "multiprocess_checks", ())
    if request.node.get_closest_marker("multiprocess") is None and request.node.originalname not in checks:
        yield
        return
    with cores_to_myself(session_folder(tmp_path_factory.getbasetemp()) / "multiprocess.lock"):
        yield


@pytest.fixture(scope="session")
def references(tmp_path_factory: pytest.TempPathFactory) -> ReferenceRuns:
    """The session's uninterrupted reference runs, each trained once (reference_runs.py)."""
    return ReferenceRuns(session_folder(tmp_path_factory.getbasetemp()) / "references")
