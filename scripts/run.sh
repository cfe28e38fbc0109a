#!/usr/bin/env bash
# Sets up ./.venv if needed, then runs the main job: trains PPO (torch; the policy is built
# with build_policy_class) on CartPole-v1 until a greedy evaluation (20 episodes, explore off)
# reaches the env's reward_threshold (475). Writes into out/cartpole-ppo: the checkpoint,
# progress.csv, learning_curve.png and an ONNX export verified with onnxruntime. Exits 4
# (--fail-if-unsolved) when the step or time budget ends before the target is reached.
# Extra arguments go to `rlpolicy train` (a later --out, --algo, ... wins); a run already in
# out/cartpole-ppo is replaced, or continued with --resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
# One intra-op thread per process: these networks are small, and extra threads only
# contend for the cores with the envs (much slower on a busy 2-core machine).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# The main job starts afresh in out/cartpole-ppo each time (--overwrite), unless the
# arguments ask to --resume it or give their own --out (an existing run there is refused).
fresh=(--overwrite)
for arg in "$@"; do
    case "$arg" in --resume|--overwrite|--out|--out=*|--checkpoint-dir|--checkpoint-dir=*) fresh=() ;; esac
done
exec .venv/bin/python -m rlpolicy.cli train --algo ppo --framework torch --env CartPole-v1 \
    --out out/cartpole-ppo --export onnx --fail-if-unsolved "${fresh[@]}" "$@"
