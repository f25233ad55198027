#!/usr/bin/env bash
# GPU evidence in one call of fixed length: both tasks' GPU tests and speed, most valuable first, each step inside a
# time box carved from the budget, each step's raw output kept as it comes (docs/README.md: the runbook).
#
#   scripts/gpu_evidence.sh --prepare [--python-version X.Y] [PREPARED]        on a CPU machine with cookiecutter
#   scripts/gpu_evidence.sh --budget SECONDS [--out DIR] [--workers N] [--box STEP=SECONDS]... [PREPARED]    on a GPU
#
# PREPARED (default: .gpu-evidence in this repository) is the one folder that travels: both tasks' bakes and the
#   wheels the GPU image lacks, for CPython X.Y (default 3.12, the GPU image's); scripts/gpu_evidence_prepare.sh.
# The steps, in this order:
#   1 image-tests   the image task's GPU tests (but 5's and 6's)     4 lm-bench      GPT-2 124M, context 1024
#   2 lm-tests      the language model's GPU tests (but 6's)         5 predict-bf16  predict.py bf16+cl+compile vs CPU
#   3 image-bench   ResNet-50 224, bf16+cl+compile                   6 fsdp          FSDP on one GPU, both tasks
#   Benches: Lightning against the plain loop in the same process, interleaved, short (the steps' options below).
# --budget: seconds for everything. What installing the wheels and reading the versions leaves (less a few seconds
#   for the summary) is shared by the steps in the proportions of SHARES; a step's box is its share plus what the
#   steps before it left unused. --box STEP=SECONDS sets one step's share instead. A step still running at its box's
#   end gets SIGINT (pytest then writes its report) and, a tenth of the box later (at most 15 s), SIGKILL, each sent
#   to its whole process group; it is recorded as timed out and the next step runs.
# --workers: pytest-xdist processes for steps 1 and 2 (default 4; 0: one process).
# --out: where the files go (default: $OUT when set, else this repository's docs/), at most 8, one folder down:
#   gpu-evidence/<date>-<gpu>-<n>-<step>.txt (steps 1, 2, 5, 6; pytest's report at the end), benchmarks/<date>-<gpu>-
#   <n>-<step>.txt (steps 3, 4; bench.py's JSON at the end), gpu-evidence/<date>-<gpu>-summary.txt (a line per step as
#   it ends, then the three targets' figures). Each starts with the GPU, the driver, the versions and its commands.
# Exit status: 0 when every step passed (a skip is no pass); 1 otherwise; 2: refused, nothing written (no GPU, say).
set -uo pipefail

started="$(date +%s)" invocation="scripts/gpu_evidence.sh$(printf " %q" "$@")"
TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
STEPS=(image-tests lm-tests image-bench lm-bench predict-bf16 fsdp)
SHARES=(31 14 19 16 11 9)  # percent, estimated: step 1's tests took 500 s in one process on an H100 (2026-11-23)
SUMMARY_S=5                # kept back for the summary
usage="usage: scripts/gpu_evidence.sh --budget SECONDS [--out DIR] [--workers N] [--box STEP=SECONDS]... [PREPARED]"
usage+=" | --prepare [--python-version X.Y] [PREPARED]"
refuse() { echo "error: $1" >&2; exit 2; }
integer() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$((10#$1))" -ge "$2" ]; }
left() { local s=$(($1 - $(date +%s))); echo $((s < 1 ? 1 : s)); }  # seconds to an epoch time, at least 1

mode=run budget="" out="${OUT:-$TEMPLATE/docs}" workers=4 pyver="" prepared="$TEMPLATE/.gpu-evidence"
declare -A box=()
while [ $# -gt 0 ]; do
    arg="$1" && shift
    case "$arg" in
        --*=*) set -- "${arg%%=*}" "${arg#*=}" "$@" && continue ;;
        --prepare) mode=prepare && continue ;;
        -h | --help) echo "$usage" && exit 0 ;;
        --budget | --out | --workers | --box | --python-version) [ $# -gt 0 ] || refuse "$arg: needs a value; $usage" ;;
        -*) refuse "unknown option $arg; $usage" ;;
        *) prepared="$arg" && continue ;;
    esac
    value="$1" && shift
    case "$arg" in
        --budget) integer "$value" 1 || refuse "--budget: '$value' is not a whole number of seconds" ;;
        --out) [ -n "$value" ] || refuse "--out: needs a folder" ;;
        --workers) integer "$value" 0 || refuse "--workers: '$value' is not 0 or more" ;;
        --python-version) [[ "$value" =~ ^3\.[0-9]+$ ]] || refuse "--python-version: '$value' is not like 3.12" ;;
        --box)
            name="${value%%=*}" seconds="${value#*=}"
            [[ " ${STEPS[*]} " == *" $name "* ]] || refuse "--box: '$name' is not one of ${STEPS[*]}"
            integer "$seconds" 1 || refuse "--box: '$value' is not STEP=SECONDS"
            box[$name]="$((10#$seconds))"
            ;;
    esac
    case "$arg" in
        --budget) budget="$((10#$value))" ;;
        --out) out="$value" ;;
        --workers) workers="$((10#$value))" ;;
        --python-version) pyver="$value" ;;
    esac
