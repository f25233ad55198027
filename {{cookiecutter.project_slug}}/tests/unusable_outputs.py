"""What the output tests of both tasks share: every way an output cannot be put in place, and the check that an entry
point, run in this process through its main, refuses each in one line naming its flag, before any work, writing
nothing (the engine's tools/files.py is the one path every output goes through)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from types import ModuleType

import pytest


@contextmanager
def held(partial: Path, folder: bool) -> Iterator[None]:
    """The lock that a run still writing `partial` holds."""
    if folder:
        partial.mkdir()
    fd = os.open(partial, os.O_RDONLY | (0 if folder else os.O_CREAT))
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


def unusable(
    tmp: Path, name: str, folder: bool, suffix: str = ""
) -> Iterator[tuple[str, Path, str, AbstractContextManager[None]]]:
    """Each unusable output, in a folder of its own: (the case, the path, what the line says, what holds it).
    `suffix`: the writer's after `.partial` (an exporter that wants its own)."""
    wrong = tmp / "wrong" / name
    wrong.parent.mkdir()
    wrong.write_text("a file\n") if folder else wrong.mkdir()
    yield "the other kind", wrong, f"{wrong} is a {'file' if folder else 'folder'}; give ", nullcontext()
    yield "a missing folder", tmp / "no" / name, f"the folder {tmp / 'no'} does not exist", nullcontext()
    yield "a read-only place", Path("/proc") / name, "cannot write in /proc (", nullcontext()
    busy = tmp / "busy" / name
    busy.parent.mkdir()
    said = f"another process is writing {busy}; wait for it to finish"
    yield "being written", busy, said, held(busy.with_name(f".{name}.partial{suffix}"), folder)


def assert_each_refused(
    main: ModuleType,
    args: list[str],
    flag: str,
    name: str,
    folder: bool,
    tmp: Path,
    capsys: pytest.CaptureFixture[str],
    suffix: str = "",
) -> None:
    """`main.main(ARGS FLAG=OUTPUT)` for each unusable OUTPUT named `name`: exit 2, one line, nothing new on disk."""
    unclean = []
    for case, final, said, holding in unusable(tmp, name, folder, suffix):
        with holding:
            before = sorted(tmp.rglob("*"))
            with pytest.raises(SystemExit) as exit_info:
                main.main([*args, f"{flag}={final}"])
            after = sorted(tmp.rglob("*"))
        err = capsys.readouterr().err.strip()
        if not (exit_info.value.code == 2 and err.startswith(f"error: {flag}: ") and said in err and "\n" not in err):
            unclean.append(f"{case}: exit {exit_info.value.code}: {err[-400:]}")
        elif after != before:
            unclean.append(f"{case}: left {sorted(set(after) - set(before))}")
    assert not unclean, "\n".join(unclean)
