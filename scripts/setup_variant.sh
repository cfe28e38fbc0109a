#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of one CI variant and prints its path:
#
#   bash scripts/setup_variant.sh full 3.10   # venv-full-3.10: every extra (torch, TF, Ray, ONNX, ...)
#   bash scripts/setup_variant.sh full 3.12   # venv-full-3.12: the same on Python 3.12
#   bash scripts/setup_variant.sh notorch     # venv-notorch:   Python 3.10, TensorFlow, no torch
#   bash scripts/setup_variant.sh notf        # venv-notf:      Python 3.12, torch, no TensorFlow
#   bash scripts/setup_variant.sh bare        # venv-bare:      Python 3.11, no framework at all
#   bash scripts/setup_variant.sh min         # venv-min:       Python 3.10, every extra at its oldest
#                                             #                 allowed version (constraints/min.txt)
#
# Each variant is rlpolicy installed (editable) with the extras below plus the `dev` extra
# (pytest, ...). `full` has every extra, like ./.venv (scripts/setup_env.sh), on the Python
# minor version its second argument names; the three install variants have one framework
# or none, and must NOT have the others' packages (checked after the install).
# The Python comes from $PYTHON_<VARIANT> (e.g. PYTHON_NOTF=/usr/bin/python3.12; for `full`,
# PYTHON_FULL, which must be of the asked minor version), else from pyenv's newest 3.x.y of
# the wanted minor version, else from python3.X on PATH.
# The venvs live OUTSIDE the checkout, in $RLPOLICY_VENV_CACHE (default
# ~/.cache/rlpolicy-ci), so that CI's clean checkouts reuse them: a variant is rebuilt only
# when its stamp (Python version, extras, pyproject.toml's dependency lists and the
# constraints: scripts/deps_stamp.py) changed; otherwise only rlpolicy itself is
# re-installed (editable, --no-deps, pointing at this checkout), which takes a few seconds.
# A fresh machine builds them from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: setup_variant.sh full 3.10|3.11|3.12 | notorch | notf | bare | min"
variant=${1:?$usage}
required="" forbidden=""
case "$variant" in
    full)
        minor=${2:?$usage}
        [[ "$minor" =~ ^3\.[0-9]+$ ]] || { echo "setup_variant.sh: bad Python version '$minor' (want 3.X)" >&2; exit 2; }
        extras="all,dev"; required="torch tensorflow tf-keras ray onnxruntime"
        name="full-$minor" ;;
    notorch) minor=3.10; extras="tf,ray,onnx,checkpoint,cli,dev"; forbidden="torch"; name=$variant ;;
    notf)    minor=3.12; extras="torch,ray,onnx,checkpoint,cli,dev"; forbidden="tensorflow tensorflow-cpu tf-keras"; name=$variant ;;
    bare)    minor=3.11; extras="dev"; forbidden="torch tensorflow tensorflow-cpu tf-keras ray onnxruntime"; name=$variant ;;
    min)     minor=3.10; extras="all,dev"; required="torch tensorflow tf-keras ray onnxruntime"; name=$variant ;;
    *) echo "setup_variant.sh: unknown variant '$variant' ($usage)" >&2; exit 2 ;;
esac
if [ "$variant" != full ] && [ $# -gt 1 ]; then
    echo "setup_variant.sh: variant '$variant' takes no Python version (its Python is $minor)" >&2
    exit 2
fi

find_python() {
    local var="PYTHON_${variant^^}"
    if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
    local root="${PYENV_ROOT:-$HOME/.pyenv}/versions" best=""
    if [ -d "$root" ]; then
        best=$(ls "$root" | grep -E "^${minor//./\\.}\.[0-9]+$" | sort -t. -k3 -n | tail -1 || true)
    fi
    if [ -n "$best" ] && [ -x "$root/$best/bin/python3" ]; then echo "$root/$best/bin/python3"; return; fi
    if command -v "python$minor" >/dev/null 2>&1; then command -v "python$minor"; return; fi
    echo "setup_variant.sh: no Python $minor found for variant '$variant' (set $var)" >&2
    exit 2
}

py=$(find_python)
have=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$have" != "$minor" ]; then
    echo "setup_variant.sh: variant '$name' wants Python $minor, but $py is Python $have" >&2
    exit 2
fi
cache=${RLPOLICY_VENV_CACHE:-$HOME/.cache/rlpolicy-ci}
mkdir -p "$cache"
venv="$cache/venv-$name"
# The CPU torch wheel on disk is a cp311 build; on Python 3.10 and 3.12 pip takes torch of
# the pinned version from the index: on Linux the CUDA build, ~2.6 GB with its nvidia-*
# packages (about 20 s to download here, a minute or two to install); it runs on CPUs too.
constraints=constraints/cpu.txt
if [ "$variant" = min ]; then constraints=constraints/min.txt; fi
# PyPI's torch for Linux (the CUDA build) depends on triton, torch.compile's GPU kernel
# compiler. With TensorFlow 2.20+ from PyPI in the same process it crashes: TF loads its
# core library with RTLD_GLOBAL, so its copy of LLVM takes over triton's symbols, and the
# first `import triton` after `import tensorflow` (torch imports it on building an
# optimizer) dies with SIGSEGV (tensorflow/tensorflow#124205, fixed upstream after 2.21.0).
# The CPU-only machines here never use triton, so a variant with both frameworks drops it,
# as ./.venv's CPU torch never had it; torch works without it (torch.compile falls back).
drop=""
if [ "$variant" = full ] || [ "$variant" = min ]; then drop="triton"; fi
want="$("$py" -c 'import sys; print(sys.version)') | $extras | $(python3 scripts/deps_stamp.py)${drop:+ | without $drop}"
stamp="$venv/.rlpolicy-variant"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    # Same dependencies: point the editable install at this checkout (CI's clone moves).
    "$venv/bin/python" -m pip install -q --no-deps -e . >&2
    echo "$venv"
    exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >&2
"$venv/bin/python" -m pip install -q -c "$constraints" -e ".[$extras]" >&2
# A variant's point is what it has and what it has NOT: fail loudly if an extra left out a
# framework it must have, or pulled in one it must not.
for pkg in $drop; do
    "$venv/bin/python" -m pip uninstall -q -y "$pkg" >&2
done
if [ -n "$drop" ]; then
    # The crash above, checked: both frameworks load in one process, TF first.
    "$venv/bin/python" -c "import tensorflow, torch, torch._dynamo" >/dev/null 2>&1 || {
        echo "setup_variant.sh: variant '$name': importing torch._dynamo after tensorflow fails" >&2
        exit 1
    }
fi
for pkg in $required; do
    if ! "$venv/bin/python" -m pip show -q "$pkg" >/dev/null 2>&1; then
        echo "setup_variant.sh: variant '$name' must have $pkg, but it was not installed" >&2
        exit 1
    fi
done
for pkg in $forbidden; do
    if "$venv/bin/python" -m pip show -q "$pkg" >/dev/null 2>&1; then
        echo "setup_variant.sh: variant '$name' must not have $pkg, but an extra pulled it in" >&2
        exit 1
    fi
done
echo "$want" > "$stamp"
echo "$venv"
