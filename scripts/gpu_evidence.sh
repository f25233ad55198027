#!/usr/bin/env bash
# Run a baked project's GPU tests, a default training run and the full benchmark on this machine's GPU, and keep the
# raw output as evidence (commit what it writes into this repository's docs/):
#   OUT/gpu-evidence/<date>-<gpu>-<step>.txt  each step's commands, output and exit status, with the GPU, versions,
#                                             template commit and the bake's answers; tests adds a verdict line
#   OUT/gpu-evidence/<date>-<gpu>-tests.xml   pytest's report, whose counts decide the verdict
#   OUT/benchmarks/<date>-<gpu>.json          bench.py's results, written row by row as they are measured
#
#   scripts/gpu_evidence.sh [--step all|tests|train|bench] [--out DIR] [--wheels DIR] [PROJECT_DIR]
#
# --step: one step per call keeps each call under 10 minutes on shared GPU nodes with short job limits; each writes
#   its files as soon as it ends, so a step killed later loses nothing earlier. all (default) runs the three in turn.
# --out: where the evidence goes (default: this repository's docs/); point it at the one folder a cluster job keeps.
# --wheels: a folder of TorchCodec wheels carried to a machine without a package registry (docs/README.md says how).
#   GPU decoding needs TorchCodec >= 0.16; where none loads, the first wheel there whose nvJPEG decode works with this
#   machine's torch is installed for the run (into a temporary folder), else one from a registry if there is one.
# PROJECT_DIR: an already-baked project, so GPU images need no cookiecutter; without it the defaults are baked here.
# PYTHON=... picks the interpreter, EPOCHS the training run's length.
# Nothing is written unless torch sees a CUDA GPU. Exits non-zero when a step failed or any GPU test did not pass
# (a skip included): such a run is recorded, and called incomplete.
set -uo pipefail

TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
EPOCHS="${EPOCHS:-1}"
step_arg=all out="$TEMPLATE/docs" wheels="$TEMPLATE/wheels" project=""
usage="usage: scripts/gpu_evidence.sh [--step all|tests|train|bench] [--out DIR] [--wheels DIR] [PROJECT_DIR]"
while [ $# -gt 0 ]; do
    case "$1" in
        --step) step_arg="${2:-}"; shift 2 ;;
        --step=*) step_arg="${1#*=}"; shift ;;
        --out) out="${2:-}"; shift 2 ;;
        --out=*) out="${1#*=}"; shift ;;
        --wheels) wheels="${2:-}"; shift 2 ;;
        --wheels=*) wheels="${1#*=}"; shift ;;
        -h | --help) echo "$usage"; exit 0 ;;
        -*) echo "error: unknown option $1; $usage" >&2; exit 2 ;;
        *) project="$1"; shift ;;
    esac
done
case "$step_arg" in
    all) steps="tests train bench" ;;
    tests | train | bench) steps="$step_arg" ;;
    *) echo "error: --step: '$step_arg' is not one of all, tests, train, bench" >&2; exit 2 ;;
esac
if [ -z "$out" ]; then
    echo "error: --out: needs a folder" >&2
    exit 2
fi
[ ! -d "$wheels" ] || wheels="$(cd "$wheels" && pwd)"  # read after this script has changed directory

if [ -n "$project" ]; then
    if [ ! -f "$project/train.py" ] || [ ! -d "$project/src" ]; then
        echo "error: PROJECT_DIR: $project is not a baked project (no train.py and src/ there)" >&2
        exit 2
    fi
    project="$(cd "$project" && pwd)"
    needs="lightning, pytest, torch"
    imports="import lightning, pytest, torch"
else
    needs="cookiecutter, lightning, pytest, torch"
    imports="import cookiecutter, lightning, pytest, torch"
fi
cd "$TEMPLATE" || exit 1
if ! "$PYTHON" -c "$imports" 2>/dev/null; then
    echo "error: $PYTHON lacks one of $needs; install them, or pass an already-baked PROJECT_DIR" >&2
    exit 2
fi
if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: torch sees no CUDA GPU here; nothing recorded: this script records GPU results only where a GPU ran them" >&2
    exit 2
fi

gpu_name="$("$PYTHON" -c "import torch; print(torch.cuda.get_device_name(0))")"
gpu_slug="$(echo "$gpu_name" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')"
stamp="$(date -u +%Y-%m-%d)-$gpu_slug"
mkdir -p "$out/gpu-evidence" "$out/benchmarks" || exit 2
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

failures=0
evidence=/dev/null
# Runs a command, its output going to the terminal and the step's evidence file, and counts it if it fails.
run() {
    printf '\n===== %s\n$ %s\n' "$1" "${*:2}" | tee -a "$evidence"
    "${@:2}" 2>&1 | tee -a "$evidence"
    local status=${PIPESTATUS[0]}
    printf -- '----- exit status %s\n' "$status" | tee -a "$evidence"
    [ "$status" -eq 0 ] || failures=$((failures + 1))
    return "$status"
}

verdict() {  # pytest exits 0 when every test skips: its report's counts decide
    printf '\n===== verdict on the %s\n' "$1" | tee -a "$evidence"
    "$PYTHON" "$TEMPLATE/scripts/pytest_verdict.py" "$2" | tee -a "$evidence"
    [ "${PIPESTATUS[0]}" -eq 0 ] || incomplete+=("$1")
}

