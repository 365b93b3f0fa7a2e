#!/usr/bin/env bash
# Everything rcuda can show on a GPU machine, in one go, results under $OUT:
#
#   OUT=/some/dir bash benchmarks/gpu/run.sh
#
#   machine     nvidia-smi (-L, -q), lscpu, memory, kernel, nvcc, uptime
#   venv        a venv (system site packages visible, for a preinstalled cupy)
#               with pip install -e '.[test,bench,cupy]' (cupy-cuda13x)
#   cupy        can cupy see the GPU?
#   tests-gpu   the GPU-only tests first (cupy backend, local GPU vs rcuda)
#   demo        mnist_dp on the local GPU without rcuda, through rcuda on
#               1 and 4 cupy servers (each serving GPU0), the numpy
#               reference: accuracies and loss curves compared
#   calibrate   the sim cost model fitted to this GPU's kernel times
#   launch      launch-bound loop, local vs remote (goal <= 1.2x)
#   graphs      a step of 100 tiny kernels as a CUDA graph vs one by one,
#               local and through rcuda on a cupy server (goal >= 5x remote)
#   paper       rcuda bench paper: local-GPU row, cupy rows, emulated testbeds
#   micro       rcuda bench micro
#   tests       the whole test suite, with the time that is left
#   summary     summary.json / summary.md: every step's status and the goals
#
# Each step is logged (logs/STEP.log) and bounded; a step that fails or times
# out is recorded and the next one runs.  The whole run stays within
# RCUDA_GPU_BUDGET_S seconds (default 1440: 24 minutes).
#
#   RCUDA_GPU_DRY_RUN=1     check the script without a GPU: the CPU-only steps,
#                           quick versions (--quick, --sim), GPU steps skipped
#   RCUDA_GPU_PYTHON=PATH   use this Python (an existing venv) instead of making one
#   RCUDA_GPU_PIP_ARGS=...  extra pip arguments (e.g. --no-index --find-links DIR)
#   RCUDA_GPU_PYTEST_ARGS   what the last step tests (default: tests)
#   RCUDA_GPU_PAPER_CALIBRATED=1  also run the paper suite with the calibrated model
#   RCUDA_GPU_STEPS="a b"   run only these steps (the others are recorded as not selected)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$REPO/gpu-results}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
DRY_RUN=${RCUDA_GPU_DRY_RUN:-0}
BUDGET_S=${RCUDA_GPU_BUDGET_S:-1440}
STARTED=$(date +%s)
LOGS=$OUT/logs
STATUS=$OUT/steps.tsv
mkdir -p "$LOGS"
printf 'step\tstatus\tseconds\n' > "$STATUS"
export REPO OUT DRY_RUN
export PIP_DISABLE_PIP_VERSION_CHECK=1
cd "$REPO"

log() { printf '[%s +%4ds] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - STARTED ))" "$*" | tee -a "$OUT/run.log"; }

# step NAME LIMIT_S FUNCTION: run FUNCTION (a bash function of this file) in
# a child bash with a time limit, its output in logs/NAME.log.  Never fails
# the script: the outcome goes to steps.tsv.
step() {
    local name=$1 limit=$2 fn=$3 left began rc status
    if [[ $name != summary && -n ${RCUDA_GPU_STEPS:-} && " $RCUDA_GPU_STEPS " != *" $name "* ]]; then
        printf '%s\tskipped: not selected (RCUDA_GPU_STEPS)\t0\n' "$name" >> "$STATUS"
        return 0
    fi
    left=$(( BUDGET_S - ($(date +%s) - STARTED) - 30 ))  # 30 s kept for the summary
    if (( left < 20 )); then
        log "$name: skipped: out of time"
        printf '%s\tskipped: out of time\t0\n' "$name" >> "$STATUS"
        return 0
    fi
    (( limit > left )) && limit=$left
    log "$name: start (limit ${limit}s)"
    began=$(date +%s)
    set +e
    timeout --kill-after=15 "$limit" bash -c "set -euo pipefail; $(declare -f skip "$fn"); $fn" > "$LOGS/$name.log" 2>&1
    rc=$?
    set -e
    case $rc in
        0) status=ok ;;
        124|137) status="timed out after ${limit}s" ;;
        77) status="skipped: $(tail -n 1 "$LOGS/$name.log")" ;;
        *) status="failed (exit $rc)" ;;
    esac
    printf '%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - began ))" >> "$STATUS"
    log "$name: $status ($(( $(date +%s) - began ))s)"
    return 0
}

