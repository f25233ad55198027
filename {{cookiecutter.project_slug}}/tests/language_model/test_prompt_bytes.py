"""A prompt from a terminal in another encoding: Latin-1 bytes reach generate.py as they are, and are refused in one
line that names the byte, before any checkpoint is read."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def test_a_prompt_that_is_not_utf8_is_one_line_naming_the_byte() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "LC_ALL": "C.UTF-8"}
    argv = [sys.executable.encode(), b"generate.py", b"--checkpoint", b"missing.ckpt", b"--prompt", b"caf\xe9 au lait"]
    done = subprocess.run(argv, capture_output=True, cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().strip() == (
        "error: --prompt: is not UTF-8 text (byte 0xe9 at character 4); set the terminal to UTF-8, or pass the text "
        "in UTF-8"
    )
