"""Outputs written whole or not at all (checkpoint/files.py), by writers that share one: a sweep's workers each
write its report."""

from __future__ import annotations

import threading
from pathlib import Path

from lightning_gpu_engine.checkpoint.files import partial_path, write_text

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
