"""--compile-cache: a compiled run keeps inductor's caches and torch's artifacts file where the next start finds them,
a start elsewhere loads the file, a file of another torch or device or an unreadable one is passed over in one line,
and `none` leaves everything to torch. A compiled run costs ~15 s of CPU: the first one's folder serves three tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lightning_gpu_engine.perf.compile_artifacts import (
    ARTIFACTS,
    load,
    write,
)

from .conftest import TOY, run_toy

COMPILED = [*TOY, "--max-epochs=1", "--compile"]
FIRST_STEP = re.compile(
    r"^compile cache: first training step .* (\d+) compiled graphs from the cache, (\d+) compiled anew$",
    re.M,
)


@pytest.fixture(scope="module")
def first(my_task: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A compiled run into a fresh --output-dir, the default cache: its output dir and what it printed."""
    output = tmp_path_factory.mktemp("first") / "run"
    return output, run_toy(my_task, *COMPILED, f"--output-dir={output}")


def header(artifacts: Path) -> dict[str, str]:
    return json.loads(artifacts.read_bytes().partition(b"\n")[0])


def graphs(stdout: str) -> tuple[int, int]:
    """(from the cache, compiled anew) in the run's first training step."""
    found = FIRST_STEP.search(stdout)
    assert found is not None, stdout[-3000:]
    return int(found.group(1)), int(found.group(2))


def test_a_compiled_run_keeps_its_caches_and_artifacts_in_its_output_dir(
    first: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    output, done = first
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cache = output / "compile-cache"
    assert header(cache / ARTIFACTS) == {**header(cache / ARTIFACTS), "torch": torch.__version__, "device": "cpu"}
    assert any((cache / "fxgraph").iterdir()), "inductor's own cache is not in the run's folder"
    hits, compiled = graphs(done.stdout)
    assert hits == 0 and compiled > 0


def test_a_start_elsewhere_loads_the_artifacts_and_compiles_nothing_anew(
    first: tuple[Path, subprocess.CompletedProcess[str]], my_task: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "shared-cache"  # another node's empty cache: only the artifacts file was carried over
    elsewhere.mkdir()
    shutil.copy(first[0] / "compile-cache" / ARTIFACTS, elsewhere)
    done = run_toy(my_task, *COMPILED, f"--output-dir={tmp_path / 'run'}", f"--compile-cache={elsewhere}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    loaded = rf"^compile cache: loaded [1-9]\d* compiled graphs from {elsewhere / ARTIFACTS} "
    assert re.search(loaded, done.stdout, re.M), done.stdout[-3000:]
    hits, compiled = graphs(done.stdout)
    assert hits > 0 and compiled == 0
    assert not (tmp_path / "run" / "compile-cache").exists()


def test_artifacts_of_another_torch_are_passed_over_in_one_line_and_replaced(
    first: tuple[Path, subprocess.CompletedProcess[str]], my_task: Path, tmp_path: Path
) -> None:
    head, _, payload = (first[0] / "compile-cache" / ARTIFACTS).read_bytes().partition(b"\n")
    old = tmp_path / "old-cache"
    old.mkdir()
    (old / ARTIFACTS).write_bytes(json.dumps({**json.loads(head), "torch": "2.0.0"}).encode() + b"\n" + payload)
    done = run_toy(my_task, *COMPILED, f"--output-dir={tmp_path / 'run'}", f"--compile-cache={old}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: compile cache:")]
    assert len(notes) == 1 and "made by torch 2.0.0 on cpu" in notes[0] and "ignored" in notes[0], notes
    assert graphs(done.stdout)[0] == 0
    assert header(old / ARTIFACTS)["torch"] == torch.__version__


def test_none_leaves_the_caches_to_torch_and_writes_nothing(my_task: Path, tmp_path: Path) -> None:
    done = run_toy(my_task, *COMPILED, f"--output-dir={tmp_path / 'run'}", "--compile-cache=none")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "compile cache" not in done.stdout
    assert not (tmp_path / "run" / "compile-cache").exists() and not list(tmp_path.rglob(ARTIFACTS))


def test_a_cache_holding_a_compiled_graph_cut_short_is_set_aside_and_the_run_compiles_anew(
    first: tuple[Path, subprocess.CompletedProcess[str]], my_task: Path, tmp_path: Path
) -> None:
    """A full disk or an unfinished copy cuts inductor's files short: every later run failed in importing one."""
    damaged = tmp_path / "cache"
    shutil.copytree(first[0] / "compile-cache", damaged)
    sources = sorted(damaged.glob("*/*.py"))
    assert sources, "the compiled graphs' Python modules"
    for source in sources:
        source.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    done = run_toy(my_task, *COMPILED, f"--output-dir={tmp_path / 'run'}", f"--compile-cache={damaged}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: compile cache:")]
    [aside] = tmp_path.glob("cache.damaged-*")
    assert notes == [
        f"note: compile cache: {sources[0].relative_to(damaged)} in {damaged} is not what its name says (cut short, or "
        f"another torch's): the folder is set aside as {aside}; compiling anew"
    ]
    hits, compiled = graphs(done.stdout)
    assert hits == 0 and compiled > 0
    assert header(damaged / ARTIFACTS)["torch"] == torch.__version__, "the fresh folder has this run's artifacts"


@pytest.mark.parametrize(
    ("spoil", "device", "want"),
    [
        (lambda good: b"not a header\n" + good.partition(b"\n")[2], "cpu", "unreadable (no header line"),
        (lambda good: good[:-4], "cpu", "unreadable (its contents do not match their checksum"),
        (lambda good: good, "NVIDIA H100", "made by torch {torch} on cpu, not torch {torch} on NVIDIA H100: ignored"),
    ],
    ids=["no-header", "cut-short", "another-gpu"],
)
def test_an_unusable_artifacts_file_is_one_note(
    tmp_path: Path, spoil: Callable[[bytes], bytes], device: str, want: str
) -> None:
    path = tmp_path / ARTIFACTS
    write(path, b"graphs compiled on a cpu", "cpu", 1)
    path.write_bytes(spoil(path.read_bytes()))
    said = load(path, device)
    assert said.startswith(f"note: compile cache: {path} ") and want.format(torch=torch.__version__) in said, said
    assert "\n" not in said


def test_a_compile_cache_that_is_a_file_is_refused_in_one_line(my_task: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "cache"
    a_file.write_text("")
    done = run_toy(my_task, *TOY, f"--output-dir={tmp_path / 'run'}", f"--compile-cache={a_file}")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: --compile-cache: {a_file} is a file, not a directory; give a directory path"
    ]
    assert not (tmp_path / "run").exists()
