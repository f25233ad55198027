#!/usr/bin/env bash
# Run the generated project's GPU tests, a default training run and the full benchmark on this machine's GPU, and keep
# the raw output as evidence in this template repository (commit what it writes):
#   docs/gpu-evidence/<date>-<gpu>.txt   every step's command, output and exit status
#   docs/benchmarks/<date>-<gpu>.json    bench.py's results, written row by row as they are measured
#
#   scripts/gpu_evidence.sh PROJECT_DIR  # an already-baked project: needs only that project's own dependencies
#   scripts/gpu_evidence.sh              # bakes the defaults first, which needs cookiecutter in PYTHON's environment
#
# GPU images often lack cookiecutter: bake where it is (`cookiecutter --no-input . -o DIR`), copy DIR over, pass it.
# PYTHON=... picks the interpreter, EPOCHS the training run's length, BENCH=0 skips the benchmark (minutes).
# Nothing is written unless torch sees a CUDA GPU: a GPU result that was not seen must never be recorded.
# Exits non-zero if any step failed; the files are written either way, with each step's exit status.
set -uo pipefail

TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
EPOCHS="${EPOCHS:-1}"  # of the default training run; the defaults are otherwise untouched
BENCH="${BENCH:-1}"
project="${1:-}"

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
    echo "error: torch sees no CUDA GPU here; this script records GPU results only where a GPU ran them" >&2
    exit 2
fi

gpu_name="$("$PYTHON" -c "import torch; print(torch.cuda.get_device_name(0))")"
gpu_slug="$(echo "$gpu_name" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')"
stamp="$(date -u +%Y-%m-%d)-$gpu_slug"
evidence="$TEMPLATE/docs/gpu-evidence/$stamp.txt"
bench_json="$TEMPLATE/docs/benchmarks/$stamp.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$evidence")" "$(dirname "$bench_json")"
: >"$evidence"

failures=0
# Runs a command, its output going to the terminal and the evidence file, and counts it if it fails.
step() {
    printf '\n===== %s\n$ %s\n' "$1" "${*:2}" | tee -a "$evidence"
    "${@:2}" 2>&1 | tee -a "$evidence"
    local status=${PIPESTATUS[0]}
    printf -- '----- exit status %s\n' "$status" | tee -a "$evidence"
    [ "$status" -eq 0 ] || failures=$((failures + 1))
}

about_template() {
    date -u '+%Y-%m-%d %H:%M:%S UTC'
    echo "template commit: $(git rev-parse --verify -q HEAD || echo unknown)"
    git status --short -- . ':!docs/gpu-evidence' 2>/dev/null | sed 's/^/  not committed: /'
}

step "when, and which template" about_template
step "GPU and driver" nvidia-smi
step "software" "$PYTHON" -c "
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
if [ -z "$project" ]; then
    step "bake a fresh project with the default answers" "$PYTHON" -m cookiecutter --no-input "$TEMPLATE" -o "$work"
    project="$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
    if [ -z "$project" ]; then
        echo "error: the bake produced no project; see $evidence" >&2
        exit 1
    fi
else
    step "the baked project given" echo "$project"
fi
cd "$project" || exit 1
export PYTHONPATH="$project/src${PYTHONPATH:+:$PYTHONPATH}"

step "single-GPU tests" "$PYTHON" -m pytest -m gpu -v -s -rs -p no:cacheprovider
gpus="$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")"
if [ "$gpus" -ge 2 ]; then
    step "multi-GPU tests ($gpus GPUs)" "$PYTHON" -m pytest -m multigpu -v -rs -p no:cacheprovider
else
    printf '\n===== multi-GPU tests: not run, this machine has %s GPU\n' "$gpus" | tee -a "$evidence"
fi
step "train.py with the defaults, $EPOCHS epoch(s)" "$PYTHON" train.py --max-epochs "$EPOCHS" --output-dir "$work/outputs"

if [ "$BENCH" != 0 ]; then
    step "bench.py, the full default matrix and the loader" "$PYTHON" bench.py --json "$bench_json"
fi
printf '\n===== %s step(s) failed\n' "$failures" | tee -a "$evidence"
echo "evidence written to ${evidence#"$TEMPLATE"/}"
[ "$BENCH" = 0 ] || echo "benchmark results in ${bench_json#"$TEMPLATE"/}"
[ "$failures" -eq 0 ]
