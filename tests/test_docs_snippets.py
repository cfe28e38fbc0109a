"""Every ```python block of README.md and docs/ runs.

The blocks of one page run in order in one namespace (a fresh ``__main__``
module, as a script's would be), inside an empty directory of their own: a
block may use names defined by an earlier block of the same page, as a
reader following the page would. All pages run in one fresh interpreter
(importing torch once); a block that raises fails its page's test, with the
page and line in the traceback.
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

RUNNER = textwrap.dedent("""
    import json, os, sys, traceback, types
    pages, out_file = json.loads(sys.stdin.read()), sys.argv[1]
    base, results = os.getcwd(), {}
    for i, (page, blocks) in enumerate(pages.items()):
        os.makedirs(os.path.join(base, str(i)))
        os.chdir(os.path.join(base, str(i)))
        module = types.ModuleType("__main__")
        sys.modules["__main__"] = module
        try:
            for line, source in blocks:
                # Padded so that traceback line numbers are the page's own.
                exec(compile("\\n" * line + source, page, "exec"), module.__dict__)
            results[page] = None
        except BaseException:
            results[page] = traceback.format_exc()
    with open(out_file, "w") as f:
        json.dump(results, f)
""")


def python_blocks(page: Path):
    """[(line of the block's first code line (0-based), source)] of a Markdown page."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)), m.group(1)) for m in FENCE.finditer(text)]


def _needs(blocks):
    imported = set()
    for _, src in blocks:
        imported |= set(re.findall(r"^\s*(?:import|from)\s+(\w+)", src, re.M))
    return [m for m in OPTIONAL if m in imported]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


@pytest.fixture(scope="module")
def page_results(tmp_path_factory):
    """{page path: None if all its blocks ran, else the traceback}."""
    tmp = tmp_path_factory.mktemp("docs_snippets")
    payload = json.dumps({str(p): python_blocks(p) for p in PAGES_WITH_CODE})
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out_file = tmp / "results.json"
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(out_file)], input=payload, cwd=tmp,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and out_file.exists(), proc.stderr[-4000:]
    return json.loads(out_file.read_text())


def test_pages_with_python_blocks_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES_WITH_CODE}
    assert {"README.md", "docs/index.md", "docs/config.md"} <= names


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(page, page_results):
    for module in _needs(python_blocks(page)):
        pytest.importorskip(module)
    assert page_results[str(page)] is None, f"{page.name}:\n{page_results[str(page)]}"
