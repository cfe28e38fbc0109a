#!/usr/bin/env bash
# Creates (or reuses) ./.venv and installs rlpolicy with everything the main job and the
# tests need. Idempotent: a second run with nothing changed takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.rlpolicy-installed
# What the install depends on (not pyproject's tool settings): scripts/deps_stamp.py.
want="$("$PY" scripts/deps_stamp.py)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip
constraints=constraints/cpu.txt
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    constraints=constraints/gpu.txt
fi
.venv/bin/python -m pip install -q -c "$constraints" -e ".[all,dev]"
echo "$want" > "$stamp"
