#!/usr/bin/env bash
# `scripts/gpu_evidence.sh --prepare [--python-version X.Y] [PREPARED]`, which checks the options and runs this:
#   gpu_evidence_prepare.sh PREPARED PYTHON_VERSION
# Makes, on a machine with cookiecutter, pip and the project's test dependencies, the one folder that a GPU machine
# without cookiecutter or a package index needs:
#   PREPARED/image-classifier/, language-model/   both tasks' bakes, every other answer the default
#   PREPARED/gpu-tests-<bake>.txt                 the test files that hold `-m gpu` tests, as pytest collects them
#                                                 here: other test modules import packages the GPU image lacks
#                                                 (optuna, boto3), and one failed import fails a whole collection
#   PREPARED/wheels/                              what the GPU image lacks that the steps use, for its CPython
#   PREPARED/PREPARED.txt                         the template commit, the date, the bakes and the wheels
# It is built beside PREPARED and moved there only once complete and small enough to travel: the device tool carries
# at most 64 MiB, this working tree included; a bigger folder is refused in one line and nothing is left behind.
set -uo pipefail

TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
LIMIT_MIB=64
# TorchCodec: GPU JPEG decoding (nvJPEG), for 4 of the image task's GPU tests. 0.17.0 loaded and decoded on an H100
# beside torch 2.11 (2026-11-23); torch 2.11's own pairing, 0.11, has no image decoders. Nothing else the steps import
# is missing there: litdata and boto3 are imported only for --data streaming, optuna only by sweeps.
WHEELS=("torchcodec==0.17.0")
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
BAKES=(image-classifier:image-classification language-model:language-model)
prepared="$1" pyver="$2"

if [ -e "$prepared" ]; then
    echo "error: PREPARED: $prepared already exists; remove it, or name a new folder" >&2
    exit 2
fi
parent="$(dirname "$prepared")"
if [ ! -d "$parent" ]; then
    echo "error: PREPARED: $parent, the folder that would hold $prepared, does not exist" >&2
    exit 2
fi
if ! "$PYTHON" -c "import cookiecutter, pip, pytest" 2>/dev/null; then
    echo "error: $PYTHON lacks one of cookiecutter, pip, pytest: --prepare runs where the template's tests run" >&2
    exit 2
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
tree=0  # what a device call sends besides the carried folder: tracked and untracked-not-ignored files
if git -C "$TEMPLATE" rev-parse --git-dir >/dev/null 2>&1; then
    tree="$(cd "$TEMPLATE" && git ls-files -z --cached --others --exclude-standard |
        du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f 1)"
fi
work="$(mktemp -d "$parent/.prepare-XXXXXX")" || exit 1
trap 'rm -rf "$work"' EXIT

fits() {
    local size
    size="$(du -sb "$work" | cut -f 1)"
    if [ $((size + tree)) -gt $((LIMIT_MIB * 1048576)) ]; then
        printf 'error: PREPARED: %s would hold %s MiB, which with this working tree (%s MiB) is over the %s MiB %s\n' \
            "$prepared" "$(mib "$size")" "$(mib "$tree")" "$LIMIT_MIB" \
            "a device call carries; carry fewer or smaller wheels" >&2
        exit 2
    fi
}

platforms=()
for p in "${PLATFORMS[@]}"; do platforms+=(--platform "$p"); done
echo "downloading ${WHEELS[*]} for CPython $pyver, x86_64"
if ! log="$("$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$work/wheels" "${WHEELS[@]}" 2>&1)"; then
    echo "error: --prepare: pip could not download ${WHEELS[*]} for CPython $pyver: $(grep -m 1 ERROR <<<"$log")" >&2
    exit 1
fi
fits  # before minutes of baking and collecting

pids=()
for entry in "${BAKES[@]}"; do
    bake="${entry%%:*}" task="${entry#*:}"
    "$PYTHON" -m cookiecutter --no-input -o "$work/.bake-$bake" "$TEMPLATE" "task=$task" >/dev/null || exit 1
    mv "$work/.bake-$bake"/* "$work/$bake" && rmdir "$work/.bake-$bake" || exit 1
    echo "baked $bake (task=$task); collecting its GPU tests"
    # the engine from the bake's own wheel (a pure-Python wheel imports from its zip), as the device installs it
    engine_wheel="$(ls "$work/$bake"/wheels/lightning_gpu_engine-*.whl)"
    (cd "$work/$bake" && PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="src:.:$engine_wheel" "$PYTHON" -m pytest --collect-only -q -m gpu \
        -p no:cacheprovider >"$work/.collected-$bake" 2>&1) &
    pids+=($!)
done
for i in "${!BAKES[@]}"; do
    bake="${BAKES[$i]%%:*}"
    if ! wait "${pids[$i]}"; then
        why="$(grep -m 1 -E 'ERROR|Error' "$work/.collected-$bake")"
        echo "error: --prepare: pytest could not collect $bake's GPU tests: ${why:-run pytest --collect-only there}" >&2
        exit 1
    fi
    grep '::' "$work/.collected-$bake" | sed 's/::.*//' | sort -u >"$work/gpu-tests-$bake.txt"
    rm "$work/.collected-$bake"
done

commit="$(git -C "$TEMPLATE" rev-parse --short HEAD 2>/dev/null || echo unknown)"
changed="$(git -C "$TEMPLATE" status --porcelain 2>/dev/null | wc -l)"
{
    echo "template commit $commit$([ "$changed" -eq 0 ] || echo ", with $changed uncommitted change(s)")," \
        "prepared $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "bakes: image-classifier (task=image-classification), language-model (task=language-model)," \
        "other answers the defaults"
    for entry in "${BAKES[@]}"; do
        echo "GPU test files of ${entry%%:*}: $(paste -sd ' ' "$work/gpu-tests-${entry%%:*}.txt")"
    done
    echo "wheels for CPython $pyver: $(cd "$work/wheels" && ls ./*.whl | sed 's|^\./||' | paste -sd ' ')"
} >"$work/PREPARED.txt"
fits
mv "$work" "$prepared" || exit 1
trap - EXIT
size="$(du -sb "$prepared" | cut -f 1)"
echo "prepared $prepared: $(mib "$size") MiB; with this working tree $(mib $((size + tree))) of the $LIMIT_MIB MiB" \
    "a device call carries"
