"""The source distribution and the license: what ``pip download --no-binary`` users get.

The sdist is built from a copy of the working tree (so the build's egg-info never
touches the checkout) with setuptools' PEP 517 backend, the one ``pip`` and
``python -m build`` call.
"""

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SKIP = shutil.ignore_patterns(
    ".venv",
    ".venv-*",
    ".git",
    "__pycache__",
    "*.egg-info",
    "*.pyc",
    ".hypothesis",
    ".pytest_cache",
    "out",
    "runs",
    "build",
    "dist",
)


def _repo_files(folder: str, suffix: str = ""):
    base = ROOT / folder
    return {
        p.relative_to(ROOT).as_posix()
        for p in base.rglob(f"*{suffix}")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def sdist_names(tmp_path_factory):
    """The file names inside the sdist, relative to its top folder."""
    # pyproject.toml's SPDX `license = "..."` needs setuptools >= 77 (its build-system pin).
    pytest.importorskip("setuptools", minversion="77")
    tmp = tmp_path_factory.mktemp("sdist")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_SKIP)
    code = textwrap.dedent("""
        import sys
        from setuptools import build_meta
        print(build_meta.build_sdist(sys.argv[1]))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    archive = tmp / "dist" / proc.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    top = names[0].split("/")[0]
    assert all(n.startswith(top + "/") for n in names)
    return {n[len(top) + 1 :] for n in names}


def test_license_is_the_apache_2_text_the_metadata_names():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_license_names_its_owner_and_notice_credits_rllibs_api_design():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "[yyyy]" not in text and "[name of copyright owner]" not in text
    assert "Copyright 2026 The rlpolicy authors" in text
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    assert "Ray RLlib" in notice and "API" in notice and "no RLlib source is included" in notice
    assert "NOTICE" in (ROOT / "MANIFEST.in").read_text(encoding="utf-8")


def test_sdist_holds_every_test_file(sdist_names):
    repo_tests = _repo_files("tests", ".py")
    assert len(repo_tests) > 50  # the suite, not a handful
    missing = sorted(repo_tests - sdist_names)
    assert not missing, (
        f"{len(missing)} of {len(repo_tests)} test files missing from the sdist: {missing[:10]}"
    )


@pytest.mark.parametrize("folder", ["docs", "benchmarks", "scripts", "constraints", "examples"])
def test_sdist_holds_folder(sdist_names, folder):
    repo = _repo_files(folder)
    assert repo, folder
    assert repo <= sdist_names, sorted(repo - sdist_names)


def test_sdist_holds_license_package_and_no_bytecode(sdist_names):
    assert {"LICENSE", "README.md", "pyproject.toml", "MANIFEST.in"} <= sdist_names
    assert "rlpolicy/policy/policy.py" in sdist_names
    assert not [n for n in sdist_names if n.endswith(".pyc") or "__pycache__" in n]


def test_porting_guide_says_one_thing_about_sampling_options_and_lists_absent_modules():
    import re

    text = (ROOT / "docs" / "porting.md").read_text(encoding="utf-8")
    # The sampling options work (tests/evaluation/test_worker_config_2x.py and others); no
    # sentence may say they are not accepted.
    for sentence in re.split(r"(?<=[.;])\s", " ".join(text.split())):
        if "not accepted" in sentence:
            assert not any(k in sentence for k in ("episode_horizon", "clip_rewards", "sample_async")), (
                sentence
            )
    for module in (
        "agents.trainer_template",
        "execution.train_ops",
        "execution.rollout_ops",
        "evaluation.metrics",
    ):
        assert re.search(rf"^\| `{re.escape(module)}", text, re.M) or f"`{module}`" in text, module
    assert "algorithms other than PG, PPO and DQN" in text
