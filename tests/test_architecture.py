"""The package's structure rules (issues 17 and 27), read from the source with ``ast``.

Nothing of rlpolicy is imported: every file under ``rlpolicy/`` is parsed and
its ``import`` / ``from`` statements (at module level, inside functions and
classes, under ``TYPE_CHECKING``) and ``importlib.import_module("...")`` calls
with a literal name are collected. The rules:

1. Layers: every file has a rank (``RANKS``: a folder, or a file ranked apart
   from its folder, relative to ``rlpolicy/``; the longest entry that holds the
   file wins) and imports only from its own rank or below: no arrow runs back
   up, whether module-level, function-level, by name or for type hints. Two
   places of one rank may not import each other (no circle between folders).
   ``docs/architecture.md`` shows the same table.
2. ``rlpolicy/_core/`` calls no framework's API (an allow-list below names the
   two files that handle either framework's tensors generically).
3. No import cycle among rlpolicy's files. Function-level imports count (a
   lazy import hides a cycle from Python, not from the design); imports under
   ``if TYPE_CHECKING:`` do not (they never run).
4. No file sets another object's private attribute (``x._a = ...``,
   ``x._a += ...``, ``x.__dict__["_a"] = ...``, ``setattr(x, "_a", ...)``)
   unless ``x`` is ``self`` or ``cls``; a short allow-list below names the
   cases that are no class's privates, each with its reason.
5. No file reads a private attribute that rlpolicy's classes define
   (``x._a``, ``getattr(x, "_a")``) on an object other than ``self``/``cls``,
   unless the file defines that attribute itself (a module's classes share its
   privates); framework privates (a name no rlpolicy class defines) are the
   fast-path package's business. A short allow-list names the exceptions.
6. No module-global table keyed by objects (a ``WeakKeyDictionary`` or
   ``WeakValueDictionary`` bound at module level): an object's state is its own
   attribute (issue 27 part 3).

Each test lists every violation it finds, one per line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlpolicy"

# (file relative to the repository root, assignment target as written) -> why it is allowed.
PRIVATE_SET_ALLOWED: Dict[Tuple[str, str], str] = {
    (
        "rlpolicy/policy/sample_batch.py",
        "out._is_training",
    ): "SampleBatch's own fast constructor filling the new instance of its class",
    (
        "rlpolicy/policy/sample_batch.py",
        "out._slice_map",
    ): "SampleBatch's own fast constructor filling the new instance of its class",
    ("rlpolicy/utils/filter.py", "other._n"): "RunningStat.copy fills the copy of its own class",
    ("rlpolicy/utils/filter.py", "other._M"): "RunningStat.copy fills the copy of its own class",
    ("rlpolicy/utils/filter.py", "other._S"): "RunningStat.copy fills the copy of its own class",
    (
        "rlpolicy/evaluation/sample_batch_builder.py",
        "SampleBatchBuilder._next_unroll_id",
    ): "the class's own counter, advanced in its own method through the class name",
    (
        "rlpolicy/policy/torch_policy.py",
        "DirectStepOptimizer._instance",
    ): "the singleton's own __new__ storing its instance on its class",
    (
        "rlpolicy/models/torch/dist_helpers.py",
        "obj.__dict__['_lazy_dist']",
    ): "a descriptor caching its value in the instance it describes (the descriptor protocol)",
    (
        "rlpolicy/utils/annotations.py",
        "obj._rlpolicy_api",
    ): "the API-stability decorators tag the function or class they decorate",
    (
        "rlpolicy/policy/policy_template.py",
        "_fn._policy_template_wrapper",
    ): "a marker attribute on a module-level function (no class's state)",
}


@dataclass(frozen=True)
class Import:
    """One import of an rlpolicy module by an rlpolicy file."""

    target: str  # the imported module, e.g. "rlpolicy.policy.sample_batch"
    line: int
    type_checking: bool  # under `if TYPE_CHECKING:`
    kind: str  # "module", "function" (inside a def or class) or "string" (importlib)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _files() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _files()


def _resolve(name: str) -> Optional[str]:
    """The longest prefix of dotted ``name`` that is an rlpolicy module (or None)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(module: str) -> List[Import]:
    """Every import of an rlpolicy module that ``module``'s file makes."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = _package_of(module, path)
    found: List[Import] = []

    def add(name: str, node: ast.AST, tc: bool, kind: str) -> None:
        target = _resolve(name) if name.startswith("rlpolicy") else None
        if target is not None and target != module:
            found.append(Import(target, getattr(node, "lineno", 0), tc, kind))

    def visit(node: ast.AST, tc: bool, in_def: bool) -> None:
        kind = "function" if in_def else "module"
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, tc, kind)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                # `from pkg import submodule` imports the submodule; `from mod import name` the module.
                add(
                    f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in MODULES else prefix,
                    node,
                    tc,
                    kind,
                )
        elif isinstance(node, ast.Call) and _is_import_module_call(node):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                add(arg.value, node, tc, "string")
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True, in_def)
            for child in node.orelse:
                visit(child, tc, in_def)
            return
        nested = in_def or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, tc, nested)

    visit(tree, False, False)
    return found


def _is_import_module_call(node: ast.Call) -> bool:
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("import_module", "__import__") and bool(node.args)


IMPORTS = {m: imports_of(m) for m in MODULES}


def _rel(module: str) -> str:
    path = MODULES[module]
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name  # (a test's probe file)


def _where(module: str, imp: Import) -> str:
    how = {"module": "", "function": " (function-level)", "string": " (importlib, by name)"}[imp.kind]
    tc = " (TYPE_CHECKING)" if imp.type_checking else ""
    return f"{_rel(module)}:{imp.line} imports {imp.target}{how}{tc}"


# ---------------------------------------------------------------------- rule 1

# Place (a folder or a file, relative to rlpolicy/) -> rank. A file belongs to the
# longest place that holds it; it imports only from places of its rank or below.
# docs/architecture.md shows this table (test_architecture_doc_shows_the_rank_table).
RANKS: Dict[str, int] = {
    "__init__.py": 0,  # the package root: a lazy name table, imports nothing by itself
    "_fast": 0,  # framework-internal fast paths, each with its guard (a leaf)
    "utils": 1,  # RLlib's utils: typing, framework imports, spaces, schedules, numpy/torch/tf ops
    "_core": 2,  # the framework-neutral floor: data in, data out
    "env": 2,  # MultiAgentEnv, EnvContext
    "utils/pre_checks": 3,  # env checks (read env/)
    "policy/sample_batch.py": 3,  # the batch data types every layer above reads (RLlib's path)
    "policy/view_requirement.py": 3,
    "utils/debug.py": 4,  # summarize() shows SampleBatches
    "models": 4,  # ModelV2, catalog, action distributions, preprocessors
    "utils/exploration": 5,  # Exploration classes: read models and action distributions
    "policy": 6,  # the policy classes, their factories, mixins and helpers
    "evaluation": 7,  # rollout workers, samplers, postprocessing
    "execution": 7,  # replay buffers, rollout ops
    "agents": 8,  # algorithms, callbacks, Trainer
    "utils/test_utils.py": 8,  # RLlib's test helpers drive policies and trainers
    "cli": 9,  # the command line
}
# Entries for places not made yet (none now).
RANKED_AHEAD: set = set()


def place_of(module: str) -> str:
    """The longest ``RANKS`` entry that holds ``module``'s file."""
    parts = module.split(".")[1:]
    if MODULES[module].name == "__init__.py":
        parts.append("__init__.py")
    else:
        parts[-1] += ".py"
    for n in range(len(parts), 0, -1):
        key = "/".join(parts[:n])
        if key in RANKS:
            return key
    raise KeyError(f"{_rel(module)} is in no RANKS entry; add its folder to the table")


