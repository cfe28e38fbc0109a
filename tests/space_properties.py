"""Property checks of a PPO policy on one (observation space, action space) pair.

Used by ``test_property_spaces.py`` (under hypothesis) and handy on its own to
triage a failing pair::

    from space_properties import check_all  # with tests/ on sys.path
    check_all("torch", obs_space, action_space)

Every check raises ``AssertionError`` (a property is violated) or lets the
policy's own exception through (a crash), with the property's name in front.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space

BATCH_SIZES = (1, 7)
TRAIN_ROWS = 8
CONFIG = {
    "model": {"fcnet_hiddens": [8]},
    "train_batch_size": TRAIN_ROWS,
    "sgd_minibatch_size": TRAIN_ROWS,
    "num_sgd_iter": 1,
    "seed": 0,
}


class PropertyFailure(AssertionError):
    """A property check failed (or crashed); ``prop`` names the property."""

    def __init__(self, prop: str, cause: BaseException):
        super().__init__(f"[{prop}] {type(cause).__name__}: {cause}")
        self.prop = prop
        self.cause = cause


def seed_globals(framework: str, seed: int = 0) -> None:
    """Seeds the global RNGs a policy draws from (as a rollout worker would), so
    that a pair's result does not depend on the examples run before it."""
    np.random.seed(seed)
    if framework == "torch":
        import torch

        torch.manual_seed(seed)
    elif framework == "tf2":
        from rlpolicy.utils.framework import try_import_tf

        _, tf, _ = try_import_tf()
        tf.random.set_seed(seed)


def build_policy(framework: str, obs_space: gym.Space, action_space: gym.Space) -> Any:
    """A tiny PPO policy of ``framework`` ("torch", "tf" or "tf2"); the global RNGs
    are seeded first (a tf graph policy seeds its own graph from ``config["seed"]``)."""
    seed_globals(framework)
    if framework == "torch":
        from rlpolicy.agents.ppo import PPOTorchPolicy

        return PPOTorchPolicy(obs_space, action_space, dict(CONFIG))
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    cls = PPOTFPolicy if framework == "tf" else PPOTFPolicy.as_eager()
    return cls(obs_space, action_space, {**CONFIG, "framework": framework})


def samples(space: gym.Space, n: int) -> List[Any]:
    """``n`` raw ``space.sample()``s (the space is seeded first, so runs repeat)."""
    space.seed(0)
    return [space.sample() for _ in range(n)]


def stack(obs_list: List[Any]) -> Any:
    """A list of (nested) observations as one structure of [B, ...] arrays."""
    return tree.map_structure(lambda *xs: np.stack([np.asarray(x) for x in xs]), *obs_list)


def assert_structure(value: Any, space: gym.Space, batch: Optional[int] = None, path: str = "action") -> None:
    """``value`` nests like ``space`` (Dict keys, Tuple length) and every leaf
    has shape ``[batch, *leaf.shape]`` (or ``leaf.shape`` when ``batch`` is None)."""
    if isinstance(space, gym.spaces.Dict):
        assert isinstance(value, dict), f"{path}: expected a dict for {space}, got {type(value).__name__}"
        assert sorted(value) == sorted(space.spaces), (
            f"{path}: keys {sorted(value)} != {sorted(space.spaces)}"
        )
        for key, sub in space.spaces.items():
            assert_structure(value[key], sub, batch, f"{path}[{key!r}]")
        return
    if isinstance(space, gym.spaces.Tuple):
        assert isinstance(value, tuple), f"{path}: expected a tuple for {space}, got {type(value).__name__}"
        assert len(value) == len(space.spaces), f"{path}: {len(value)} items for {len(space.spaces)} spaces"
        for i, sub in enumerate(space.spaces):
            assert_structure(value[i], sub, batch, f"{path}[{i}]")
        return
    want = tuple(space.shape) if batch is None else (batch, *space.shape)
    got = tuple(np.shape(value))
    assert got == want, f"{path}: shape {got}, expected {want} for {space}"


def as_space_dtypes(action: Any, space: gym.Space) -> Any:
    """Casts every leaf of ``action`` to its leaf space's dtype (Tuple leaves as a tuple)."""
    struct = get_base_struct_from_space(space)
    return tree.map_structure_up_to(struct, lambda s, a: np.asarray(a).astype(s.dtype), struct, action)


