#!/usr/bin/env bash
# Run the generated project's GPU tests and a default training run on this machine's GPU, and keep the full output
# as evidence in docs/gpu-evidence/<date>-<gpu>.txt of this template repository (commit that file).
#
#   pip install -e ".[dev]"          # once, in the environment PYTHON points to: torch with CUDA, lightning, ...
#   scripts/gpu_evidence.sh          # from the template repository root; PYTHON=... to pick another interpreter
#
# Nothing is written unless torch sees a CUDA GPU: a GPU result that was not seen must never be recorded.
# Exits non-zero if any step failed; the file is written either way, with each step's exit status.
set -uo pipefail

TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
EPOCHS="${EPOCHS:-1}"  # of the default training run; the defaults are otherwise untouched

cd "$TEMPLATE" || exit 1
if ! "$PYTHON" -c "import cookiecutter, lightning, pytest, torch" 2>/dev/null; then
    echo "error: $PYTHON lacks cookiecutter, lightning, pytest or torch; run: pip install -e \".[dev]\"" >&2
    exit 2
fi
if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: torch sees no CUDA GPU here; this script records GPU results only where a GPU ran them" >&2
    exit 2
fi

gpu_name="$("$PYTHON" -c "import torch; print(torch.cuda.get_device_name(0))")"
gpu_slug="$(echo "$gpu_name" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')"
evidence="$TEMPLATE/docs/gpu-evidence/$(date -u +%Y-%m-%d)-$gpu_slug.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$evidence")"
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
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f'cuda:{i}', p.name, f'sm_{p.major}{p.minor}', f'{p.total_memory / 2**30:.1f} GiB', 'bf16' if torch.cuda.is_bf16_supported() else 'no bf16')
"
step "bake a fresh project with the default answers" "$PYTHON" -m cookiecutter --no-input "$TEMPLATE" -o "$work"
project="$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
if [ -z "$project" ]; then
    echo "error: the bake produced no project; see $evidence" >&2
    exit 1
fi
cd "$project" || exit 1
export PYTHONPATH="$project/src${PYTHONPATH:+:$PYTHONPATH}"

step "single-GPU tests" "$PYTHON" -m pytest -m gpu -v -rs -p no:cacheprovider
gpus="$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")"
if [ "$gpus" -ge 2 ]; then
    step "multi-GPU tests ($gpus GPUs)" "$PYTHON" -m pytest -m multigpu -v -rs -p no:cacheprovider
else
    printf '\n===== multi-GPU tests: not run, this machine has %s GPU\n' "$gpus" | tee -a "$evidence"
fi
step "train.py with the defaults, $EPOCHS epoch(s)" "$PYTHON" train.py --max-epochs "$EPOCHS" --output-dir "$work/outputs"

printf '\n===== %s step(s) failed\n' "$failures" | tee -a "$evidence"
echo "evidence written to ${evidence#"$TEMPLATE"/}"
[ "$failures" -eq 0 ]