about() {
    date -u '+%Y-%m-%d %H:%M:%S UTC'
    # TEMPLATE_COMMIT: the commit the project was baked from, where this copy's .git is missing or not that commit
    # (a working tree sent to a GPU machine)
    echo "template commit: ${TEMPLATE_COMMIT:-$(git -C "$TEMPLATE" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}"
    git -C "$TEMPLATE" status --short -- . ':!docs/gpu-evidence' ':!docs/benchmarks' 2>/dev/null | sed 's/^/  not committed: /'
    echo "project: $project"
    if [ -f "$project/.cruft.json" ]; then
        echo "bake answers (.cruft.json):"
        "$PYTHON" -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['context']['cookiecutter'], indent=1))" "$project/.cruft.json"
    fi
    # The answers that set GPU defaults, as the project's own config holds them.
    (cd "$project" && PYTHONPATH=src "$PYTHON" -c "
import dataclasses, importlib, pathlib
package = next(pathlib.Path('src').glob('*/engine/config.py')).parent.parent.name
cfg = importlib.import_module(package + '.engine.config').Config()
print('bake defaults:', {k: getattr(cfg, k) for k in ('precision', 'compile', 'channels_last', 'strategy', 'logger')})
")
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$PYTHON" -c "
import platform, lightning, torch, torchvision
print('python', platform.python_version(), '|', platform.platform())
print('torch', torch.__version__, '| CUDA', torch.version.cuda, '| cuDNN', torch.backends.cudnn.version())
print('torchvision', torchvision.__version__, '| lightning', lightning.__version__)
for name in ('timm', 'torchcodec', 'onnxruntime'):
    try:
        print(name, __import__(name).__version__)
    except Exception as err:  # optional here: the project runs without them, and says so
        print(name, 'not usable:', type(err).__name__)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f'cuda:{i}', p.name, f'sm_{p.major}{p.minor}', f'{p.total_memory / 2**30:.1f} GiB', 'bf16' if torch.cuda.is_bf16_supported() else 'no bf16')
"
}

nvjpeg_works() {  # TorchCodec's image decoders load beside this torch and nvJPEG decodes a batch on the GPU
    PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c "
import torch
from torchcodec.decoders import decode_image, decode_jpeg
from torchvision.io import encode_jpeg
image = torch.randint(0, 256, (3, 48, 64), dtype=torch.uint8)
assert decode_jpeg([encode_jpeg(image)] * 2, device='cuda')[0].shape == (3, 48, 64)
" >/dev/null 2>&1
}

codec="torchcodec: not looked for"
provide_torchcodec() {  # sets $codec to what it did, and PYTHONPATH to what it installed
    if nvjpeg_works ""; then
        codec="torchcodec: usable as installed"
        return
    fi
    local wheel target
    for wheel in $(ls "$wheels"/torchcodec-*.whl 2>/dev/null | sort -V -r); do
        target="$work/$(basename "$wheel" .whl)"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$target" "$wheel" >/dev/null 2>&1 || continue
        if nvjpeg_works "$target"; then
            export PYTHONPATH="$target:$PYTHONPATH"
            codec="torchcodec: installed for this run from $wheel"
            return
        fi
    done
    target="$work/torchcodec-registry"
    if "$PYTHON" -m pip install -q --no-deps --retries 0 --timeout 15 --target "$target" "torchcodec>=0.16" >/dev/null 2>&1 \
        && nvjpeg_works "$target"; then
        export PYTHONPATH="$target:$PYTHONPATH"
        codec="torchcodec: installed for this run from a registry"
        return
    fi
    codec="torchcodec: none usable (no wheel in $wheels decodes with this torch, no registry); GPU decoding tests skip"
}

if [ -z "$project" ]; then
    "$PYTHON" -m cookiecutter --no-input "$TEMPLATE" -o "$work" >/dev/null || exit 1
    project="$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
fi
cd "$project" || exit 1
export PYTHONPATH="$project/src:$project:$TEMPLATE/scripts${PYTHONPATH:+:$PYTHONPATH}"  # scripts: the pytest plugin
provide_torchcodec

incomplete=()
for step in $steps; do
    evidence="$out/gpu-evidence/$stamp-$step.txt"
    : >"$evidence"
    run "when, what, where" about
    echo "$codec" | tee -a "$evidence"
    case "$step" in
        tests)
            timeout_flag=()
            "$PYTHON" -c "import pytest_timeout" 2>/dev/null && timeout_flag=(--timeout=300)  # a hang: a traceback (longest: 113 s, H100)
            report="$out/gpu-evidence/$stamp-tests.xml"
            rm -f "$report"
            run "single-GPU tests" "$PYTHON" -m pytest -m gpu -v -s -ra -p no:cacheprovider -p pytest_instant_failures "${timeout_flag[@]}" --junitxml="$report"
            verdict "single-GPU tests" "$report"
            gpus="$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")"
            if [ "$gpus" -ge 2 ]; then
                report="$out/gpu-evidence/$stamp-multigpu.xml"
                run "multi-GPU tests ($gpus GPUs)" "$PYTHON" -m pytest -m multigpu -v -ra -p no:cacheprovider -p pytest_instant_failures "${timeout_flag[@]}" --junitxml="$report"
                verdict "multi-GPU tests" "$report"
            else
                printf '\n===== multi-GPU tests: not run, this machine has %s GPU\n' "$gpus" | tee -a "$evidence"
            fi
            ;;
        train) run "train.py with the defaults, $EPOCHS epoch(s)" "$PYTHON" train.py --max-epochs "$EPOCHS" --output-dir "$work/outputs" ;;
        bench) run "bench.py, the full default matrix and the loader" "$PYTHON" bench.py --json "$out/benchmarks/$stamp.json" ;;
    esac
    echo "evidence written to $evidence"
done
if [ "$failures" -gt 0 ] || [ "${#incomplete[@]}" -gt 0 ]; then
    printf '\n===== evidence incomplete: %s command(s) failed%s\n' "$failures" "${incomplete[*]:+; not every test passed in: ${incomplete[*]}}" | tee -a "$evidence"
    exit 1
fi
printf '\n===== evidence complete: every step passed\n' | tee -a "$evidence"
