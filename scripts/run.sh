#!/usr/bin/env bash
# Sets up ./.venv if needed, then runs the main job: trains a policy-gradient policy built
# with build_policy_class on CartPole-v1 and prints the rising mean return.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m rlpolicy.cli train "$@"
