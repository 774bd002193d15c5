#!/usr/bin/env bash
# The GPU check (issue 41), on a bare GPU machine: install what it lacks from the wheels
# packed here (`make gpu-pack` -> .gpu-check/), run the CUDA tests, a CUDA smoke run of
# `steer-eval run` with dummy Gemma 3 4B weights (3 concepts), and the GPU bench (ours
# against HF generate + hook, dynamic and static compiled cache, at 256 and 1,024 rows),
# then write every figure to one JSON file.
#
#   bash bench/gpu_check.sh OUT.json            # e.g. $OUT/gpu-check.json on the device
#
# Each step runs even when an earlier one failed; steps.jsonl records each one's exit
# status and seconds, and each step's log lies beside OUT.json, so a step that breaks
# (or a run stopped at its time limit) still leaves what the others measured.
# GPU_CHECK_STEPS picks steps (default "tests smoke bench profile": the last is a kernel
# profile of one decode step of ours at each batch size; "levers" times our decode under
# each lever the profile names, experiments/bench/gpu/gpu_levers.py); GPU_CHECK_ROWS the bench's
# batch sizes (default 256,1024); GPU_CHECK_COMPILED=0 leaves out HF's compiled arm;
# GPU_CHECK_DEVICE and GPU_CHECK_MODEL (default cuda, the 4B config's model) let the
# script rehearse on a CPU (cpu, embedded); GPU_CHECK_SECONDS, when set, is the whole
# script's time: the bench (the last step) is stopped 20 s before it, and its per-arm
# lines in bench.log still reach the report.
set -u -o pipefail
out=${1:?usage: bench/gpu_check.sh OUT.json}
cd "$(dirname "$0")/.."
root=$PWD
mkdir -p "$(dirname "$out")"
dir=$(cd "$(dirname "$out")" && pwd)
py=${PYTHON:-python3}
luggage=${GPU_CHECK_DIR:-.gpu-check}
site=${GPU_CHECK_SITE:-/tmp/steer-eval-site}
steps=${GPU_CHECK_STEPS:-tests smoke bench profile}
rows=${GPU_CHECK_ROWS:-256,1024}
device=${GPU_CHECK_DEVICE:-cuda}
model=${GPU_CHECK_MODEL:+--model $GPU_CHECK_MODEL}
compiled=$([ "${GPU_CHECK_COMPILED:-1}" = 0 ] && echo --no-gpu-compiled || echo --gpu-compiled)
export STEER_EVAL_CACHE=${STEER_EVAL_CACHE:-/tmp/steer-eval-cache}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$dir/mlruns.db}
: >"$dir/steps.jsonl"
began=$(date +%s)

step() {  # step NAME COMMAND...: run it, log it, record its status and time
  local name=$1 start rc ms
  shift
  echo "== $name: $*"
  start=$(date +%s%N)
  "$@" 2>&1 | tee "$dir/$name.log"
  rc=${PIPESTATUS[0]}
  ms=$((($(date +%s%N) - start) / 1000000))
  printf '{"step": "%s", "rc": %d, "seconds": %d.%03d}\n' "$name" "$rc" $((ms / 1000)) \
    $((ms % 1000)) >>"$dir/steps.jsonl"
  echo "== $name: exit $rc"
}

cli=(-c 'import sys; sys.argv[0] = "steer-eval"; from experiments.cli import app; app()')
steer_eval() { "$py" "${cli[@]}" "$@"; }

install() {
  rm -rf "$site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$luggage"/wheels/*.whl
}

cuda_tests() {  # every test marked cuda, from the files that hold one
  # shellcheck disable=SC2046
  "$py" -m pytest -m cuda -q -p no:cacheprovider --junitxml "$dir/pytest-cuda.xml" \
    $(grep -rl "mark.cuda" tests --include='*.py')
}

smoke() {  # 3 concepts, the 4B config with random weights, on the card
  # shellcheck disable=SC2086
  steer_eval run --config configs/gemma-3-4b.yaml --concepts 3 $model \
    --set device="$device" --set model_load_format=dummy \
    --set classifier.dir="$dir/classifiers" --results-dir "$dir/smoke" --no-traces
}

bench() {
  local limit=()
  if [ -n "${GPU_CHECK_SECONDS:-}" ]; then
    limit=(timeout $((GPU_CHECK_SECONDS - ($(date +%s) - began) - 20)))
  fi
  "${limit[@]}" "$py" "${cli[@]}" bench --device "$device" --only gpu --gpu-rows "$rows" \
    "$compiled" --out "$dir/bench-gpu.json"
}

if [ -d "$luggage/wheels" ]; then
  step install install
  export PYTHONPATH=$site:$root${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d "$luggage/assets" ]; then
  step assets "$py" -m experiments.bench.gpu.gpu_check unpack "$luggage" "$STEER_EVAL_CACHE" "$site"
fi
step machine "$py" -m experiments.bench.gpu.gpu_check machine "$dir/env.json" --device "$device"
for s in $steps; do
  case $s in
    tests) step tests cuda_tests ;;
    smoke) step smoke smoke ;;
    bench) step bench bench ;;
    # shellcheck disable=SC2086
    profile) step profile "$py" -m experiments.bench.gpu.gpu_profile --rows "$rows" $model \
      --device "$device" --out "$dir/profile.json" ;;
    # shellcheck disable=SC2086
    levers) step levers "$py" -m experiments.bench.gpu.gpu_levers --rows "$rows" $model \
      --device "$device" --out "$dir/levers.json" ;;
    *) echo "unknown step $s (tests, smoke, bench, profile, levers)" >&2 ;;
  esac
done
"$py" -m experiments.bench.gpu.gpu_check report "$dir" "$out"
