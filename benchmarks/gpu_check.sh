#!/usr/bin/env bash
# The GPU check (issue 19): everything that needs a real CUDA device, in one run of a few
# minutes. Skips cleanly (exit 0, with a message saying why) when torch sees no CUDA device.
#
#   1. the real-CUDA tests (pytest -m gpu: tests/policy/test_torch_policy_gpu.py);
#   2. torch towers on 1 real GPU vs the CPU: the main job's PPO policy, same weights, greedy
#      actions, value estimates and SGD minibatch steps equal within float32 tolerance;
#   3. a checkpoint written on CUDA (Adam state on the GPU) loaded on the CPU in a process
#      that sees no CUDA device: weights, actions and the next SGD steps agree;
#   4. the shared bench's rows (../shared/bench/policy_bench.py --quick: compute_actions b1,
#      b256, learn_on_batch, buffered SGD) with rlpolicy's towers on the GPU.
#
# Usage: bash benchmarks/gpu_check.sh [OUT_DIR]   (default: out/gpu_check; the bench tables
# land in OUT_DIR/bench_gpu.md and OUT_DIR/bench_gpu.json, the log in OUT_DIR/gpu_check.log).
# PYTHON overrides the interpreter (default: .venv/bin/python if present, else python3).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-out/gpu_check}"
py="${PYTHON:-}"
if [ -z "$py" ]; then
    if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" TF_CPP_MIN_LOG_LEVEL=3

detail=$("$py" benchmarks/gpu_check.py has-cuda)
code=$?
if [ "$code" -ne 0 ]; then
    if [ "$code" -eq 3 ] || [ "$code" -eq 4 ]; then
        echo "gpu_check: SKIPPED, no CUDA device: $detail"
        exit 0
    fi
    echo "gpu_check: could not ask torch for CUDA devices (exit $code): $detail" >&2
    exit "$code"
fi
mkdir -p "$out"
log="$out/gpu_check.log"
: > "$log"
echo "gpu_check: $detail" | tee -a "$log"
failed=()
step() {  # step NAME TIMEOUT_S COMMAND...
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "== $name" | tee -a "$log"
    timeout "$limit" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    echo "== $name: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in $((SECONDS - t0)) s" \
        | tee -a "$log"
    [ "$rc" -eq 0 ] || failed+=("$name")
}
step "real-CUDA tests" 120 "$py" -m pytest -q -p no:cacheprovider -m gpu \
    tests/policy/test_torch_policy_gpu.py
step "towers: 1 GPU vs CPU" 60 "$py" benchmarks/gpu_check.py towers --device cuda:0
rm -rf "$out/checkpoint"
step "checkpoint: written on CUDA" 60 "$py" benchmarks/gpu_check.py checkpoint-write "$out/checkpoint"
step "checkpoint: loaded on CPU" 60 env CUDA_VISIBLE_DEVICES= "$py" benchmarks/gpu_check.py \
    checkpoint-load "$out/checkpoint"
step "shared bench on the GPU" 150 "$py" benchmarks/gpu_check.py bench --libs rlpolicy,raw --quick \
    --no-profile --no-verify --max-wall 90 --out "$out/bench_gpu.json" --md "$out/bench_gpu.md"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "gpu_check: FAILED: ${failed[*]} (log: $log)"
    exit 1
fi
echo "gpu_check: all passed in $SECONDS s (log: $log; bench tables: $out/bench_gpu.md)"
