"""Which rlpolicy files one ``compute_actions`` and one ``learn_on_batch`` touch.

The walk behind the "One compute_actions and one learn_on_batch" section of
``docs/architecture.md``: PPO's policy of each framework (``torch``, graph
``tf``, eager ``tf2``; Box(4) observations, Discrete(2) actions, a 32-row
batch) is built and warmed up with one call of each, then one more call runs
under ``sys.setprofile``. Every Python function call whose code lies in the
``rlpolicy`` package is recorded by file. Per framework and call it reports:

- files: the rlpolicy files whose code ran;
- policy+core: how many of them are in ``policy/`` or ``_core/``;
- edges: the distinct caller-file -> callee-file pairs that cross between
  ``policy/`` and ``_core/`` (either direction).

A framework that is not installed is skipped. ``tests/test_call_walk.py``
runs the same walk and keeps each file count below the figure of the tree
before the redesign (``BEFORE``).

    .venv/bin/python scripts/call_walk.py [torch] [tf] [tf2] [--functions]

``--functions`` also lists, per file, the functions called and how often.
"""

from __future__ import annotations

import argparse
import collections
import copy
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Counter, Dict, List, Optional, Set, Tuple

import numpy as np

FRAMEWORKS = ("torch", "tf", "tf2")
CALLS = ("compute_actions", "learn_on_batch")
ROWS = 32

# The file counts of the tree before the redesign of issue 17 (commit 3af6ddf).
BEFORE: Dict[Tuple[str, str], int] = {
    ("torch", "compute_actions"): 16,
    ("torch", "learn_on_batch"): 21,
    ("tf", "compute_actions"): 11,
    ("tf", "learn_on_batch"): 13,
    ("tf2", "compute_actions"): 22,
    ("tf2", "learn_on_batch"): 25,
}


@dataclass
class Walk:
    """The rlpolicy files one call ran code in (paths relative to the package),
    in first-call order, with the functions called in each and how often."""

    files: Dict[str, Counter[str]] = field(default_factory=dict)
    edges: Set[Tuple[str, str]] = field(default_factory=set)

    @property
    def layer_files(self) -> List[str]:
        """The files under ``policy/`` or ``_core/``."""
        return [f for f in self.files if f.startswith(("policy" + os.sep, "_core" + os.sep))]

    @property
    def crossing_edges(self) -> Set[Tuple[str, str]]:
        """Caller -> callee file pairs with one end in ``policy/`` and the other in ``_core/``."""
        tops = ("policy", "_core")
        out = set()
        for a, b in self.edges:
            ta, tb = a.split(os.sep, 1)[0], b.split(os.sep, 1)[0]
            if {ta, tb} == set(tops):
                out.add((a, b))
        return out


def installed(framework: str) -> bool:
    """Whether the package behind ``framework`` (torch, tf, tf2) can be imported."""
    return importlib.util.find_spec("torch" if framework == "torch" else "tensorflow") is not None


def walk(fn: Callable[[], Any]) -> Walk:
    """Runs ``fn()`` once under ``sys.setprofile``; records every rlpolicy function call."""
    import rlpolicy

    root = os.path.dirname(rlpolicy.__file__) + os.sep
    result = Walk()
    rel_cache: Dict[str, Optional[str]] = {}

    def rel(filename: str) -> Optional[str]:
        if filename not in rel_cache:
            rel_cache[filename] = filename[len(root) :] if filename.startswith(root) else None
        return rel_cache[filename]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        path = rel(frame.f_code.co_filename)
        if path is None:
            return
        result.files.setdefault(path, collections.Counter())[frame.f_code.co_name] += 1
        back = frame.f_back
        caller = rel(back.f_code.co_filename) if back is not None else None
        if caller is not None and caller != path:
            result.edges.add((caller, path))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
    return result


def make_policy(framework: str) -> Any:
    """PPO's policy of ``framework`` for Box(4) observations and Discrete(2) actions."""
    import gymnasium as gym

    from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG

    config = copy.deepcopy(DEFAULT_CONFIG)
    config.update(framework=framework, num_workers=0)
    obs_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    act_space = gym.spaces.Discrete(2)
    if framework == "torch":
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

        return PPOTorchPolicy(obs_space, act_space, config)
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    cls = PPOTFPolicy.as_eager() if framework == "tf2" else PPOTFPolicy
    return cls(obs_space, act_space, config)


def train_columns(rows: int = ROWS, seed: int = 0) -> Dict[str, np.ndarray]:
    """The columns of a post-processed PPO train batch of ``rows`` rows."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1.0, 1.0, (rows, 4)).astype(np.float32)
    return {
        "obs": obs,
        "new_obs": obs,
        "actions": rng.integers(0, 2, rows),
        "rewards": np.ones(rows, np.float32),
        "dones": np.zeros(rows, bool),
        "action_logp": np.zeros(rows, np.float32),
        "action_dist_inputs": np.zeros((rows, 2), np.float32),
        "vf_preds": np.zeros(rows, np.float32),
        "advantages": np.ones(rows, np.float32),
        "value_targets": np.ones(rows, np.float32),
    }


def walk_framework(framework: str) -> Dict[str, Walk]:
    """The walks of one ``compute_actions`` and one ``learn_on_batch`` (each after a
    warm-up call, so one-time work such as tracing or graph building is left out)."""
    from rlpolicy.policy.sample_batch import SampleBatch

    policy = make_policy(framework)
    columns = train_columns()
    obs = columns["obs"]
    policy.compute_actions(obs)
    acting = walk(lambda: policy.compute_actions(obs))
    policy.learn_on_batch(SampleBatch(dict(columns)))
    learning = walk(lambda: policy.learn_on_batch(SampleBatch(dict(columns))))
    return {"compute_actions": acting, "learn_on_batch": learning}


def counts_table(walks: Dict[str, Dict[str, Walk]]) -> str:
    """The counts of each walk beside the ``BEFORE`` file count, as text."""
    lines = [f"{'':24} {'files':>6} {'before':>7} {'policy+core':>12} {'edges':>6}"]
    for framework, by_call in walks.items():
        for call, w in by_call.items():
            lines.append(
                f"{framework:6} {call:17} {len(w.files):>6} {BEFORE[(framework, call)]:>7} "
                f"{len(w.layer_files):>12} {len(w.crossing_edges):>6}"
            )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("frameworks", nargs="*", choices=[[], *FRAMEWORKS], default=[])
    parser.add_argument("--functions", action="store_true", help="list the functions called per file")
    args = parser.parse_args(argv)
    walks: Dict[str, Dict[str, Walk]] = {}
    for framework in args.frameworks or FRAMEWORKS:
        if not installed(framework):
            print(f"{framework}: not installed, skipped")
            continue
        walks[framework] = walk_framework(framework)
    print(counts_table(walks))
    if args.functions:
        for framework, by_call in walks.items():
            for call, w in by_call.items():
                print(f"\n{framework} {call}: {len(w.files)} files")
                for path, functions in w.files.items():
                    listed = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in functions.items())
                    print(f"  {path}: {listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
