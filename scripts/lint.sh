#!/usr/bin/env bash
# Lint and type checks, with the settings in pyproject.toml ([tool.ruff], [tool.mypy]):
#   1. ruff check            (pyflakes, pycodestyle, import order, bug-prone patterns)
#   2. ruff format --check   (the formatter would change nothing)
#   3. mypy                  (the files pyproject.toml names: rlpolicy/_core, policy, models and utils; check_untyped_defs for _core and policy)
# Runs all three even when one fails, prints one PASS/FAIL line each, and exits non-zero if
# any failed. `bash scripts/lint.sh check format` runs only the named steps.
# Uses ./.venv (made by scripts/setup_env.sh; ruff and mypy come with the `dev` extra).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${RLPOLICY_LINT_BIN:-.venv/bin}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(check format types)
for step in "${steps[@]}"; do
    case "$step" in
        check|format|types) ;;
        *) echo "lint.sh: unknown step '$step' (check, format, types)" >&2; exit 2 ;;
    esac
done
failed=()
for step in "${steps[@]}"; do
    case "$step" in
        check)  cmd=("$bin/ruff" check --output-format concise .) ;;
        format) cmd=("$bin/ruff" format --check --output-format concise .) ;;
        types)  cmd=("$bin/mypy") ;;
    esac
    echo "== $step: ${cmd[*]}"
    if "${cmd[@]}"; then
        echo "== $step: PASS"
    else
        echo "== $step: FAIL"
        failed+=("$step")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "lint.sh: failed: ${failed[*]}"
    exit 1
fi
echo "lint.sh: all passed (${steps[*]})"
