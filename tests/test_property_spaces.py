"""Property tests: PPO policies (torch, tf graph, tf2 eager) on generated
(observation space, action space) pairs.

The spaces come from ``tests/space_strategies.py`` (Box of rank 0..3 with
finite, asymmetric or -- for observations -- infinite bounds; Discrete with
any ``start``; 1-D/2-D MultiDiscrete; MultiBinary; Dict/Tuple nests of depth
<= 2). The properties (``tests/space_properties.py``) are:

1. the policy builds;
2. ``compute_actions`` (a list of raw obs and the stacked structure, B=1 and
   B=7) and ``compute_single_action`` (explore on/off) return actions nested
   like the action space, leaves ``[B, *leaf.shape]`` / ``leaf.shape``;
3. ``compute_single_action(..., clip_actions=True)`` and
   ``unsquash_actions=True`` return actions inside the space;
4. ``compute_log_likelihoods`` gives finite values of shape [B];
5. ``postprocess_trajectory`` (GAE) on acted data gives finite advantages
   and value targets; ``learn_on_batch`` returns finite learner stats.

CI runs a few derandomized examples per framework; the ``slow`` variant
(``RLPOLICY_SLOW=1``) runs 1000 per framework. ``RLPOLICY_SPACE_EXCLUDE``
(see ``space_strategies.py``) narrows the spaces drawn for a local run, and
``RLPOLICY_HYPOTHESIS_SHRINK=1`` also shrinks failing TF pairs.
"""

from __future__ import annotations

import os

import gymnasium as gym
import hypothesis
import numpy as np
import pytest
import space_properties as props
from hypothesis import HealthCheck, Phase, example, given, note, settings
from space_strategies import describe, excluded, space_pairs

# About 40 s in all on one idle core when every property holds (a TF graph policy
# costs ~1 s to build and check, a tf2 one ~0.4 s, a torch one ~0.05 s).
CI_EXAMPLES = {"torch": 100, "tf": 15, "tf2": 25}
SLOW_EXAMPLES = 1000
# Shrinking a failing pair rebuilds the policy for every step (minutes for TF):
# by default only torch shrinks; RLPOLICY_HYPOTHESIS_SHRINK=1 shrinks all.
_PHASES_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def _phases(framework: str) -> tuple:
    if framework == "torch" or os.environ.get("RLPOLICY_HYPOTHESIS_SHRINK") == "1":
        return tuple(Phase)
    return _PHASES_NO_SHRINK


def _check_pair(framework: str, obs_space: gym.Space, action_space: gym.Space) -> None:
    note(f"obs_space={describe(obs_space)}")
    note(f"action_space={describe(action_space)}")
    props.check_all(framework, obs_space, action_space)


def _pinned_pairs() -> list:
    """Pairs that once broke a property (run first, on every framework)."""
    box2 = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    return [
        # Discrete/MultiDiscrete actions with start != 0 (samples were 0-based).
        (box2, gym.spaces.Discrete(2, start=1)),
        (
            gym.spaces.Discrete(3, start=-2),
            gym.spaces.MultiDiscrete([[2, 3], [1, 2]], start=[[1, -1], [0, 2]]),
        ),
        # A rank-0 Box action came back [B, 1].
        (box2, gym.spaces.Dict({"a": gym.spaces.Box(-2.0, 4.0, (), np.float32)})),
        # Raw Dict observations in postprocess_trajectory's value bootstrap.
        (gym.spaces.Dict({"a": box2, "b": gym.spaces.MultiBinary(3)}), gym.spaces.Discrete(2)),
        # tf2: a Tuple observation whose only part is an image (restored as a list).
        (gym.spaces.Tuple([gym.spaces.Box(-1.0, 1.0, (2, 1, 3), np.float32)]), gym.spaces.Discrete(2)),
    ]


def _run(framework: str, max_examples: int) -> None:
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")

    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=_phases(framework),
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
    )
    @given(pair=space_pairs())
    def check(pair):
        _check_pair(framework, *pair)

    for pair in _pinned_pairs():  # explicit examples run before the generated ones
        check = example(pair=pair)(check)
    check()


@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_space_pair_properties(framework):
    _run(framework, CI_EXAMPLES[framework])


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_space_pair_properties_many(framework):
    _run(framework, SLOW_EXAMPLES)


def _kinds(space: gym.Space, depth: int = 0) -> set:
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return {f"{type(space).__name__}@{depth}"}.union(*(_kinds(s, depth + 1) for s in subs))
    kinds = {type(space).__name__}
    if isinstance(space, gym.spaces.Box):
        kinds.add(f"Box-rank{len(space.shape)}")
        kinds |= {"Box-inf"} if not np.all(np.isfinite(space.low) & np.isfinite(space.high)) else set()
        kinds |= {"Box-asymmetric"} if np.any(space.low != -space.high) else set()
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and np.any(space.start != 0):
        kinds.add(f"{type(space).__name__}-start")
    if isinstance(space, gym.spaces.MultiDiscrete):
        kinds.add(f"MultiDiscrete-{space.nvec.ndim}d")
    return kinds


