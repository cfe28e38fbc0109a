"""Caches live on the object they belong to (issue 27 part 3), not in module-global tables.

Each holder is checked for what it keeps, that two owners do not share it, and
that a copy or a pickle of its owner works (holders of framework objects start empty).
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

from rlpolicy.policy._obs_prep import ObsFlattener, flatten_single_obs

NESTED = Dict({"x": Tuple((Discrete(2), Box(0.0, 1.0, (3,)))), "y": MultiDiscrete([3, 3])})


def raw_batch():
    return {
        "x": (np.array([1, 0]), np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], np.float32)),
        "y": np.array([[2, 0], [1, 1]]),
    }


def expected_flat():
    # Dict keys sorted ("x", "y"); Discrete(2) one-hot, Box as is, MultiDiscrete one-hot per entry.
    return np.array(
        [
            [0, 1, 0.1, 0.2, 0.3, 0, 0, 1, 1, 0, 0],
            [1, 0, 0.4, 0.5, 0.6, 0, 1, 0, 0, 1, 0],
        ],
        np.float32,
    )


def torch_policy(space, **config):
    pytest.importorskip("torch")
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

    return PGTorchPolicy(space, Discrete(2), {"num_workers": 0, **config})


def test_policy_owns_its_flattener_and_copies_keep_working():
    policy = torch_policy(NESTED)
    flattener = policy.obs_flattener
    assert isinstance(flattener, ObsFlattener) and flattener.raw_space is NESTED
    np.testing.assert_allclose(flattener.batch(raw_batch()), expected_flat(), atol=1e-6)
    actions, _, _ = policy.compute_actions(raw_batch(), explore=False)
    assert actions.shape == (2,)
    for clone in (copy.deepcopy(flattener), pickle.loads(pickle.dumps(flattener))):
        np.testing.assert_allclose(clone.batch(raw_batch()), expected_flat(), atol=1e-6)
    # A second policy on a flat space has its own (empty) flattener: nothing is shared.
    flat = torch_policy(Box(-1.0, 1.0, (4,)))
    assert flat.obs_flattener.prep is None and policy.obs_flattener is flattener
    rows = np.zeros((2, 4), np.float32)
    assert flat.obs_flattener.batch(rows) is rows


def test_flatten_single_obs_of_a_duck_typed_policy_stores_nothing_on_it():
    class Duck:
        pass

    duck = Duck()
    duck.observation_space = Box(0.0, 1.0, (11,))
    duck.observation_space.original_space = NESTED
    single = {"x": (1, np.array([0.1, 0.2, 0.3], np.float32)), "y": np.array([2, 0])}
    np.testing.assert_allclose(flatten_single_obs(duck, single), expected_flat()[0], atol=1e-6)
    assert "obs_flattener" not in vars(duck)


def test_action_distribution_fn_call_is_resolved_once_per_policy_and_function():
    pytest.importorskip("torch")
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
    from rlpolicy.models.torch.torch_action_dist import TorchCategorical

    def dist_fn(policy, model, input_dict, *, state_batches=None, seq_lens=None, **kwargs):
        logits, state = model(input_dict, state_batches or [], seq_lens)
        return logits, TorchCategorical, state

    def old_style(policy, model, obs_batch, *, state_batches=None, seq_lens=None, **kwargs):
        logits, state = model({"obs": obs_batch}, state_batches or [], seq_lens)
        return logits, TorchCategorical, state

    cls = PGTorchPolicy.with_updates(action_distribution_fn=dist_fn)
    policy, other = (cls(Box(-1.0, 1.0, (4,)), Discrete(2), {"num_workers": 0}) for _ in range(2))
    obs = np.zeros((3, 4), np.float32)
    policy.compute_actions(obs)
    first = policy._resolved_dist_fn
    policy.compute_actions(obs)
    assert policy._resolved_dist_fn is first and first.fn is dist_fn and not first.old_style
    assert other._resolved_dist_fn is not first  # each policy resolves (and keeps) its own
    policy.action_distribution_fn = old_style  # a new function is read anew
    policy.compute_actions(obs)
    assert policy._resolved_dist_fn.fn is old_style and policy._resolved_dist_fn.old_style


def test_exploration_graph_loaders_copy_and_pickle_empty():
    from rlpolicy.utils.exploration._ops import GraphLoaders

    loaders = GraphLoaders()
    loaders.loaders["v:0"] = ("placeholder", "assign op")
    for clone in (copy.deepcopy(loaders), pickle.loads(pickle.dumps(loaders))):
        assert isinstance(clone, GraphLoaders) and clone.loaders == {}
    assert loaders.loaders == {"v:0": ("placeholder", "assign op")}


@pytest.mark.tf
def test_eager_apply_steps_and_model_variable_cache_copy_and_pickle_empty():
    pytest.importorskip("tensorflow")
    from rlpolicy.models.tf.tf_modelv2 import VariableCache
    from rlpolicy.policy._eager.learning import ApplySteps

    steps = ApplySteps()
    steps.steps[(1, 2)] = (None, print)
    cache = VariableCache()
    cache.entry = ([], [], {"k": 1})
    for clone in (copy.deepcopy(steps), pickle.loads(pickle.dumps(steps))):
        assert isinstance(clone, ApplySteps) and clone.steps == {}
    for clone in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert isinstance(clone, VariableCache) and clone.entry is None


@pytest.mark.tf
@pytest.mark.tf_eager_code
def test_eager_policy_keeps_its_traced_optimizer_steps():
    tf = pytest.importorskip("tensorflow")
    from rlpolicy.policy._eager.learning import ApplySteps, apply_gradients

    var = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(learning_rate=0.5)
    steps, other = ApplySteps(), ApplySteps()
    apply_gradients(opt, [(tf.constant([1.0, 1.0]), var)], steps)
    apply_gradients(opt, [(tf.constant([2.0, 0.0]), var)], steps)
    # 1 - 0.5 - 1.0, 2 - 0.5 - 0.0 (plain SGD: v -= lr * g)
    np.testing.assert_allclose(var.numpy(), [-0.5, 1.5], atol=1e-6)
    assert len(steps.steps) == 1 and other.steps == {}
