"""constraints/min.txt pins the oldest versions pyproject.toml allows: every floor of the
package's requirements (its dependencies and the extras `all` gathers) equals its pin, and
every pin is such a floor. The min CI job installs these pins and runs the default tier."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.meta

packaging = pytest.importorskip("packaging")
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402
from packaging.version import Version  # noqa: E402

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
MIN_TXT = ROOT / "constraints" / "min.txt"


def _user_requirements(project):
    """The requirement strings users install: `dependencies` plus each extra that `all` names
    (the tool extras dev/docs/bench are not the package's promises)."""
    extras = project["optional-dependencies"]
    (meta,) = [r for r in extras["all"] if r.startswith(project["name"] + "[")]
    names = re.search(r"\[(.*)\]", meta).group(1).split(",")
    reqs = list(project["dependencies"])
    for name in names:
        reqs += extras[name.strip()]
    return reqs


def _floors(requirements):
    """{canonical name: floor Version}; a requirement without exactly one `>=` is an error."""
    floors = {}
    for text in requirements:
        req = Requirement(text)
        lower = [s for s in req.specifier if s.operator == ">="]
        if len(lower) != 1:
            raise ValueError(f"requirement {text!r} has no single '>=' floor")
        floors[canonicalize_name(req.name)] = Version(lower[0].version)
    return floors


def _pins(text):
    """{canonical name: pinned Version} of a constraints file; only `name==version` lines."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)\s*==\s*([0-9][0-9A-Za-z.]*)", line)
        if not match:
            raise ValueError(f"constraints line {line!r} is not an exact pin 'name==version'")
        name = canonicalize_name(match.group(1))
        if name in pins:
            raise ValueError(f"{name} is pinned twice")
        pins[name] = Version(match.group(2))
    return pins


def _mismatches(floors, pins):
    out = []
    for name in sorted(set(floors) | set(pins)):
        if name not in pins:
            out.append(f"{name}: floor {floors[name]} has no pin")
        elif name not in floors:
            out.append(f"{name}: pinned {pins[name]} but pyproject.toml has no floor for it")
        elif floors[name] != pins[name]:
            out.append(f"{name}: floor {floors[name]} != pin {pins[name]}")
    return out


def test_every_floor_equals_its_pin_and_every_pin_is_a_floor():
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    floors = _floors(_user_requirements(project))
    pins = _pins(MIN_TXT.read_text(encoding="utf-8"))
    assert _mismatches(floors, pins) == []
    # The frameworks are among them (the point of the file).
    assert {"torch", "tensorflow", "tf-keras", "gymnasium", "numpy", "dm-tree", "ray"} <= set(pins)


def test_the_check_reports_each_kind_of_mismatch():
    floors = _floors(["numpy>=1.23", "gymnasium>=0.29", "Dm_Tree>=0.1.8"])
    pins = _pins("# comment\nnumpy==1.23.5\ngymnasium==0.29.0  # same as 0.29\ndm-tree==0.1.8\nray==2.9.0\n")
    assert _mismatches(floors, pins) == [
        "numpy: floor 1.23 != pin 1.23.5",
        "ray: pinned 2.9.0 but pyproject.toml has no floor for it",
    ]
    assert _mismatches({"torch": Version("2.0")}, {}) == ["torch: floor 2.0 has no pin"]
    with pytest.raises(ValueError, match="'scipy' has no single '>=' floor"):
        _floors(["scipy"])
    with pytest.raises(ValueError, match="'torch>=2.0' is not an exact pin"):
        _pins("torch>=2.0\n")
    with pytest.raises(ValueError, match="numpy is pinned twice"):
        _pins("numpy==1.23.5\nNumPy==1.24\n")


def test_the_min_variant_and_the_ci_job_agree_on_python_and_constraints():
    script = (ROOT / "scripts" / "setup_variant.sh").read_text(encoding="utf-8")
    minor = re.search(r"^\s*min\)\s+minor=(3\.[0-9]+);", script, re.M).group(1)
    assert "constraints=constraints/min.txt" in script
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    matrix = {entry["job"]: entry for entry in workflow["jobs"]["ci"]["strategy"]["matrix"]["include"]}
    assert matrix["min"]["python"] == minor
    assert re.search(
        rf"^#   min\s+Python {re.escape(minor)},", (ROOT / ".ci" / "run").read_text(encoding="utf-8"), re.M
    )