skip() { echo "$*"; exit 77; }  # inside a step: record it as skipped, saying why

# ---------------------------------------------------------------- the steps

step_machine() {
    mkdir -p "$OUT/machine"
    cd "$OUT/machine"
    uptime > uptime.txt || true
    uname -a > uname.txt || true
    (lscpu || cat /proc/cpuinfo) > cpu.txt 2>&1 || true
    free -g > memory.txt 2>&1 || true
    (nvcc --version || /usr/local/cuda/bin/nvcc --version) > nvcc.txt 2>&1 || true
    python3 --version > python.txt 2>&1 || true
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi > nvidia-smi.txt 2>&1 || true
        nvidia-smi -L > nvidia-smi-L.txt 2>&1 || true
        nvidia-smi -q > nvidia-smi-q.txt 2>&1 || true
    else
        echo "nvidia-smi not found" > nvidia-smi.txt
    fi
    cat uptime.txt nvidia-smi.txt
}

step_venv() {
    if [[ -n ${RCUDA_GPU_PYTHON:-} ]]; then
        skip "using RCUDA_GPU_PYTHON=$RCUDA_GPU_PYTHON"
    fi
    local venv=$REPO/.venv-gpu extras='.[test,bench,cupy]'
    [[ $DRY_RUN == 1 ]] && extras='.[test,bench]'
    python3 -m venv --system-site-packages "$venv"
    # shellcheck disable=SC2086  # RCUDA_GPU_PIP_ARGS is a list of arguments
    if ! "$venv/bin/pip" install -q ${RCUDA_GPU_PIP_ARGS:-} -e "$extras"; then
        echo "pip install -e '$extras' failed; installing without cupy (the cupy steps will say so)"
        # shellcheck disable=SC2086
        "$venv/bin/pip" install -q ${RCUDA_GPU_PIP_ARGS:-} -e '.[test,bench]'
        exit 3  # recorded as failed, the venv still usable
    fi
}

step_cupy() {
    [[ $DRY_RUN == 1 ]] && skip "dry run: no GPU"
    "$PY" -c 'import cupy; n = cupy.cuda.runtime.getDeviceCount(); print("cupy", cupy.__version__, "sees", n, "GPU(s)"); assert n > 0'
}

step_tests_gpu() {
    [[ $DRY_RUN == 1 ]] && skip "dry run: no GPU"
    # -rs lists every skip with its reason: these must not skip on a GPU machine.
    "$PY" -m pytest -q -rs -p no:cacheprovider --junitxml="$OUT/tests/gpu-junit.xml" \
        tests/test_backends.py tests/test_mnist.py tests/test_independent_streams.py tests/test_mapped_memory.py \
        tests/test_large_params.py tests/test_cooperative.py tests/test_managed_memory.py tests/test_conjugate_gradient.py \
        tests/test_memory_pools.py tests/test_cublas.py tests/test_cufft.py tests/test_curand.py tests/test_textures.py \
        tests/test_cublaslt_epilogues.py tests/test_cluster_launch.py \
        -k "cupy or local_gpu or on_a_gpu"
}

step_demo() {
    local extra=()
    [[ $DRY_RUN == 1 ]] && extra=(--sim --epochs 1)
    "$PY" benchmarks/gpu/local_vs_remote.py demo --out "$OUT/demo.json" "${extra[@]}"
}

step_calibrate() {
    [[ $DRY_RUN == 1 ]] && skip "dry run: the calibration times kernels on a real GPU"
    "$PY" -m rcuda.benchmarks.paper.model calibrate --out "$OUT/sim_model.json"
}

step_launch() {
    local extra=()
    [[ $DRY_RUN == 1 ]] && extra=(--sim --launches 2000)
    "$PY" benchmarks/gpu/local_vs_remote.py launch --out "$OUT/launch_loop.json" "${extra[@]}"
}

step_graphs() {
    local extra=()
    [[ $DRY_RUN == 1 ]] && extra=(--sim --steps 50)
    "$PY" benchmarks/gpu/local_vs_remote.py graphs --out "$OUT/graph_step.json" "${extra[@]}"
}

