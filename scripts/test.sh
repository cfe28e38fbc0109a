#!/usr/bin/env bash
# Sets up ./.venv if needed, then runs the whole test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/bin/python -m pytest -q -n "${RLPOLICY_TEST_WORKERS:-2}" "$@"