def test_strategies_draw_every_kind_of_space():
    # Guards the generator itself: 300 derandomized pairs hold every kind (unless
    # RLPOLICY_SPACE_EXCLUDE narrows the draw); action Boxes stay finite.
    # Which pairs 300 draws hold depends on hypothesis' version (its derandomized
    # stream changes between releases), so up to 4 fixed seeds of 300 draws are
    # tried until every kind has appeared: still deterministic for one version.
    seen = {"obs": set(), "act": set()}

    def collect_with(seed_value):
        @hypothesis.seed(seed_value)
        @settings(
            max_examples=300,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(pair=space_pairs())
        def collect(pair):
            seen["obs"] |= _kinds(pair[0])
            seen["act"] |= _kinds(pair[1])

        collect()

    everything = {
        "Box-rank0",
        "Box-rank1",
        "Box-rank2",
        "Box-rank3",
        "Box-asymmetric",
        "Discrete",
        "Discrete-start",
        "MultiDiscrete-1d",
        "MultiDiscrete-2d",
        "MultiDiscrete-start",
        "MultiBinary",
        "Dict@0",
        "Tuple@0",
        "Dict@1",
        "Tuple@1",
    }
    for seed_value in range(4):
        collect_with(seed_value)
        if everything | {"Box-inf"} <= seen["obs"] and everything <= seen["act"]:
            break
    if not excluded():
        assert everything | {"Box-inf"} <= seen["obs"], sorted(everything | {"Box-inf"} - seen["obs"])
        assert everything <= seen["act"], sorted(everything - seen["act"])
    assert "Box-inf" not in seen["act"]
    assert not any(k.endswith("@2") for k in seen["obs"] | seen["act"])  # depth <= 2


# ----------------------------------------------------------------------------
# compute_single_action(clip_actions=..., unsquash_actions=...): hand-worked cases


class _FixedActionPolicy:
    """Builds a numpy Policy that always returns ``raw`` (batched to B rows)."""

    @staticmethod
    def make(action_space: gym.Space, raw):
        import tree

        from rlpolicy.policy.policy import Policy

        class Fixed(Policy):
            def compute_actions(
                self,
                obs_batch,
                state_batches=None,
                prev_action_batch=None,
                prev_reward_batch=None,
                info_batch=None,
                episodes=None,
                explore=None,
                timestep=None,
                **kwargs,
            ):
                n = len(obs_batch)
                return tree.map_structure(lambda a: np.stack([np.asarray(a)] * n), raw), [], {}

        return Fixed(gym.spaces.Box(-1.0, 1.0, (2,), np.float32), action_space, {})


OBS = np.zeros(2, np.float32)


def test_single_action_unsquash_and_clip_box_by_hand():
    space = gym.spaces.Box(-2.0, 4.0, (3,), np.float32)
    policy = _FixedActionPolicy.make(space, np.array([0.5, 7.0, -1.0], np.float32))
    # unsquash: -2 + (a + 1) * 6 / 2, then clipped into [-2, 4].
    np.testing.assert_allclose(
        policy.compute_single_action(OBS, unsquash_actions=True)[0], [2.5, 4.0, -2.0], rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(
        policy.compute_single_action(OBS, clip_actions=True)[0], [0.5, 4.0, -1.0], rtol=1e-6, atol=1e-6
    )
    # RLlib Trainer's singular spellings do the same.
    np.testing.assert_allclose(
        policy.compute_single_action(OBS, unsquash_action=True)[0], [2.5, 4.0, -2.0], rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(
        policy.compute_single_action(OBS, clip_action=True)[0], [0.5, 4.0, -1.0], rtol=1e-6, atol=1e-6
    )
    # Off by default; unsquash wins over clip (0.5 -> 2.5, not 0.5).
    np.testing.assert_allclose(policy.compute_single_action(OBS)[0], [0.5, 7.0, -1.0], atol=1e-6)
    np.testing.assert_allclose(
        policy.compute_single_action(OBS, clip_actions=True, unsquash_actions=True)[0],
        [2.5, 4.0, -2.0],
        rtol=1e-6,
        atol=1e-6,
    )


def test_single_action_unsquash_and_clip_nested_by_hand():
    space = gym.spaces.Dict(
        {
            "move": gym.spaces.Box(np.array([0.0, -10.0], np.float32), np.array([1.0, 10.0], np.float32)),
            "pick": gym.spaces.Tuple([gym.spaces.Discrete(3)]),
        }
    )
    raw = {"move": np.array([-0.5, 1.5], np.float32), "pick": (np.int64(2),)}
    policy = _FixedActionPolicy.make(space, raw)
    action = policy.compute_single_action(OBS, unsquash_actions=True)[0]
    # move[0]: 0 + 0.5 * 1 / 2 = 0.25; move[1]: -10 + 2.5 * 20 / 2 = 15 -> clipped to 10.
    np.testing.assert_allclose(action["move"], [0.25, 10.0], rtol=1e-6, atol=1e-6)
    assert isinstance(action["pick"], tuple) and int(action["pick"][0]) == 2
    clipped = policy.compute_single_action(OBS, clip_actions=True)[0]
    np.testing.assert_allclose(clipped["move"], [0.0, 1.5], rtol=1e-6, atol=1e-6)
    assert space.contains({"move": clipped["move"], "pick": (int(clipped["pick"][0]),)})


def test_single_action_conflicting_flag_spellings_are_rejected():
    policy = _FixedActionPolicy.make(gym.spaces.Box(-2.0, 4.0, (1,), np.float32), np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="clip_actions=True and clip_action=False disagree"):
        policy.compute_single_action(OBS, clip_actions=True, clip_action=False)
