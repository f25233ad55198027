#!/usr/bin/env bash
# Muon against AdamW on CPU (issue 30): the language model's validation loss after the same number of steps, on the
# synthetic language and on a text folder, for three peak rates of each. Usage: scripts/muon_vs_adamw.sh OUT.txt
# Bakes the language model from this checkout; the text folder is the English documentation (README/METADATA) of the
# installed Python packages, byte-tokenized. Each result line is appended to OUT.txt as soon as its run ends.
set -euo pipefail
out=$(realpath "$1"); work=$(mktemp -d); here=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=1 PYTHONPATH=src  # the baked package, not installed
cookiecutter --no-input "$here" task=language-model -o "$work" >/dev/null
cd "$work/language-model"
mkdir -p corpus runs
site=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
find "$site" -name METADATA -size +4k | sort | head -400 | while read -r f; do
  cp "$f" "corpus/$(echo "$f" | md5sum | cut -c1-12).txt"
done
steps=${STEPS:-300}
common=(--accelerator cpu --precision 32-true --logger csv --num-workers 1 --model nano --context 128 --batch-size 16
        --max-steps "$steps" --val-every 100 --val-batches 16 --seed 0 --checkpoint-every off)
{
  echo "# $(date -u +%FT%TZ)  $(python -c 'import torch, lightning, platform; print(f"torch {torch.__version__}, lightning {lightning.__version__}, Python {platform.python_version()}")')"
  echo "# device: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, OMP_NUM_THREADS=1"
  echo "# corpus: $(ls corpus | wc -l) files, $(cat corpus/* | wc -c) bytes; common flags: ${common[*]}"
  echo "# data optimizer flags | val/loss after each validation (steps 100, 200, ...) | wall s"
} >> "$out"
# RUNS: one run per line, its optimizer flags; Muon's rows with --lr also raise AdamW's rate for the rest
RUNS=${RUNS:-"adamw --lr 6e-4
adamw --lr 2e-3
adamw --lr 6e-3
muon --muon-lr 0.01
muon --muon-lr 0.02
muon --muon-lr 0.05
muon --muon-lr 0.02 --lr 2e-3
muon --muon-lr 0.05 --lr 2e-3"}
for data in ${DATA:-synthetic text}; do
  extra=(); [ "$data" = text ] && extra=(--data text --data-dir corpus)
  while read -r optimizer flags; do
    dir="runs/$data-$optimizer-${flags// /}"; start=$(date +%s)
    # shellcheck disable=SC2086  # the flags are words
    python train.py "${common[@]}" "${extra[@]}" --optimizer "$optimizer" $flags --output-dir "$dir" > "$dir.log" 2>&1 < /dev/null
    losses=$(python -c "import json,sys; print(' '.join(f\"{json.loads(l)['val/loss']:.4f}\" for l in open(sys.argv[1])))" "$dir/validation.jsonl")
    echo "$data $optimizer $flags | $losses | $(( $(date +%s) - start ))" | tee -a "$out"
  done <<< "$RUNS"
done
