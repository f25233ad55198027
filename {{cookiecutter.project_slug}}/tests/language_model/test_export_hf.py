"""export.py: a checkpoint as a Hugging Face GPT-2 folder, loaded by `transformers` itself with the checkpoint's logits,
greedy text that agrees, and read back by `generate.py --pretrained`; every bad input refused in one line."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, Launch, run_script, run_train, wait, wait_until

from {{ cookiecutter.package_name }}.tasks.language_model.sampling import (
    load_checkpoint,
)

from .conftest import TINY
from .test_text_data import write_corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A checkpoint with the byte tokenizer, and one with a BPE learnt by train_tokenizer.py."""
    root = tmp_path_factory.mktemp("trained")
    write_corpus(root / "texts")
    made = run_script(
        "train_tokenizer.py", f"--data-dir={root / 'texts'}", "--vocab-size=300", f"--output={root / 't.json'}"
    )
    assert made.returncode == 0, made.stderr[-3000:]
    runs = {
        "bytes": ["--train-tokens=60000"],
        "bpe": ["--data=text", f"--data-dir={root / 'texts'}", f"--tokenizer={root / 't.json'}", "--max-epochs=3"],
    }
    checkpoints = {}
    for name, extra in runs.items():
        result = run_train(*TINY, "--max-epochs=2", *extra, f"--output-dir={root / name}")
        assert result.returncode == 0, result.stderr[-3000:]
        checkpoints[name] = root / name / "checkpoints" / "last.ckpt"
    return checkpoints


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe"])
def test_the_exported_folder_is_the_checkpoint_in_transformers(
    tokenizer: str, trained: dict[str, Path], tmp_path: Path
) -> None:
    import transformers  # declared in the dev extra: a plain import, so a missing declaration fails rather than skips

    folder = tmp_path / "exported"
    result = run_script("export.py", f"--checkpoint={trained[tokenizer]}", f"--output={folder}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert f"exported {folder}" in result.stdout and sorted(p.name for p in tmp_path.iterdir()) == ["exported"]

    net, ours = load_checkpoint(str(trained[tokenizer]))
    model = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    text = "the cat sat on a mat, near our old house."
    ids = ours.encode(text)
    assert theirs.encode(text) == ids  # the same ids, whichever tokenizer the run had
    ids = ids[: net.context]
    with torch.no_grad():
        expected = net.eval()(torch.tensor([ids]))[..., : net.vocab_size]
        torch.testing.assert_close(model(torch.tensor([ids])).logits, expected, atol=1e-4, rtol=0)
        prompt = ours.encode("the cat")
        greedy = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=ours.eot)
    samples = tmp_path / "greedy.jsonl"
    generated = run_script(
        "generate.py",
        f"--pretrained={folder}",
        "--prompt=the cat",
        "--top-k=1",
        "--max-new-tokens=12",
        f"--output={samples}",
    )
    assert generated.returncode == 0, generated.stderr[-3000:]
    ours_greedy = json.loads(samples.read_text())["tokens"]
    assert ours_greedy == greedy[0, len(prompt) : len(prompt) + len(ours_greedy)].tolist()


def test_every_bad_export_is_refused_in_one_line(trained: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    other = tmp_path / "classifier.ckpt"
    torch.save({"state_dict": {"net.fc.weight": torch.zeros(2, 2)}, "hyper_parameters": {"model": "resnet18"},
                "pytorch-lightning_version": "2.6.6"}, other)  # fmt: skip
    checkpoint = trained["bytes"]
    cases = {
        "": "--checkpoint: give a .ckpt from train.py",
        f"--checkpoint={tmp_path / 'none.ckpt'}": "--checkpoint: no file at",
        f"--checkpoint={other}": "is not a language model's checkpoint",
        f"--checkpoint={checkpoint} --format=onnx": "--format: 'onnx' is not one of",
        f"--checkpoint={checkpoint} --output={tmp_path / 'taken'}": "--output: TMP/taken exists; give a folder that",
        f"--checkpoint={checkpoint} --output={tmp_path / 'no' / 'dir'}": "--output: the folder TMP/no does not exist",
    }
    unclean = []
    for flags, expected in cases.items():
        before = sorted(tmp_path.rglob("*"))
        result = run_script("export.py", *flags.split())
        lines = result.stderr.strip().splitlines()
        if not (
            result.returncode == 2
            and len(lines) == 1
            and expected.replace("TMP", str(tmp_path)) in lines[0]
            and sorted(tmp_path.rglob("*")) == before
        ):
            unclean.append(f"{flags}: exit {result.returncode}: {result.stderr.strip()[-500:]}")
    assert not unclean, "\n".join(unclean)


def test_an_export_killed_outright_leaves_nothing_and_the_next_writes_files_every_user_can_read(
    trained: dict[str, Path], launch: Launch, tmp_path: Path
) -> None:
    """SIGKILL to the group mid-export (the OOM killer, `timeout -s KILL`): nothing of it can run after, yet its
    partial folder goes (a watcher); the next export's files all have the mode any file written here gets, so a
    serving container running as another user reads the weights too (safetensors writes them 0600)."""
    folder = tmp_path / "exported"
    export = launch([sys.executable, str(ROOT / "export.py"), f"--checkpoint={trained['bytes']}", f"--output={folder}"])
    wait_until(lambda: list(tmp_path.glob(".exported.partial*")), export, "the export's partial folder", every=0.002)
    os.killpg(export.pid, signal.SIGKILL)
    said = wait(export)
    assert export.returncode == -signal.SIGKILL, said[-3000:]
    # the partial folder's watcher, a process of its own, removes it once it sees its writer gone
    wait_until(lambda: list(tmp_path.iterdir()) == [], None, "no partial folder left")

    result = run_script("export.py", f"--checkpoint={trained['bytes']}", f"--output={folder}")
    assert result.returncode == 0, result.stderr[-3000:]
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (folder, *folder.iterdir())}
    assert modes == {name: oct(0o777 & ~umask if name == "exported" else 0o666 & ~umask) for name in modes}
