"""Every ```python block of README.md and docs/ runs, as a reader would paste it.

Each block runs on its own: in a fresh namespace (a new ``__main__`` module, as
a script's would be) and a new empty directory, so a block pasted alone into
an interpreter works. A block that goes on from the one before it says so in
its first line, a comment starting with ``# (continued`` (for example
``# (continued from the block above)``); it runs in that block's namespace
and directory, after it. All pages run in one fresh interpreter (importing
torch once); a block that raises fails its page's test, with the page and
line in the traceback.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
OPTIONAL = ("torch", "tensorflow", "onnxruntime", "onnx")

# The first line of a block that continues the one before it.
CONTINUATION = re.compile(r"^[ \t]*#[ \t]*\(continued\b", re.I)

RUNNER = textwrap.dedent("""
    import json, os, sys, traceback, types
    pages, out_file = json.loads(sys.stdin.read()), sys.argv[1]
    base, results = os.getcwd(), {}
    for i, (page, blocks) in enumerate(pages.items()):
        try:
            for j, (line, source, continued) in enumerate(blocks):
                if not continued:  # a fresh namespace and directory, as pasted alone
                    os.makedirs(os.path.join(base, f"{i}-{j}"))
                    os.chdir(os.path.join(base, f"{i}-{j}"))
                    module = types.ModuleType("__main__")
                    sys.modules["__main__"] = module
                # Padded so that traceback line numbers are the page's own.
                exec(compile("\\n" * line + source, page, "exec"), module.__dict__)
            results[page] = None
        except BaseException:
            results[page] = traceback.format_exc()
    with open(out_file, "w") as f:
        json.dump(results, f)
""")


def python_blocks(page: Path):
    """[(line of the block's first code line (0-based), source, continues the
    previous block)] of a Markdown page."""
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start(1)), m.group(1), bool(CONTINUATION.match(m.group(1))))
        for m in FENCE.finditer(text)
    ]


# A framework named as a string ("torch", "tf", "tf2": framework=..., build_policy_class's
# argument) or in a name (PGTorchPolicy, DynamicTFPolicy, torch_policy, ppo_tf_policy) needs
# its package as much as an import does.
FRAMEWORK_STRINGS = {
    "torch": re.compile(r"[\"']torch[\"']|\w*Torch\w*|\btorch_\w+|\w+_torch\b"),
    "tensorflow": re.compile(r"[\"']tf2?[\"']|\w*TF\w*|\btf_\w+|\w+_tf\b"),
}


def _needs(blocks):
    """The optional packages a page's blocks import or name as a framework."""
    imported = set()
    for _, src, _ in blocks:
        imported |= set(re.findall(r"^\s*(?:import|from)\s+(\w+)", src, re.M))
        imported |= {m for m, pattern in FRAMEWORK_STRINGS.items() if pattern.search(src)}
    return [m for m in OPTIONAL if m in imported]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


@pytest.fixture(scope="module")
def page_results(tmp_path_factory):
    """{page path: None if all its blocks ran, else the traceback}."""
    tmp = tmp_path_factory.mktemp("docs_snippets")
    payload = json.dumps({str(p): python_blocks(p) for p in PAGES_WITH_CODE})
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    out_file = tmp / "results.json"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(out_file)],
        input=payload,
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and out_file.exists(), proc.stderr[-4000:]
    return json.loads(out_file.read_text())


def test_pages_with_python_blocks_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES_WITH_CODE}
    assert {"README.md", "docs/index.md", "docs/config.md"} <= names


def test_continuation_marker_is_recognised():
    assert CONTINUATION.match("# (continued from the block above)\nx = 1\n")
    assert CONTINUATION.match("  # (Continued: uses `policy`)\n")
    assert not CONTINUATION.match("import numpy as np  # (continued\n")
    assert not CONTINUATION.match("# continues below\n")


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_starts_with_a_continuation(page):
    blocks = python_blocks(page)
    assert not blocks[0][2], f"{page.name}: its first python block is marked as a continuation"


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(page, page_results):
    for module in _needs(python_blocks(page)):
        pytest.importorskip(module)
    assert page_results[str(page)] is None, f"{page.name}:\n{page_results[str(page)]}"


def test_runner_gives_each_unmarked_block_a_fresh_namespace_and_directory(tmp_path):
    pages = {
        "fresh.md": [[0, "x = 1\nopen('f', 'w').close()\n", False], [3, "x\n", False]],
        "files.md": [[0, "open('f', 'w').close()\n", False], [2, "open('f')\n", False]],
        "continued.md": [
            [0, "x = 1\nopen('f', 'w').close()\n", False],
            [3, "# (continued)\nassert x == 1\nopen('f')\n", True],
        ],
    }
    out_file = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(out_file)],
        input=json.dumps(pages),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out_file.read_text())
    assert "NameError: name 'x' is not defined" in results["fresh.md"]
    assert "FileNotFoundError" in results["files.md"]
    assert results["continued.md"] is None