done
if [ "$mode" = prepare ]; then
    [ -z "$budget" ] || refuse "--budget: runs the steps on a GPU; --prepare only prepares"
    exec bash "$TEMPLATE/scripts/gpu_evidence_prepare.sh" "$prepared" "${pyver:-3.12}"
fi
[ -n "$budget" ] || refuse "--budget: needed, in seconds (540 for a 9-minute call); $usage"
[ -z "$pyver" ] || refuse "--python-version: for --prepare only"
for bake in image-classifier language-model; do
    [ -f "$prepared/PREPARED.txt" ] && [ -f "$prepared/$bake/train.py" ] && [ -f "$prepared/gpu-tests-$bake.txt" ] ||
        refuse "PREPARED: $prepared is not a folder made by --prepare (PREPARED.txt, $bake/); make it with \
scripts/gpu_evidence.sh --prepare $prepared where cookiecutter is installed"
done
prepared="$(cd "$prepared" && pwd)"
needs="import importlib.util as u; print(*(m for m in ('torch', 'lightning', 'pytest') if not u.find_spec(m)))"
missing="$("$PYTHON" -c "$needs" 2>&1)" || refuse "$PYTHON does not run: $missing"
[ -z "$missing" ] || refuse "$PYTHON lacks $missing, which every step needs"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
setup_until=$((started + (budget < 300 ? 30 : budget / 10)))
# Every carried wheel, a bake's own included, installed for this run only: there is no index here to resolve from.
mapfile -t wheels < <(find "$prepared" -name '*.whl' | sort)
installed="wheels: none carried"
if [ "${#wheels[@]}" -gt 0 ]; then
    installed="wheels installed for this run: $(for w in "${wheels[@]}"; do printf '%s ' "${w#"$prepared"/}"; done)"
    log="$(timeout "$(left "$setup_until")" "$PYTHON" -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --target "$work/site" "${wheels[@]}" 2>&1)" ||
        installed="wheels NOT installed: pip said: $(tail -n 1 <<<"$log")"
fi
site="$work/site${PYTHONPATH:+:$PYTHONPATH}"
gpu="$(PYTHONPATH="$site" timeout "$(left "$setup_until")" "$PYTHON" "$TEMPLATE/scripts/gpu_evidence_report.py" \
    header "$work/header" "$prepared")"
case $? in
    0) ;;
    3) exit 2 ;;  # no GPU: the reason is already printed, and nothing was written
    *) echo "error: reading this machine's GPU and versions failed (above); nothing recorded" >&2 && exit 1 ;;
esac
gpu="${gpu##*$'\n'}"  # its last line: what torch calls the GPU
echo "# $installed" >>"$work/header"
stamp="$(date -u +%Y-%m-%d)-$(tr '[:upper:]' '[:lower:]' <<<"$gpu" | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')"
mkdir -p "$out/gpu-evidence" "$out/benchmarks" || exit 2
out="$(cd "$out" && pwd)"
summary="$out/gpu-evidence/$stamp-summary.txt"

ready="$(date +%s)" end=$((started + budget - SUMMARY_S))
deadlines=() at="$ready"
for i in "${!STEPS[@]}"; do
    at=$((at + ${box[${STEPS[$i]}]:-$(((end - ready) * SHARES[i] / 100))}))
    deadlines+=($((at < end ? at : end)))
done
{
    echo "# $invocation: the summary, a line per step as it ends"
    cat "$work/header"
    for i in "${!STEPS[@]}"; do
        printf '# step %s %s: until %s s\n' $((i + 1)) "${STEPS[$i]}" $((deadlines[i] - started))
    done
} >"$summary"

file=/dev/null status=passed
# SIGINT as Python's KeyboardInterrupt even where this script was started with it ignored (a batch job's background
# command), which its children would inherit: Python then installs no handler, and pytest writes no report.
DEFAULT_SIGINT=("$PYTHON" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])')
# part LABEL UNTIL DIR COMMAND...: COMMAND in bake DIR, its output appended to $file, cut at UNTIL (epoch seconds).
part() {
    local label="$1" until="$2" dir="$3" rc grace seconds path
    shift 3
    seconds=$((until - $(date +%s))) path="$dir/src:$dir:$TEMPLATE/scripts:$site"
    if [ "$seconds" -lt 2 ]; then
        printf '\n===== %s: not run, its box has no time left\n' "$label" >>"$file"
        status="timed out"
        return
    fi
    grace=$((seconds / 10 < 1 ? 1 : seconds / 10 > 15 ? 15 : seconds / 10))
    printf '\n===== %s\n$ cd %q && PYTHONPATH=%q %s\n' "$label" "$dir" "$path" "$(printf '%q ' "$@")" >>"$file"
    (cd "$dir" && PYTHONPATH="$path" PYTHONUNBUFFERED=1 \
        exec timeout -s INT -k "$grace" $((seconds - grace)) "${DEFAULT_SIGINT[@]}" "$@") >>"$file" 2>&1 </dev/null
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        printf '\n----- timed out: SIGINT at %s s%s\n' $((seconds - grace)) \
            "$([ "$rc" -eq 137 ] && echo ", SIGKILL $grace s later")" >>"$file"
        status="timed out"
    else
        printf '\n----- exit status %s\n' "$rc" >>"$file"
        [ "$rc" -eq 0 ] || [ "$status" != passed ] || status="failed (exit status $rc)"
    fi
}

