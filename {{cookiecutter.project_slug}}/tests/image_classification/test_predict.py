"""predict.py on a model train.py trained: right labels, one row per input in input order, on 1 and 2 processes, and
one line for each bad input with nothing half-written."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
import torch
from lightning_gpu_engine import resolve_hardware
from torchvision.io import decode_image, encode_jpeg

import predict
from {{ cookiecutter.package_name }}.tasks.image_classification import decoding
from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    PredictConfig,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.images import (
    is_encoded,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.predict import (
    REQUIRED_HPARAMS,
    Predictor,
    load_classifier,
    predict_loader,
)

from .trained_model import run_script, trained_checkpoint

Held = list[tuple[Path, str]]
# Pinned, not left to the bake's defaults (which may be 16-mixed, a CUDA-only precision), as in conftest's tiny_args.
CPU = ["--accelerator=cpu", "--precision=32-true"]


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Held]:
    return trained_checkpoint(tmp_path_factory.getbasetemp() / "tiny-classifier")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_predict_labels_held_out_images_one_row_per_input_in_order_skipping_an_unreadable_one_with_a_warning(
    trained: tuple[Path, Held], tmp_path: Path
) -> None:
    checkpoint, held = trained
    truth = {str(path): name for path, name in held}
    listed = [path for path, _ in held[::4]][::-1]  # a list file, in an order of its own; one entry relative to it
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n but then no image at all")
    lines = [os.path.relpath(listed[0], tmp_path), str(broken), *(str(p) for p in listed[1:])]
    (tmp_path / "list.txt").write_text("# images to label\n" + "\n".join(lines) + "\n\n")
    folder, single = held[0][0].parent, held[-1][0]
    output = tmp_path / "predictions.csv"

    args = ["--checkpoint", str(checkpoint), str(tmp_path / "list.txt"), str(folder), str(single)]
    result = run_script("predict.py", *args, f"--output={output}", *CPU, "--batch-size=8")
    assert result.returncode == 0, result.stderr[-3000:]

    rows = read_csv(output)
    expected = [tmp_path / os.path.relpath(listed[0], tmp_path), *listed[1:], *sorted(folder.glob("*.png")), single]
    assert [Path(row["path"]).resolve() for row in rows] == [p.resolve() for p in expected]
    correct = sum(row["predicted"] == truth[str(Path(row["path"]).resolve())] for row in rows)
    assert correct >= 0.9 * len(rows), f"{correct}/{len(rows)} right; chance is 1/3"
    # --top-k defaults to 5, capped at the 3 classes; most probable first, the first being the prediction.
    assert list(rows[0]) == ["path", "predicted", "class_1", "prob_1", "class_2", "prob_2", "class_3", "prob_3"]
    for row in rows:
        probs = [float(row[f"prob_{i}"]) for i in (1, 2, 3)]
        assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1, abs=1e-4)
        assert row["class_1"] == row["predicted"] and {row[f"class_{i}"] for i in (1, 2, 3)} == set(truth.values())
    assert f"predicted {len(rows)} images, 1 unreadable skipped" in result.stdout and str(output) in result.stdout
    assert "decode=cpu" in result.stdout, "--decode auto without CUDA: the loader workers decode"
    assert f"warning: skipping unreadable image {broken}" in result.stderr


@pytest.mark.multiprocess
def test_two_cpu_processes_predict_every_image_exactly_once_in_input_order(
    trained: tuple[Path, Held], tmp_path: Path
) -> None:
    checkpoint, held = trained
    images = [path for path, _ in held][:-1]  # 29: an odd number, which two ranks cannot split evenly
    (tmp_path / "list.txt").write_text("\n".join(str(p) for p in images))
    output = tmp_path / "predictions.csv"

    args = ["--checkpoint", str(checkpoint), str(tmp_path / "list.txt"), f"--output={output}", "--top-k=1"]
    result = run_script("predict.py", *args, *CPU, "--devices=2", "--batch-size=4", "--decode=cpu")
    assert result.returncode == 0, result.stderr[-3000:]

    assert "cpu x2" in result.stdout and "decode=cpu" in result.stdout
    rows = read_csv(output)
    assert [row["path"] for row in rows] == [str(p) for p in images]
    assert sum(row["predicted"] == p.parent.name for row, p in zip(rows, images, strict=True)) >= 0.9 * len(images)


def test_jsonl_output_by_suffix_with_top_k(trained: tuple[Path, Held], tmp_path: Path) -> None:
    checkpoint, held = trained
    good = [held[15][0], held[0][0]]
    output = tmp_path / "predictions.jsonl"

    args = [str(good[0]), str(good[1]), "--checkpoint", str(checkpoint), f"--output={output}"]
    metrics = predict.main([*args, *CPU, "--num-workers=0", "--top-k=2"])

    assert metrics["images"] == 2 and metrics["skipped"] == 0
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [row["path"] for row in rows] == [str(p) for p in good]
    assert [row["predicted"] for row in rows] == [p.parent.name for p in good]
    assert all(len(row["top_k"]) == 2 and row["top_k"][0]["class"] == row["predicted"] for row in rows)


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write in; root ignores permission bits, but not a read-only file system."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return Path("/sys") if os.geteuid() == 0 else folder


BAD_INPUTS = {
    "missing checkpoint": (["--checkpoint={tmp}/nope.ckpt"], "--checkpoint: no file at"),
    "not a Lightning checkpoint": (["--checkpoint={tmp}/weights.ckpt"], "--checkpoint: .*weights.ckpt is not a "),
    "another project's checkpoint": (
        ["--checkpoint={tmp}/other.ckpt"],
        f"--checkpoint: .* not a checkpoint of this project's train.py .its hparams lack {', '.join(REQUIRED_HPARAMS)}",
    ),
    "a pickle": (["--checkpoint={tmp}/pickle.ckpt"], "--checkpoint: .* holds a pickled argparse.Namespace"),
    "not a checkpoint at all": (["--checkpoint={tmp}/text.ckpt"], "--checkpoint: .*text.ckpt is not a "),
    "folder without images": (["{tmp}/empty"], "INPUT: no images in .*empty"),
    "missing input": (["{tmp}/nowhere.png"], "INPUT: .*nowhere.png: no such file or folder"),
    "output in a missing folder": (["--output={tmp}/missing/p.csv"], "--output: the folder .*missing does not exist"),
    "output in a read-only folder": (["--output={readonly}/p.csv"], "--output: cannot write in"),
    "output of unknown type": (["--output={tmp}/p.txt"], "--output: .* must end in .csv or .jsonl"),
    "top-k 0": (["--top-k=0"], "--top-k: must be 1 or more, got 0"),
    "gpu decoding without a GPU": (["--decode=gpu"], "--decode: gpu needs a CUDA GPU, not cpu; use cpu or auto"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_each_bad_input_is_one_line_exit_2_and_nothing_written(
    case: str, trained: tuple[Path, Held], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint, held = trained
    torch.save({"weight": torch.zeros(2)}, tmp_path / "weights.ckpt")
    lightning = {"global_step": 5, "loops": {}, "optimizer_states": [], "epoch": 0}  # as Lightning saves, but not ours
    torch.save({"state_dict": {}, **lightning, "hyper_parameters": {"lr": 0.1}}, tmp_path / "other.ckpt")
    torch.save({"hyper_parameters": argparse.Namespace(lr=0.1)}, tmp_path / "pickle.ckpt")
    (tmp_path / "text.ckpt").write_text("not a checkpoint\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    readonly = read_only_folder(tmp_path)
    extra, message = BAD_INPUTS[case]
    extra = [arg.format(tmp=tmp_path, readonly=readonly) for arg in extra]
    defaults = [str(held[0][0]), f"--checkpoint={checkpoint}", f"--output={tmp_path / 'p.csv'}", *CPU]
    before = sorted(tmp_path.rglob("*"))

    with pytest.raises(SystemExit) as exit_info:
        predict.main([*defaults, *extra])

    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert re.search(message, err), err
    assert sorted(tmp_path.rglob("*")) == before  # no output, and no temporary file left behind


def test_auto_decodes_the_inputs_on_the_gpu_only_with_cuda_torchcodec_and_mostly_jpegs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jpegs = [Path(f"photo{i}.JPG") for i in range(3)] + [Path("drawing.png")]
    pngs = [Path(f"scan{i}.png") for i in range(3)] + [Path("photo.jpg")]

    def choice(accelerator: str, images: list[Path], decode: str = "auto") -> str:
        cfg = PredictConfig(inputs=("x",), checkpoint="x.ckpt", decode=decode)
        return decoding.decode_choice(cfg.decode, accelerator, images=images)

    monkeypatch.setattr(decoding, "torchcodec_available", lambda: True)
    assert choice("cuda", jpegs) == "gpu"
    assert choice("cuda", pngs) == "cpu", "mostly PNGs: nvJPEG cannot take them"
    assert choice("cpu", jpegs) == "cpu"
    assert choice("cuda", jpegs, decode="cpu") == "cpu"
    assert choice("cuda", pngs, decode="gpu") == "gpu", "asked for: the PNGs then fall back to the CPU per sample"
    monkeypatch.setattr(decoding, "torchcodec_available", lambda: False)
    assert choice("cuda", jpegs) == "cpu"


def headers_only_jpeg(image: torch.Tensor) -> bytes:
    """A JPEG whose headers promise a plain colour image but with no scan data: the loader worker's header check
    passes it as GPU-decodable, and only decoding the batch finds it unreadable (a corrupt body, as in the wild)."""
    data = bytes(encode_jpeg(image).numpy())
    return data[: data.index(b"\xff\xda")] + b"\xff\xd9"


def test_bytes_batches_are_decoded_in_predict_step_as_the_workers_decode_and_an_undecodable_file_is_dropped(
    trained: tuple[Path, Held], tmp_path: Path
) -> None:
    """The `--decode gpu` path on the CPU device: workers only read bytes, Predictor keeps them on the host and
    decodes in predict_step (decode_each falls back to the CPU decoder on a CPU device)."""
    checkpoint, held = trained
    paths = [path for path, _ in held[::3]]
    for i, path in enumerate(paths[:4]):  # JPEGs among the PNGs, as GPU decoding is for
        paths[i] = tmp_path / f"{path.parent.name}-{i}.jpg"
        paths[i].write_bytes(bytes(encode_jpeg(decode_image(str(path))).numpy()))
    bad = tmp_path / "corrupt.jpg"
    bad.write_bytes(headers_only_jpeg(decode_image(str(paths[5]))))
    paths.insert(6, bad)
    classifier = load_classifier(str(checkpoint)).eval()
    predictor = Predictor(classifier, top_k=3, paths=paths)
    cfg = PredictConfig(inputs=("x",), checkpoint=str(checkpoint), accelerator="cpu", precision="32-true")
    hw = resolve_hardware(cfg.training_config())
    assert decoding.decode_choice(cfg.decode, hw.accelerator, images=paths) == "cpu", (
        "auto on a CPU; the bytes path is asked for below"
    )
    results = {}
    for decode in ("cpu", "gpu"):
        loader = predict_loader(
            paths, classifier.hparams, dataclasses.replace(hw, choices={"decode": decode}, num_workers=0), 4
        )
        rows: list[tuple[int, list[float]]] = []
        warned = pytest.warns(UserWarning, match=f"skipping unreadable image {re.escape(str(bad))}")
        with torch.inference_mode(), warned:
            for n, batch in enumerate(loader):
                assert is_encoded(batch) == (decode == "gpu")
                on_device = predictor.transfer_batch_to_device(batch, torch.device("cpu"), 0)
                index, top, _ = predictor.predict_step(on_device, n)
                rows += list(zip(index.tolist(), top.tolist(), strict=True))
        results[decode] = rows
    assert sorted(i for i, _ in results["gpu"]) == [i for i in range(len(paths)) if i != 6], "each readable file once"
    expected = dict(results["cpu"])  # the worker put the next file in the unreadable one's place: index 7 twice
    for i, probs in results["gpu"]:
        assert probs == pytest.approx(expected[i], abs=1e-5), f"{paths[i]}: decoded in the step != in the worker"