def rank_violations(imports: Dict[str, List[Import]]) -> List[str]:
    """Every import from a lower rank to a higher one, and every circle between places."""
    out = []
    arrows: Dict[Tuple[str, str], str] = {}
    for module, imps in sorted(imports.items()):
        src = place_of(module)
        for imp in imps:
            dst = place_of(imp.target)
            if dst == src:
                continue
            if RANKS[dst] > RANKS[src]:
                out.append(f"{_where(module, imp)}: {src} ({RANKS[src]}) -> {dst} ({RANKS[dst]}) runs up")
            arrows.setdefault((src, dst), _where(module, imp))
    graph: Dict[str, Set[str]] = {}
    for src, dst in arrows:
        graph.setdefault(src, set()).add(dst)
    for cyc in cycles(graph):
        steps = "; ".join(arrows[(a, b)] for a, b in zip(cyc, cyc[1:]))
        out.append(f"circle {' -> '.join(cyc)}   [{steps}]")
    return out


def test_every_arrow_points_down():
    violations = rank_violations(IMPORTS)
    assert not violations, (
        "imports against the rank table (move the piece to the layer that owns it, or pass "
        "it in from above):\n  " + "\n  ".join(violations)
    )


def test_rank_table_covers_every_file_and_names_only_real_places():
    unplaced = []
    for m in MODULES:
        try:
            place_of(m)
        except KeyError as e:
            unplaced.append(str(e))
    used = {place_of(m) for m in MODULES}
    stale = sorted(set(RANKS) - used - RANKED_AHEAD)
    assert not unplaced and not stale, f"unplaced: {unplaced}; RANKS entries holding no file: {stale}"


