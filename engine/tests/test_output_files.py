"""Outputs written whole or not at all (tools/files.py), by writers that share one: a sweep's workers each
write its report; and a partial output is watched from before it exists, so that no kill leaves one behind."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lightning_gpu_engine import ConfigError
from lightning_gpu_engine.checkpoint import files, watcher
from lightning_gpu_engine.tools.files import PartialFolder, partial_path, write_text

WRITERS, ROUNDS = 4, 25


def test_writers_taking_turns_at_one_output_each_publish_whole_and_none_fails(tmp_path: Path) -> None:
    """A writer let in when the one before let go of the lock, before it renamed the file into place, truncated what
    was being published, or found its partial file renamed away: a sweep worker exited 1 on FileNotFoundError."""
    final = tmp_path / "report.txt"
    texts = [f"writer {w}\n" * 2000 for w in range(WRITERS)]
    failures: list[BaseException] = []
    seen: list[str] = []

    def writer(text: str) -> None:
        try:
            for _ in range(ROUNDS):
                write_text(final, text, wait=True)
                seen.append(final.read_text())
        except BaseException as err:  # a thread cannot fail the test: it reports
            failures.append(err)

    threads = [threading.Thread(target=writer, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[0]
    assert len(seen) == WRITERS * ROUNDS and all(text in texts for text in seen), "a published report was not whole"
    assert not partial_path(final).exists()


def test_a_partial_is_watched_before_it_exists_and_a_refused_ones_watcher_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGKILL between a partial's creation and its watcher's start left the partial for good (an HF export killed
    as its folder appeared); and a partial refused as another run's needs no watcher."""
    existed: list[bool] = []

    def watch(partial: Path) -> object:
        existed.append(partial.exists())
        return real(partial)

    real = files.remove_when_abandoned
    monkeypatch.setattr(files, "remove_when_abandoned", watch)
    with PartialFolder(tmp_path / "exported", "output"):
        pass
    files.discard(files.open_partial(tmp_path / "report.txt", watched=True))
    assert existed == [False, False], "a watcher started after its partial was made"

    with PartialFolder(tmp_path / "exported", "output"):
        watching = list(watcher._watching)
        with pytest.raises(ConfigError):
            PartialFolder(tmp_path / "exported", "output")  # another run's: refused
        assert watcher._watching == watching, "the refused partial's watcher was left running"
