"""export.py: ONNX and torch.export files that a serving process loads alone, computing what PyTorch computes, for any
batch and image size; a mismatch or a missing ONNX Runtime is one line and no file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from torch import Tensor
from torchvision.io import decode_image

import export
from {{ cookiecutter.package_name }}.tasks.image_classification.export import (
    ServingModel,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.predict import (
    load_classifier,
)

from .trained_model import run_python, trained_checkpoint

Held = list[tuple[Path, str]]


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Held]:
    return trained_checkpoint(tmp_path_factory.getbasetemp() / "tiny-classifier")


def load_exported(path: Path) -> tuple[Callable[[Tensor], Tensor], list[str]]:
    """What a serving process does: the file alone, no code of this project; the model and its class names."""
    if path.suffix == ".onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = json.loads(session.get_modelmeta().custom_metadata_map["class_names"])
        return lambda images: torch.from_numpy(session.run(None, {"images": images.numpy()})[0]), names
    extra_files = {"class_names": ""}
    program = torch.export.load(str(path), extra_files=extra_files).module()
    return lambda images: program(images).detach(), json.loads(extra_files["class_names"])


@pytest.mark.parametrize("suffix", [".onnx", ".pt2"])
def test_export_matches_pytorch_for_other_batch_and_image_sizes_and_labels_held_out_images(
    suffix: str, trained: tuple[Path, Held], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint, held = trained
    output = tmp_path / f"model{suffix}"
    form = "onnx" if suffix == ".onnx" else "torch-export"
    export.main([f"--checkpoint={checkpoint}", f"--format={form}", f"--output={output}"])
    printed = capsys.readouterr().out
    assert f"exported {output}" in printed and "MiB" in printed and "max |difference| from PyTorch" in printed

    run, names = load_exported(output)
    reference = ServingModel(load_classifier(str(checkpoint), channels_last=False, compile=False)).eval()
    generator = torch.Generator().manual_seed(7)
    for n, height, width in ((3, 37, 29), (7, 24, 52)):  # export.py traced a batch of 2 at another size
        images = torch.randint(0, 256, (n, 3, height, width), dtype=torch.uint8, generator=generator)
        with torch.no_grad():
            expected = reference(images)
        assert run(images).shape == (n, 3)
        assert (run(images) - expected).abs().max() <= 1e-3 * max(1.0, float(expected.abs().max()))
    # The eval crop and normalisation are in the graph: plain decoded images, each at its own size, get their class.
    assert names == reference.classifier.hparams["class_names"] == sorted({name for _, name in held})
    correct = sum(names[int(run(decode_image(str(path))[None]).argmax())] == name for path, name in held)
    assert correct >= 0.9 * len(held), f"{correct}/{len(held)} right; chance is 1/3"


def test_export_that_differs_from_pytorch_beyond_the_tolerance_fails_in_one_line_and_writes_nothing(
    trained: tuple[Path, Held], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint, _ = trained
    # ONNX Runtime's convolutions sum in another order than PyTorch's: never within 1e-12 of them.
    args = [f"--checkpoint={checkpoint}", "--format=onnx", f"--output={tmp_path / 'model.onnx'}", "--tolerance=1e-12"]
    with pytest.raises(SystemExit) as exit_info:
        export.main(args)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--format: the onnx export differs from PyTorch by" in err, err
    assert list(tmp_path.iterdir()) == []


def test_onnx_without_onnxruntime_says_so_in_one_line(trained: tuple[Path, Held], tmp_path: Path) -> None:
    checkpoint, _ = trained
    blocked = (
        "import runpy, sys; sys.modules['onnxruntime'] = None; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    args = [f"--checkpoint={checkpoint}", "--format=onnx", f"--output={tmp_path / 'model.onnx'}"]
    result = run_python("-c", blocked, str(ROOT / "export.py"), *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --format: onnx needs onnx, onnxscript and onnxruntime (onnxruntime is not installed): "
        'pip install -e ".[export]", or use --format torch-export'
    ]
    assert list(tmp_path.iterdir()) == []


def test_export_of_a_missing_checkpoint_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        export.main([f"--checkpoint={tmp_path / 'nope.ckpt'}", "--format=torch-export"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: --checkpoint: no file at {tmp_path / 'nope.ckpt'}")