step_paper() {
    local extra=()
    [[ $DRY_RUN == 1 ]] && extra=(--quick)
    "$PY" -m rcuda.cli bench paper --out "$OUT/bench" "${extra[@]}"
    if [[ ${RCUDA_GPU_PAPER_CALIBRATED:-0} == 1 && -f $OUT/sim_model.json ]]; then
        RCUDA_BENCH_SIM_MODEL=$OUT/sim_model.json "$PY" -m rcuda.cli bench paper --out "$OUT/bench-calibrated" "${extra[@]}"
    fi
}

step_micro() {
    local extra=()
    [[ $DRY_RUN == 1 ]] && extra=(--quick --only startup)
    "$PY" -m rcuda.cli bench micro --out "$OUT/bench" "${extra[@]}"
}

step_tests() {
    local args=${RCUDA_GPU_PYTEST_ARGS:-tests}
    [[ $DRY_RUN == 1 ]] && args=${RCUDA_GPU_PYTEST_ARGS:-tests/test_fatbin.py}
    mkdir -p "$OUT/tests"
    # shellcheck disable=SC2086  # a list of pytest arguments
    "$PY" -m pytest -q -rs -p no:cacheprovider --durations=15 --junitxml="$OUT/tests/junit.xml" $args
}

step_summary() {
    "$PY" - <<'EOF'
import json, os, pathlib
out = pathlib.Path(os.environ["OUT"])
steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:] if line.strip()]
summary = {"dry_run": os.environ["DRY_RUN"] == "1", "steps": {s[0]: {"status": s[1], "seconds": int(s[2])} for s in steps},
           "goals": {}, "files": []}
for path in sorted(out.rglob("*.json")):
    if path.name == "summary.json":
        continue
    summary["files"].append(str(path.relative_to(out)))
    try:
        data = json.loads(path.read_text())
    except ValueError:
        continue
    for name, goal in (data.get("goals") or {}).items():
        summary["goals"][f"{path.stem}: {name}"] = goal
    if path.name == "launch_loop.json":
        for kernel, entry in data["kernels"].items():
            if "goal" in entry:
                summary["goals"][f"launch loop ({kernel} kernel): remote / local"] = entry["goal"]
    if "comparisons" in data:
        summary["demo_comparisons"] = data["comparisons"]
        summary["demo_accuracies"] = data.get("accuracies")
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
lines = ["# rcuda on a GPU machine" + (" (DRY RUN: no GPU steps)" if summary["dry_run"] else ""), "",
         "| step | status | seconds |", "|---|---|---|"]
lines += [f"| {name} | {s['status']} | {s['seconds']} |" for name, s in summary["steps"].items()]
lines += ["", "| goal | value | target | met |", "|---|---|---|---|"]
lines += [f"| {name} | {g.get('value')} | {g.get('goal')} | {g.get('met')} |" for name, g in summary["goals"].items()]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
}

# ---------------------------------------------------------------- the run

log "rcuda GPU run: repository $REPO, results in $OUT$( [[ $DRY_RUN == 1 ]] && echo ' (DRY RUN)')"
step machine 60 step_machine
step venv 600 step_venv
if [[ -n ${RCUDA_GPU_PYTHON:-} ]]; then
    PY=$RCUDA_GPU_PYTHON
elif [[ -x $REPO/.venv-gpu/bin/python ]]; then
    PY=$REPO/.venv-gpu/bin/python
else
    PY=python3
fi
export PY
log "python: $PY"
step cupy 120 step_cupy
step tests-gpu 300 step_tests_gpu
step demo 300 step_demo
step calibrate 240 step_calibrate
step launch 180 step_launch
step graphs 120 step_graphs
step paper 720 step_paper
step micro 360 step_micro
step tests 900 step_tests
BUDGET_S=$(( BUDGET_S + 30 ))  # the 30 s every step kept for this one
step summary 60 step_summary
failed=$(awk -F '\t' 'NR > 1 && ($2 ~ /^failed/ || $2 ~ /^timed out/) {printf "%s ", $1}' "$STATUS")
if [[ -n $failed ]]; then
    log "done, with failures: $failed(see $STATUS and $LOGS)"
else
    log "done: every step ok or skipped (see $STATUS)"
fi