def test_rank_check_finds_up_arrows_and_circles(tmp_path):
    low = tmp_path / "low.py"
    low.write_text("def f():\n    from rlpolicy.policy import policy\n", encoding="utf-8")
    high = tmp_path / "high.py"
    high.write_text("from rlpolicy.utils import low_probe\n", encoding="utf-8")
    evaluation = tmp_path / "ev.py"
    evaluation.write_text("import rlpolicy.execution.ex_probe\n", encoding="utf-8")
    execution = tmp_path / "ex.py"
    execution.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlpolicy.evaluation import ev_probe\n",
        encoding="utf-8",
    )
    probes = {
        "rlpolicy.utils.low_probe": low,
        "rlpolicy.policy.high_probe": high,
        "rlpolicy.evaluation.ev_probe": evaluation,
        "rlpolicy.execution.ex_probe": execution,
    }
    MODULES.update(probes)
    try:
        found = rank_violations({m: imports_of(m) for m in probes})
    finally:
        for m in probes:
            del MODULES[m]
    assert len(found) == 3, found
    assert (
        found[0]
        == "low.py:2 imports rlpolicy.policy.policy (function-level): utils (1) -> policy (6) runs up"
    )
    # The up-arrow closes a circle with the down-arrow; a TYPE_CHECKING import counts too.
    assert sorted(f.split("   [")[0] for f in found[1:]) == [
        "circle evaluation -> execution -> evaluation",
        "circle policy -> utils -> policy",
    ], found


