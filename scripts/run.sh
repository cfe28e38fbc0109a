#!/usr/bin/env bash
# Sets up ./.venv if needed, then runs the main job: trains PPO (built with build_policy_class)
# on CartPole-v1, printing the rising mean return, until the mean return of the last 100
# episodes reaches the env's reward_threshold (475). Extra arguments go to `rlpolicy train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m rlpolicy.cli train "$@"