# tests LABEL UNTIL BAKE WORKERS PYTEST-ARGS...: the bake's GPU test files under pytest; a skip is no pass.
tests() {
    local label="$1" until="$2" bake="$3" n="$4" report="$work/report-$RANDOM.xml" files xdist=()
    shift 4
    mapfile -t files <"$prepared/gpu-tests-$bake.txt"
    [ "$n" -eq 0 ] || ! PYTHONPATH="$site" "$PYTHON" -c "import xdist" 2>/dev/null || xdist=(-n "$n")
    part "$label" "$until" "$prepared/$bake" "$PYTHON" -m pytest -m gpu -v -ra -p no:cacheprovider \
        -p pytest_instant_failures "${xdist[@]}" -o junit_logging=system-out --junitxml="$report" "$@" "${files[@]}"
    printf '\n===== verdict on %s\n' "$label" >>"$file"
    "$PYTHON" "$TEMPLATE/scripts/pytest_verdict.py" "$report" >>"$file" || [ "$status" != passed ] || status=incomplete
    [ ! -f "$report" ] || { printf '\n===== pytest'"'"'s report (--junitxml)\n' && cat "$report"; } >>"$file"
}

bench() {  # bench LABEL UNTIL BAKE BENCH-ARGS...: bench.py's output, then its JSON, written row by row
    local label="$1" until="$2" bake="$3"
    shift 3
    local json="$work/$bake-bench.json"
    part "$label" "$until" "$prepared/$bake" "$PYTHON" bench.py "$@" --json "$json"
    [ ! -f "$json" ] || { echo && echo "===== bench.py --json" && cat "$json"; } >>"$file"
}

not_passed=()
for i in "${!STEPS[@]}"; do
    step="${STEPS[$i]}" until="${deadlines[$i]}" status=passed
    folder=gpu-evidence && [[ "$step" != *-bench ]] || folder=benchmarks
    file="$out/$folder/$stamp-$((i + 1))-$step.txt"
    step_started="$(date +%s)"
    echo "===== step $((i + 1))/6 $step: started, box until $((until - started)) s of $budget (writing $file)"
    echo "# $invocation: step $((i + 1)) of 6, $step, its box until $((until - started)) s" >"$file"
    cat "$work/header" >>"$file"
    case "$step" in
        image-tests) tests "the image task's GPU tests" "$until" image-classifier "$workers" \
            -k "not fsdp_on_one_gpu and not bf16_gpu_probabilities" ;;
        lm-tests) tests "the language model's GPU tests" "$until" language-model "$workers" -k "not fsdp_on_one_gpu" ;;
        image-bench) bench "ResNet-50 224, bf16+cl+compile, Lightning and the plain loop interleaved" "$until" \
            image-classifier --only bf16+cl+compile --warmup 15 --steps 50 --rounds 2 ;;
        lm-bench) bench "GPT-2 124M, context 1024, bf16+compile, Lightning and the plain loop interleaved" "$until" \
            language-model --only bf16+compile --warmup 10 --steps 30 --rounds 2 ;;
        predict-bf16) tests "predict.py, bf16+channels_last+compile on the GPU against fp32 on the CPU" "$until" \
            image-classifier 0 -s -k bf16_gpu_probabilities ;;
        fsdp)  # half the box each, the second also gets what the first leaves
            tests "FSDP on one GPU, the image task" $(((step_started + until) / 2)) image-classifier 0 \
                -k fsdp_on_one_gpu
            tests "FSDP on one GPU, the language model" "$until" language-model 0 -k fsdp_on_one_gpu ;;
    esac
    line="step $((i + 1)) $step: $status after $(($(date +%s) - step_started)) s ($(basename "$file"))"
    echo "$line" | tee -a "$summary"
    [ "$status" = passed ] || not_passed+=("$step ($status)")
done
{
    echo "targets:"
    "$PYTHON" "$TEMPLATE/scripts/gpu_evidence_report.py" figures "$work/image-classifier-bench.json" \
        "$work/language-model-bench.json" "$out/gpu-evidence/$stamp-5-predict-bf16.txt" | sed 's/^/  /'
    if [ "${#not_passed[@]}" -eq 0 ]; then
        echo "evidence complete: every step passed, in $(($(date +%s) - started)) s"
    else
        echo "evidence incomplete: not passed: ${not_passed[*]}; $(($(date +%s) - started)) s"
    fi
} | tee -a "$summary"
[ "${#not_passed[@]}" -eq 0 ]
