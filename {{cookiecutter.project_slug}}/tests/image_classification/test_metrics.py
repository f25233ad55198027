"""What the classifier's metrics mean, as train.py reports them: `acc` is the plain top-1 accuracy in every stage (the
share of images whose label predict.py gives right), `balanced_acc` the mean of the per-class accuracies, told apart
by an imbalanced test split; and --precision bf16-true, a listed choice, trains, validates and tests."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

import predict
import train

from .trained_model import write_images

CPU = ["--accelerator=cpu", "--strategy=auto", "--num-workers=0", "--logger=csv", "--image-size=16", "--batch-size=8"]
CPU += ["--max-epochs=1"]


def test_acc_is_the_plain_accuracy_of_the_tested_checkpoint_and_balanced_acc_the_per_class_mean(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_images(data / "train", 8, seed=1)
    write_images(data / "val", 2, seed=2)
    kept = {"red": 7, "green": 4, "blue": 2}  # an imbalanced test split
    for path, label in write_images(data / "test", 7, seed=3):
        if int(path.stem) >= kept[label]:
            path.unlink()
    # one step, no validation: the test scores last.ckpt, a network that gets some classes more right than others
    run = [*CPU, "--precision=32-true", "--data=folder", f"--data-dir={data}", "--max-steps=1"]
    metrics = train.main([*run, f"--output-dir={tmp_path / 'run'}"])
    labels = tmp_path / "labels.csv"
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    on_cpu = ["--accelerator=cpu", "--precision=32-true", "--num-workers=0"]
    predict.main([str(data / "test"), f"--checkpoint={checkpoint}", f"--output={labels}", *on_cpu])
    rows = list(csv.DictReader(labels.open()))
    assert len(rows) == sum(kept.values())
    right = {name: [row["predicted"] == name for row in rows if Path(row["path"]).parent.name == name] for name in kept}
    plain = sum(map(sum, right.values())) / len(rows)
    per_class = statistics.fmean(sum(hits) / len(hits) for hits in right.values())
    assert plain != pytest.approx(per_class), "this split tells the two apart"
    assert metrics["test/acc"] == pytest.approx(plain)
    assert metrics["test/balanced_acc"] == pytest.approx(per_class)


def test_bf16_true_trains_validates_and_tests_the_classifier(tmp_path: Path) -> None:
    """Lightning casts a batch to bf16 before the data module makes its images float32: the network got float32."""
    metrics = train.main([*CPU, "--precision=bf16-true", "--train-samples=32", f"--output-dir={tmp_path / 'run'}"])
    assert {"val/acc", "val/balanced_acc", "test/acc", "test/loss"} <= metrics.keys()
