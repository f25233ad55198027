"""What scripts/gpu_evidence.sh writes beside the steps' own output.

    python gpu_evidence_report.py header FILE PREPARED   the head of every evidence file: GPU, driver, versions, what
                                                         was prepared; prints the GPU's name; exits 3 without a GPU
    python gpu_evidence_report.py figures IMAGE_JSON LM_JSON PREDICT_LOG
                                                         the three targets, each with its figure or why it has none

Only `header` imports torch: the figures come from the files the steps wrote, whatever became of the steps.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

NO_GPU = 3
VERSIONS = ("lightning", "torchmetrics", "torchvision", "timm", "torchcodec", "pytest", "pytest-xdist")


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def nvjpeg() -> str:
    """Whether the GPU decoding tests can run: TorchCodec loads beside this torch and nvJPEG decodes on the GPU."""
    try:
        import torch
        from torchcodec.decoders import decode_jpeg
        from torchvision.io import encode_jpeg

        image = torch.randint(0, 256, (3, 48, 64), dtype=torch.uint8)
        assert decode_jpeg([encode_jpeg(image)] * 2, device="cuda")[0].shape == (3, 48, 64)
        return "torchcodec: nvJPEG decodes on the GPU"
    except Exception as err:  # noqa: BLE001 - whatever fails, the decoding tests skip; the reason is what matters
        return f"torchcodec: not usable, the GPU decoding tests will skip ({type(err).__name__}: {err})".splitlines()[0]


def header(out: Path, prepared: Path) -> int:
    import torch

    if not torch.cuda.is_available():
        print(
            "error: torch sees no CUDA GPU here; nothing recorded: this script records GPU results only where a "
            "GPU ran them",
            file=sys.stderr,
        )
        return NO_GPU
    try:
        smi = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            .stdout.strip()
            .replace("\n", "; ")
        )
    except (OSError, subprocess.SubprocessError) as err:
        smi = f"nvidia-smi failed ({type(err).__name__}): driver unknown"
    props = torch.cuda.get_device_properties(0)
    lines = [
        f"gpu: {smi} | {torch.cuda.device_count()} visible, sm_{props.major}{props.minor}",
        f"python {platform.python_version()} | torch {torch.__version__} | CUDA {torch.version.cuda} | "
        f"cuDNN {torch.backends.cudnn.version()} | " + " | ".join(f"{n} {version(n)}" for n in VERSIONS),
        nvjpeg(),
        f"host: {platform.platform()}",
        *(f"prepared: {line}" for line in (prepared / "PREPARED.txt").read_text().splitlines()),
    ]
    out.write_text("".join(f"# {line}\n" for line in lines))
    print(torch.cuda.get_device_name(0))
    return 0


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def bench_line(what: str, results: dict[str, Any] | None, rate: str, unit: str, target: float) -> str:
    if results is None:
        return f"{what}: no figure, bench.py wrote no results (see its step's file)"
    default = next((row for row in results.get("settings", []) if row.get("default")), None)
    ratio = results.get("lightning_over_plain")
    if default is None or ratio is None:
        return f"{what}: no figure, bench.py stopped before Lightning and the plain loop were both timed"
    rounds = results.get("lightning_over_plain_rounds", [])
    mfu = "n/a" if default.get("mfu") is None else f"{100 * default['mfu']:.1f}%"
    line = f"{what}: Lightning {default[rate]:,.0f} {unit}, plain {results['plain'][rate]:,.0f} {unit}, MFU {mfu}; "
    line += (
        f"Lightning/plain {ratio:.3f} over {len(rounds)} interleaved round(s) ({', '.join(f'{r:.3f}' for r in rounds)})"
    )
    line += "" if results.get("finished") else ", bench.py did not finish"
    line += "; too noisy to judge" if results.get("lightning_over_plain_noisy") else ""
    return line + f": target >= {target} {'met' if ratio >= target else 'NOT met'}"


def predict_line(log: Path) -> str:
    what = "predict.py bf16+channels_last+compile on the GPU against fp32 on the CPU"
    text = log.read_text(errors="replace") if log.is_file() else ""
    found = re.findall(r"moved a probability by (\d+\.\d+)", text)
    if not found:
        return f"{what}: no figure, the check did not get as far as comparing (see its step's file)"
    worst = float(found[-1])
    return f"{what}: largest probability difference {worst:.4f}: target < 0.05 {'met' if worst < 0.05 else 'NOT met'}"


def figures(image_json: Path, lm_json: Path, predict_log: Path) -> int:
    print(
        bench_line("ResNet-50 224, bf16+channels_last+compile", read_json(image_json), "samples_per_s", "img/s", 0.99)
    )
    print(bench_line("GPT-2 124M, context 1024, bf16+compile", read_json(lm_json), "tokens_per_s", "tokens/s", 0.98))
    print(predict_line(predict_log))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["header"] and len(argv) == 3:
        return header(Path(argv[1]), Path(argv[2]))
    if argv[:1] == ["figures"] and len(argv) == 4:
        return figures(*map(Path, argv[1:]))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