@pytest.mark.meta
def test_architecture_doc_shows_the_rank_table():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*`([^`]+)`\s*\|", text, re.M)
    shown = {place.rstrip("/"): int(rank) for rank, place in rows}
    assert shown == RANKS, (
        f"docs/architecture.md's rank table differs: only in the doc {sorted(set(shown.items()) - set(RANKS.items()))}, "
        f"only in the test {sorted(set(RANKS.items()) - set(shown.items()))}"
    )


# Framework code in the floor: names through which a file calls torch or TF.
_FRAMEWORK_NAMES = {"tf", "tf1", "tfp", "torch", "nn", "F", "tensorflow"}
_FRAMEWORK_IMPORTERS = {"try_import_tf", "try_import_torch", "try_import_tfp"}
# _core file -> why it may touch a framework's API (each entry is checked to still need it).
CORE_FRAMEWORK_ALLOWED: Dict[str, str] = {
    "rlpolicy/_core/batch_ops.py": "SampleBatch's columns may hold either framework's tensors: "
    "telling them apart, concatenating and converting them is batch logic, not one framework's",
    "rlpolicy/_core/framework_check.py": "says whether the framework a config asks for is installed",
}


def core_framework_uses(path: Path) -> List[str]:
    """Where a file calls a framework (``tf.x``, ``torch.x``, ``try_import_tf()``, ...)."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in _FRAMEWORK_NAMES
        ):
            uses.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FRAMEWORK_IMPORTERS
        ):
            uses.append(f"{node.lineno}: {node.func.id}()")
    return uses


def test_core_holds_no_framework_code():
    """The floor is framework-neutral: framework code lives beside the class it serves
    (``policy/_torch``, ``policy/_tf``, ``policy/_eager``, ``utils/exploration/_ops.py``)."""
    violations = []
    for path in sorted((PACKAGE / "_core").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        uses = core_framework_uses(path)
        if uses and rel not in CORE_FRAMEWORK_ALLOWED:
            violations.append(f"{rel}: " + ", ".join(uses[:5]))
        if not uses and rel in CORE_FRAMEWORK_ALLOWED:
            violations.append(f"{rel}: in CORE_FRAMEWORK_ALLOWED but uses no framework; drop the entry")
    assert not violations, "framework code in rlpolicy/_core/:\n  " + "\n  ".join(violations)


def test_core_framework_finder(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "import numpy as np\ndef g(x):\n    tf1, tf, _ = try_import_tf()\n    return tf.identity(np.ones(x))\n"
    )
    assert core_framework_uses(f) == ["3: try_import_tf()", "4: tf.identity"]
    f.write_text("def g(tf_like):\n    return tf_like.identity  # tf.identity in a comment\n")
    assert core_framework_uses(f) == []


# ---------------------------------------------------------------------- rule 2


def import_graph() -> Dict[str, Set[str]]:
    """Module -> the modules it imports at run time (not under TYPE_CHECKING)."""
    return {m: {i.target for i in imps if not i.type_checking} for m, imps in IMPORTS.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan), each
    given as one concrete cycle through its first module."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    comps: List[List[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        # Iterative Tarjan: deep import chains must not hit the recursion limit.
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return [_one_cycle(graph, set(c), c[0]) for c in sorted(comps)]


def _one_cycle(graph: Dict[str, Set[str]], comp: Set[str], start: str) -> List[str]:
    """A shortest path start -> ... -> start inside ``comp`` (breadth first)."""
    prev: Dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w not in comp:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                if w not in seen:
                    seen.add(w)
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)


def _edge_lines(a: str, b: str) -> str:
    lines = sorted({i.line for i in IMPORTS[a] if i.target == b and not i.type_checking})
    return f"{_rel(a)}:{','.join(map(str, lines))}"


def cycle_violations() -> List[str]:
    graph = import_graph()
    out = []
    for cyc in cycles(graph):
        steps = " -> ".join(cyc)
        where = "; ".join(_edge_lines(a, b) for a, b in zip(cyc, cyc[1:]))
        out.append(f"{steps}   [{where}]")
    return out


def test_no_import_cycles():
    violations = cycle_violations()
    assert not violations, (
        "import cycles (function-level imports included; one cycle per "
        "strongly connected group):\n  " + "\n  ".join(violations)
    )


# ---------------------------------------------------------------------- rule 3


def _private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def _owner_ok(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _private_sets(tree: ast.AST) -> Iterator[Tuple[int, str]]:
    for node in ast.walk(tree):
        targets: List[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
        ):
            obj, name = node.args[0], node.args[1]
            if (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and _private(name.value)
                and not _owner_ok(obj)
            ):
                yield node.lineno, f"{node.func.id}({ast.unparse(obj)}, {name.value!r})"
            continue
        flat: List[ast.expr] = []
        for t in targets:
            flat.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
        for t in flat:
            if isinstance(t, ast.Attribute) and _private(t.attr) and not _owner_ok(t.value):
                yield t.lineno, ast.unparse(t)
            elif (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Attribute)
                and t.value.attr == "__dict__"
                and not _owner_ok(t.value.value)
            ):
                key = t.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and _private(key.value):
                    yield t.lineno, ast.unparse(t)


def private_set_violations() -> List[str]:
    out = []
    for module, path in MODULES.items():
        rel = _rel(module)
        for line, target in _private_sets(ast.parse(path.read_text(encoding="utf-8"))):
            if (rel, target) not in PRIVATE_SET_ALLOWED:
                out.append(f"{rel}:{line} sets {target}")
    return out


def test_no_private_attributes_set_from_outside():
    violations = private_set_violations()
    assert not violations, (
        "private attributes set on an object other than self/cls (make it "
        "the class's own method, or pass data):\n  " + "\n  ".join(violations)
    )


def test_allow_list_entries_still_exist():
    # An allow-list entry for code that is gone would hide the next real violation.
    present = {
        (_rel(m), t)
        for m, p in MODULES.items()
        for _, t in _private_sets(ast.parse(p.read_text(encoding="utf-8")))
    }
    stale = [f"{f}: {t}" for f, t in PRIVATE_SET_ALLOWED if (f, t) not in present]
    assert not stale, "stale PRIVATE_SET_ALLOWED entries:\n  " + "\n  ".join(stale)


# ---------------------------------------------------------------------- rule 5

# Privates of torch's nn.Module and of Keras layers that share a name with an attribute of
# one of rlpolicy's classes: a read of them is a framework internal (part 1's fast paths).
FRAMEWORK_PRIVATES = frozenset({"_modules", "_parameters", "_buffers", "_model"})

# (file relative to the repository root, attribute) -> why it may read it on another object.
PRIVATE_READ_ALLOWED: Dict[Tuple[str, str], str] = {
    **{
        ("rlpolicy/evaluation/sampler.py", attr): "RLlib 1.11's sampler drives its Episode through "
        "these underscore setters (the same package-internal API as RLlib's)"
        for attr in (
            "_agent_index",
            "_set_last_observation",
            "_set_last_raw_obs",
            "_set_last_info",
            "_set_last_done",
            "_set_last_action",
            "_set_rnn_state",
            "_set_last_extra_action_outs",
            "_add_agent_rewards",
            "_record_action",
            "_record_step",
        )
    },
    ("rlpolicy/evaluation/postprocessing.py", "_value"): "RLlib 1.11's compute_gae_for_sample_batch "
    "calls the ValueNetworkMixin's policy._value (user policies define it under that name)",
    ("rlpolicy/evaluation/rollout_worker.py", "_model_init_state_automatically_added"): "RLlib 1.11's "
    "Policy flag for a plain Policy subclass's RNN view requirements, read by the worker",
    ("rlpolicy/evaluation/rollout_worker.py", "_update_model_view_requirements_from_init_state"): "RLlib "
    "1.11's Policy method, called by the worker for a plain Policy subclass",
    ("rlpolicy/policy/_tf/tower_stack.py", "_get_loss_inputs_dict"): "RLlib 1.11's TFMultiGPUTowerStack "
    "feeds a TFPolicy through these methods (user TFPolicy subclasses override them)",
    ("rlpolicy/policy/_tf/tower_stack.py", "_get_grad_and_stats_fetches"): "as _get_loss_inputs_dict",
    **{
        ("rlpolicy/policy/_tf/tower_stack.py", attr): "RLlib 1.11's TFMultiGPUTowerStack reads a TFPolicy's "
        "optimizers, loss inputs and each tower copy's gradients under these names"
        for attr in ("_optimizers", "_tower_inputs", "_grads_and_vars")
    },
    ("rlpolicy/evaluation/sampler.py", "_trusted"): "SampleBatch's trusted constructor: the sampler's "
    "acting input dict and one-piece outputs are columns it stacked itself (row counts known)",
    ("rlpolicy/evaluation/sampler.py", "_derive_dones"): "the dones column of such a trusted input dict "
    "(what SampleBatch's own constructor derives)",
    ("rlpolicy/evaluation/sampler.py", "_slice_map"): "a one-piece sample() output is reused without a "
    "copy only when it has no cached sequence slicing",
    ("rlpolicy/policy/_framework_policy.py", "_trusted"): "SampleBatch's trusted constructor for "
    "columns already checked (the acting batch), used inside the policy layer",
    ("rlpolicy/policy/eager_tf_policy.py", "_trusted"): "as in _framework_policy.py (the train batch)",
    ("rlpolicy/policy/_eager/tracing.py", "_raw"): "SampleBatch's columns without its get-interceptor, "
    "read inside the policy layer to feed a tf.function",
    ("rlpolicy/cli/export_check.py", "_dist_inputs"): "RLlib 1.11's TFPolicy keeps its distribution "
    "inputs only as _dist_inputs; the export check names that graph output",
    ("rlpolicy/agents/ppo/ppo_tf_policy.py", "_is_tower"): "a graph policy's tower copy leaves gradient "
    "clipping to its tower stack; the flag has no public name in RLlib 1.11",
    ("rlpolicy/models/modelv2.py", "_obs_space"): "RLlib 1.11's Preprocessor keeps its input space only "
    "as _obs_space (same layer)",
    ("rlpolicy/models/torch/dist_helpers.py", "_make_dist"): "a descriptor reading the hook of the "
    "class it is installed on (the descriptor protocol)",
    ("rlpolicy/policy/_tf/pipeline_export.py", "_to_action_space"): "the graph export rebuilds an "
    "action distribution's squashing from its own fields",
    ("rlpolicy/policy/_tf/pipeline_export.py", "_squash"): "as _to_action_space",
    ("rlpolicy/policy/policy_template.py", "_after_loss_init"): "the factory's hook record "
    "(_core/hooks.py) keeps the internal after-loss-init step under a private field",
}


def _private_defs(tree: ast.AST) -> Set[str]:
    """The private attributes a file's classes define: methods and class attributes,
    and ``self._x = ...`` / ``cls._x = ...`` assignments."""
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _owner_ok(node.value):
            names.add(node.attr)
    return {n for n in names if _private(n)}


def _self_like(node: ast.expr) -> bool:
    """``self`` / ``cls``, ``super()`` and ``type(self)``."""
    return _owner_ok(node) or (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and (
            node.func.id == "super"
            or (node.func.id == "type" and len(node.args) == 1 and _owner_ok(node.args[0]))
        )
    )


def _private_reads(tree: ast.AST) -> Iterator[Tuple[int, str, str]]:
    """(line, read as written, attribute) for ``x._a`` and ``getattr/hasattr(x, "_a")``
    where ``x`` is not self-like."""
    # ``Base._method(self, ...)``: a class calling its base's method on itself.
    on_self = {
        id(node.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and node.args and _owner_ok(node.args[0])
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _private(node.attr):
            if not _self_like(node.value) and id(node) not in on_self:
                yield node.lineno, ast.unparse(node), node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and not _self_like(node.args[0])
        ):
            yield (
                node.lineno,
                f"{node.func.id}({ast.unparse(node.args[0])}, {node.args[1].value!r})",
                node.args[1].value,
            )


TREES = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in MODULES.items()}
DEFINED_IN = {m: _private_defs(t) for m, t in TREES.items()}


def private_read_violations() -> List[str]:
    defined_anywhere = set().union(*DEFINED_IN.values()) - FRAMEWORK_PRIVATES
    out = []
    for module, tree in TREES.items():
        rel = _rel(module)
        for line, text, attr in _private_reads(tree):
            if attr not in defined_anywhere or attr in DEFINED_IN[module]:
                continue  # a framework's private (part 1's business), or this file's own
            if (rel, attr) not in PRIVATE_READ_ALLOWED:
                owners = sorted(_rel(m) for m, names in DEFINED_IN.items() if attr in names)
                out.append(f"{rel}:{line} reads {text} (defined in {', '.join(owners)})")
    return out


def test_no_private_attributes_read_from_outside():
    violations = private_read_violations()
    assert not violations, (
        "private attributes of rlpolicy's classes read on an object other than self/cls "
        "outside the file that defines them (give the owner a method or a public "
        "attribute, or pass the data in):\n  " + "\n  ".join(violations)
    )


def test_private_read_allow_list_entries_still_exist():
    present = {(_rel(m), attr) for m, t in TREES.items() for _, _, attr in _private_reads(t)}
    stale = [f"{f}: {t}" for f, t in PRIVATE_READ_ALLOWED if (f, t) not in present]
    assert not stale, "stale PRIVATE_READ_ALLOWED entries:\n  " + "\n  ".join(stale)


def test_private_read_finder():
    src = (
        "class A:\n"
        "    _k = 1\n"
        "    def f(self, other, cls):\n"
        "        self._own = other._theirs\n"
        "        return super()._m, type(self)._k, cls._c, getattr(other, '_g'), other.__len__, x._replace\n"
        "    def g(self, other):\n"
        "        return Base._h(self, 1), Base._i(other)\n"
    )
    tree = ast.parse(src)
    assert sorted(r[1] for r in _private_reads(tree)) == [
        "Base._i",
        "getattr(other, '_g')",
        "other._theirs",
        "x._replace",
    ]
    assert _private_defs(tree) == {"_k", "_own"}


# ---------------------------------------------------------------------- rule 6

# (file relative to the repository root, module-level name) -> why it may stay a side table.
SIDE_TABLES_ALLOWED: Dict[Tuple[str, str], str] = {}


def side_tables(tree: ast.Module) -> List[Tuple[int, str]]:
    """Module-level names bound to a weakly keyed (or valued) dictionary: per-object
    state kept beside the object instead of on it."""
    found = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        value = getattr(node, "value", None)
        if value is None or not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        if any(
            isinstance(call, ast.Call)
            and (getattr(call.func, "attr", None) or getattr(call.func, "id", None))
            in ("WeakKeyDictionary", "WeakValueDictionary")
            for call in ast.walk(value)
        ):
            found += [(node.lineno, t.id) for t in targets if isinstance(t, ast.Name)]
    return found


def test_no_module_global_side_tables():
    found = {(_rel(m), name): line for m, t in TREES.items() for line, name in side_tables(t)}
    violations = [
        f"{f}:{line} {name}" for (f, name), line in found.items() if (f, name) not in SIDE_TABLES_ALLOWED
    ]
    stale = [f"{f}: {n}" for f, n in SIDE_TABLES_ALLOWED if (f, n) not in found]
    assert not violations and not stale, (
        "module-global tables keyed by objects (keep the state on its owner: an attribute "
        f"built in its __init__, passed to the helpers): {violations}; stale allow-list entries: {stale}"
    )


def test_side_table_finder():
    tree = ast.parse(
        "import weakref\n"
        "_A = weakref.WeakKeyDictionary()\n"
        "_B: 'x' = (WeakValueDictionary())\n"
        "_C = {}\n"
        "def f():\n"
        "    d = weakref.WeakKeyDictionary()\n"
    )
    assert side_tables(tree) == [(2, "_A"), (3, "_B")]


# ---------------------------------------------------------------------- the checker itself


def _parse_imports(tmp_path: Path, source: str, name: str = "rlpolicy/_core/x.py") -> List[str]:
    """Runs the import collection on a snippet placed at ``name`` (temporarily registered)."""
    path = tmp_path / "x.py"
    path.write_text(source, encoding="utf-8")
    module = name[:-3].replace("/", ".")
    MODULES[module] = path
    try:
        return sorted((i.target, i.kind, i.type_checking) for i in imports_of(module))  # type: ignore[misc]
    finally:
        del MODULES[module]


def test_import_collection_sees_lazy_string_and_type_checking_imports(tmp_path):
    src = (
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "from rlpolicy.utils import force_list\n"
        "if TYPE_CHECKING:\n"
        "    from rlpolicy.policy.policy import Policy\n"
        "def f():\n"
        "    from rlpolicy.policy.sample_batch import SampleBatch\n"
        "    return importlib.import_module('rlpolicy.agents.dqn.dqn')\n"
        "from . import batch_ops\n"
        "from ..models import catalog\n"
    )
    got = _parse_imports(tmp_path, src)
    assert got == sorted(
        [
            ("rlpolicy.utils", "module", False),
            ("rlpolicy.policy.policy", "module", True),
            ("rlpolicy.policy.sample_batch", "function", False),
            ("rlpolicy.agents.dqn.dqn", "string", False),
            ("rlpolicy._core.batch_ops", "module", False),
            ("rlpolicy.models.catalog", "module", False),
        ]
    )


def test_cycle_finder_reports_a_concrete_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_private_set_finder():
    src = (
        "def f(policy, self):\n"
        "    policy._x = 1\n"
        "    self._y = 2\n"
        "    policy.model._z += 1\n"
        "    policy.__dict__['_w'] = 3\n"
        "    setattr(policy, '_v', 4)\n"
        "    policy.public = 5\n"
        "    fn.__doc__ = 'dunder is fine'\n"
        "    a._p, self._q = 1, 2\n"
    )
    assert sorted(_private_sets(ast.parse(src))) == [
        (2, "policy._x"),
        (4, "policy.model._z"),
        (5, "policy.__dict__['_w']"),
        (6, "setattr(policy, '_v')"),
        (9, "a._p"),
    ]