def _prop(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except PropertyFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - report any crash under the property's name
        raise PropertyFailure(name, exc) from exc


def check_compute_actions(policy: Any, obs_space: gym.Space, action_space: gym.Space) -> Dict[str, Any]:
    """Property 2 (batched): a list of raw obs and the stacked structure, B=1 and B=7,
    explore on and off; actions nest like the action space with [B, ...] leaves."""
    out = {}
    for b in BATCH_SIZES:
        obs_list = samples(obs_space, b)
        for form, obs_batch in (("list", obs_list), ("stacked", stack(obs_list))):
            for explore in (True, False):
                actions, state, extra = policy.compute_actions(obs_batch, explore=explore)
                assert state == [], f"{form} B={b}: non-recurrent model returned state {state}"
                assert_structure(actions, action_space, b, f"compute_actions({form}, B={b}) action")
                out[(b, form, explore)] = (actions, extra)
    return out


def check_single_action(policy: Any, obs_space: gym.Space, action_space: gym.Space) -> None:
    """Property 2 (single): a raw obs, explore on and off; action shaped like one space element."""
    obs = samples(obs_space, 1)[0]
    for explore in (True, False):
        action, state, extra = policy.compute_single_action(obs, explore=explore)
        assert state == [], f"state {state}"
        assert_structure(action, action_space, None, f"compute_single_action(explore={explore})")


def check_in_space(policy: Any, obs_space: gym.Space, action_space: gym.Space) -> None:
    """Property 3: with clip_actions / unsquash_actions the single action lies in the space."""
    obs = samples(obs_space, 1)[0]
    for kw in ("clip_actions", "unsquash_actions"):
        for explore in (True, False):
            action, _, _ = policy.compute_single_action(obs, explore=explore, **{kw: True})
            cast = as_space_dtypes(action, action_space)
            assert action_space.contains(cast), (
                f"{kw}=True, explore={explore}: {cast!r} not in {action_space}"
            )


def check_log_likelihoods(policy: Any, obs_space: gym.Space, acted: Dict[str, Any]) -> None:
    """Property 4: finite log-likelihoods of shape [B] for the policy's own actions."""
    for b in BATCH_SIZES:
        actions, _ = acted[(b, "stacked", True)]
        logp = np.asarray(
            policy.compute_log_likelihoods(actions=actions, obs_batch=stack(samples(obs_space, b)))
        )
        assert logp.shape == (b,), f"B={b}: logp shape {logp.shape}"
        assert np.all(np.isfinite(logp)), f"B={b}: logp {logp}"


def train_batch(policy: Any, obs_space: gym.Space) -> SampleBatch:
    """TRAIN_ROWS rows of acted data with the columns PPO's loss reads."""
    obs = stack(samples(obs_space, TRAIN_ROWS))
    actions, _, extra = policy.compute_actions(obs, explore=True)
    rng = np.random.default_rng(0)
    n = TRAIN_ROWS
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: rng.normal(size=n).astype(np.float32),
            SampleBatch.DONES: np.zeros(n, bool),
            "advantages": rng.normal(size=n).astype(np.float32),
            "value_targets": rng.normal(size=n).astype(np.float32),
            **extra,
        }
    )


def check_postprocess(policy: Any, obs_space: gym.Space) -> None:
    """Property 5a: GAE postprocessing of one unfinished episode gives finite
    advantages/value targets of shape [T] (it bootstraps from V(next_obs))."""
    raw = samples(obs_space, TRAIN_ROWS + 1)
    obs, next_obs = stack(raw[:-1]), stack(raw[1:])
    actions, _, extra = policy.compute_actions(obs, explore=True)
    n = TRAIN_ROWS
    batch = SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.NEXT_OBS: next_obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: np.linspace(-1.0, 1.0, n).astype(np.float32),
            SampleBatch.DONES: np.zeros(n, bool),
            SampleBatch.EPS_ID: np.zeros(n, np.int64),
            SampleBatch.AGENT_INDEX: np.zeros(n, np.int64),
            SampleBatch.T: np.arange(n),
            **extra,
        }
    )
    out = policy.postprocess_trajectory(batch)
    for col in ("advantages", "value_targets"):
        values = np.asarray(out[col])
        assert values.shape == (n,), f"{col} shape {values.shape}"
        assert np.all(np.isfinite(values)), f"{col} {values}"


def check_learn(policy: Any, obs_space: gym.Space) -> None:
    """Property 5: one learn_on_batch step returns finite learner stats."""
    result = policy.learn_on_batch(train_batch(policy, obs_space))
    stats = result[LEARNER_STATS_KEY]
    assert stats, f"no learner stats in {result}"
    for value in tree.flatten(stats):
        assert np.all(np.isfinite(np.asarray(value, np.float64))), f"non-finite stats {stats}"


def check_all(framework: str, obs_space: gym.Space, action_space: gym.Space) -> None:
    """Builds the policy (property 1) and checks properties 2-5 on it."""
    policy = _prop("1-construct", build_policy, framework, obs_space, action_space)
    try:
        acted = _prop("2-compute_actions", check_compute_actions, policy, obs_space, action_space)
        _prop("2-compute_single_action", check_single_action, policy, obs_space, action_space)
        _prop("3-in_space", check_in_space, policy, obs_space, action_space)
        _prop("4-log_likelihoods", check_log_likelihoods, policy, obs_space, acted)
        _prop("5-postprocess_trajectory", check_postprocess, policy, obs_space)
        _prop("5-learn_on_batch", check_learn, policy, obs_space)
    finally:
        if framework == "tf":  # a graph policy holds its own session: free it
            policy.get_session().close()
