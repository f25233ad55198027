"""--keep-last K: each save of `last.ckpt` (every --checkpoint-every, each epoch's end, a stop's) is kept too as
`step-<N>.ckpt` beside it, N its optimizer step, and only the K newest of those are left. An older one is removed only
once the newer one is whole; `--resume checkpoints/step-<N>.ckpt` continues from any of them, checked as `last` is.

On a disk the copy costs no bytes: it is a hard link to the same file, or a folder of hard links to a sharded
checkpoint's files (a filesystem without hard links gets a copy), published as every checkpoint is (files.py,
sharded.py). On object storage, mirror.py copies it within the store.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from lightning_gpu_engine.tools.files import partial_path, publish

LAST = "last.ckpt"
STEP = re.compile(r"^step-(\d+)\.ckpt$")


def step_name(step: int) -> str:
    return f"step-{step:06d}.ckpt"


def beyond(saved: dict[str, float], keep: int) -> list[str]:
    """Of the step checkpoints (name: when it was saved), those past the `keep` newest; a tie goes by the step."""
    steps = [(when, int(found.group(1)), name) for name, when in saved.items() if (found := STEP.match(name))]
    return [name for *_, name in sorted(steps, reverse=True)[keep:]]


def keep_step(last: Path, step: int, keep: int) -> list[Path]:
    """`last`, just published whole, kept as step-<step>.ckpt; then the step checkpoints past the `keep` newest are
    removed, which it returns."""
    from lightning_gpu_engine.checkpoint.sharded import fresh_folder, publish_folder, remove, remove_shard_folders

    final = last.with_name(step_name(step))
    if last.is_symlink():  # sharded: a folder of its own, so each name's folders come and go with it alone
        folder = fresh_folder(final)
        folder.mkdir()
        for item in last.resolve().iterdir():
            _link(item, folder / item.name)
        publish_folder(folder, final)
    else:
        partial = partial_path(final)
        partial.unlink(missing_ok=True)
        _link(last, partial)
        publish(partial, final)
        remove_shard_folders(final)  # a step saved sharded before, by a run resumed with --checkpoint-format file
    saved = {path.name: path.lstat().st_mtime for path in last.parent.glob("step-*.ckpt")}
    old = [last.parent / name for name in beyond(saved, keep)]
    for path in old:
        remove(path)
    return old


def _link(source: Path, link: Path) -> None:
    try:
        os.link(source, link)
    except OSError:  # no hard links here (some FUSE and network filesystems)
        shutil.copyfile(source, link)
