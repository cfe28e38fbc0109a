"""The CI's own files: the scripts refuse names they do not know before building anything
(default tier), and .ci/run's jobs, the GitHub matrix and the pre-commit hooks agree with
each other (the `meta` tier)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI_RUN = ROOT / ".ci" / "run"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
PRE_COMMIT = ROOT / ".pre-commit-config.yaml"


def _job_list(name):
    match = re.search(rf"^{name}=\(([^)]*)\)", CI_RUN.read_text(encoding="utf-8"), re.M)
    assert match, f".ci/run has no {name}=(...) line"
    return match.group(1).split()


def _ci_jobs():
    return _job_list("default_jobs") + _job_list("full_jobs")


def _bash(*args):
    return subprocess.run(["bash", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.meta
@pytest.mark.skipif(not CI_RUN.exists(), reason="no .ci/ (e.g. an unpacked sdist)")
def test_every_ci_job_has_a_function_and_a_header_entry():
    text = CI_RUN.read_text(encoding="utf-8")
    header = text.split("\nset -", 1)[0]
    jobs = _ci_jobs()
    for job in jobs:
        assert re.search(rf"^job_{re.escape(job)}\(\)", text, re.M), job
        assert re.search(rf"^#   {re.escape(job)}\b", header, re.M), f"{job} is not described in the header"


@pytest.mark.meta
@pytest.mark.skipif(not WORKFLOW.exists(), reason="no .github/ (e.g. an unpacked sdist)")
def test_github_matrix_runs_the_same_jobs_as_ci_run():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    matrix = workflow["jobs"]["ci"]["strategy"]["matrix"]["include"]
    assert [entry["job"] for entry in matrix] == _ci_jobs()
    pythons = {entry["job"]: entry["python"] for entry in matrix}
    assert pythons["py310"] == "3.10" and pythons["py311"] == "3.11" and pythons["py312"] == "3.12"
    # Each variant job hands its Python to the variant .ci/run builds for it.
    variant_python = {entry["job"]: entry.get("variant_python") for entry in matrix}
    assert variant_python["py310"] == variant_python["py312"] == "PYTHON_FULL"
    for job in ("notorch", "notf", "bare", "min"):
        assert variant_python[job] == f"PYTHON_{job.upper()}"
    # No runner downloads torch's CUDA build: torch comes from the CPU wheel index.
    assert "download.pytorch.org/whl/cpu" in workflow["jobs"]["ci"]["env"]["PIP_EXTRA_INDEX_URL"]


@pytest.mark.meta
@pytest.mark.skipif(not PRE_COMMIT.exists(), reason="no .pre-commit-config.yaml (e.g. an unpacked sdist)")
def test_pre_commit_hooks_are_local_and_use_the_venv_tools():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load(PRE_COMMIT.read_text(encoding="utf-8"))
    assert [repo["repo"] for repo in config["repos"]] == ["local"]  # nothing to fetch
    hooks = {hook["id"]: hook for hook in config["repos"][0]["hooks"]}
    assert set(hooks) == {"ruff-check", "ruff-format", "mypy"}
    for hook in hooks.values():
        assert hook["language"] == "system"
        assert hook["entry"].startswith(".venv/bin/")
    assert "--check" in hooks["ruff-format"]["entry"]  # checks, never rewrites files


@pytest.mark.skipif(not CI_RUN.exists(), reason="no .ci/ (e.g. an unpacked sdist)")
def test_ci_run_refuses_an_unknown_job_before_installing_anything():
    proc = _bash(str(CI_RUN), "lint", "nope")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f".ci/run: unknown job 'nope' (jobs: {' '.join(_ci_jobs())}; or full)"


@pytest.mark.parametrize(
    "script, arg, message",
    [
        (
            "scripts/setup_variant.sh",
            ["nope"],
            "setup_variant.sh: unknown variant 'nope' (usage: setup_variant.sh full 3.10|3.11|3.12 "
            "| notorch | notf | bare | min)",
        ),
        ("scripts/setup_variant.sh", ["full", "3"], "setup_variant.sh: bad Python version '3' (want 3.X)"),
        (
            "scripts/setup_variant.sh",
            ["notf", "3.11"],
            "setup_variant.sh: variant 'notf' takes no Python version (its Python is 3.12)",
        ),
        ("scripts/lint.sh", ["nope"], "lint.sh: unknown step 'nope' (check, format, types)"),
    ],
)
def test_scripts_refuse_unknown_names(script, arg, message, tmp_path, monkeypatch):
    # Nothing may be built for a refused name: an empty venv cache stays empty.
    monkeypatch.setenv("RLPOLICY_VENV_CACHE", str(tmp_path / "cache"))
    proc = _bash(script, *arg)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == message


def test_setup_variant_full_needs_a_python_version(tmp_path, monkeypatch):
    monkeypatch.setenv("RLPOLICY_VENV_CACHE", str(tmp_path / "cache"))
    proc = _bash("scripts/setup_variant.sh", "full")
    assert proc.returncode != 0 and proc.stdout == ""
    assert "usage: setup_variant.sh full 3.10|3.11|3.12" in proc.stderr
    assert not (tmp_path / "cache").exists()


def test_setup_variant_refuses_a_python_of_another_version(tmp_path, monkeypatch):
    # PYTHON_FULL names the interpreter to use; one of another minor version than the
    # variant asks for is refused before any venv is made.
    other = "3.10" if sys.version_info[:2] != (3, 10) else "3.12"
    monkeypatch.setenv("RLPOLICY_VENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHON_FULL", sys.executable)
    proc = _bash("scripts/setup_variant.sh", "full", other)
    assert proc.returncode == 2 and proc.stdout == ""
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert proc.stderr.strip() == (
        f"setup_variant.sh: variant 'full-{other}' wants Python {other}, but {sys.executable} is Python {have}"
    )
    assert not (tmp_path / "cache").exists()
