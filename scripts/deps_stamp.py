"""Prints a fingerprint of what an environment install depends on: pyproject.toml's
[project] dependencies, optional-dependencies and requires-python, plus the constraints
files. Tool settings elsewhere in pyproject.toml (ruff, mypy, pytest) do not change it, so
editing them does not rebuild the venvs. On Python 3.10 (no tomllib) the whole pyproject.toml counts."""

import hashlib
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent
text = (root / "pyproject.toml").read_text()
try:
    import tomllib
except ImportError:  # Python 3.10: the whole file counts
    parts = {"pyproject": text}
else:
    project = tomllib.loads(text)["project"]
    parts = {key: project.get(key) for key in ("dependencies", "optional-dependencies", "requires-python")}
parts["constraints"] = {p.name: p.read_text() for p in sorted((root / "constraints").glob("*.txt"))}
parts["extra"] = sys.argv[1:]
print(hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest())
