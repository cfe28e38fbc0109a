"""Action spaces beyond RLlib 1.11: multi-dimensional Box, MultiBinary and a
MultiDiscrete with a 2-D ``nvec`` (alone and as leaves of a Dict/Tuple).

Each gets a default distribution over the flattened action; actions come
back in the space's shape and dtype, and log-likelihoods accept actions
shaped like the space. Checked for PPO (torch, tf graph, tf2 eager) and PG
against numpy formulas computed from the model's distribution inputs
(Gaussian log-density summed over all action dims, per-bit / per-slot
log-softmax), never from the distribution code under test.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tree

from rlpolicy.models.catalog import ModelCatalog, UnsupportedSpaceException
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.spaces.space_utils import clip_action, unsquash_action

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (3, 2), np.float32)
BITS = gym.spaces.MultiBinary((2, 3))
MD2 = gym.spaces.MultiDiscrete(np.array([[2, 3], [4, 2]]))
NESTED = gym.spaces.Dict(
    {
        "box": gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32),
        "bits": gym.spaces.MultiBinary(3),
        "md": gym.spaces.MultiDiscrete(np.array([[2, 3], [3, 2]])),
        "d": gym.spaces.Discrete(3),
    }
)
SPACES = {"box": BOX, "bits": BITS, "md2": MD2, "nested": NESTED}
CONFIG = {"model": {"fcnet_hiddens": [8]}, "seed": 0, "lr": 1e-2}
LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


# ----------------------------------------------------------------- numpy references
def _leaves(space: gym.Space):
    """(space, path) leaves in dm-tree order (sorted Dict keys), by hand."""
    if isinstance(space, gym.spaces.Dict):
        return [(s, (k,) + p) for k in sorted(space.spaces) for s, p in _leaves(space[k])]
    if isinstance(space, gym.spaces.Tuple):
        return [(s, (i,) + p) for i, sub in enumerate(space.spaces) for s, p in _leaves(sub)]
    return [(space, ())]


def _get(struct, path):
    for key in path:
        struct = struct[key]
    return struct


def _input_size(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Box):
        return 2 * int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiBinary):
        return 2 * int(np.prod(space.shape))
    return int(np.sum(space.nvec))


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _slots(space: gym.Space, inputs):
    """Per-slot log-probabilities [(B, n_i)] of a categorical leaf, row-major slot order."""
    if isinstance(space, gym.spaces.Discrete):
        return [_log_softmax(inputs)]
    lens = (
        [2] * int(np.prod(space.shape))
        if isinstance(space, gym.spaces.MultiBinary)
        else list(np.ravel(space.nvec))
    )
    return [_log_softmax(part) for part in np.split(inputs, np.cumsum(lens)[:-1], axis=1)]


def ref_logp_leaf(space: gym.Space, inputs, actions):
    """Log-likelihood [B] of one leaf's actions [B, *shape] under its flat inputs."""
    inputs = np.asarray(inputs, np.float64)
    b = len(inputs)
    if isinstance(space, gym.spaces.Box):
        d = int(np.prod(space.shape))
        mean, log_std = inputs[:, :d], inputs[:, d:]
        z = (np.asarray(actions, np.float64).reshape(b, d) - mean) / np.exp(log_std)
        return (-0.5 * z * z - log_std - LOG_SQRT_2PI).sum(1)
    acts = np.asarray(actions).reshape(b, -1).astype(np.int64)
    return sum(lp[np.arange(b), acts[:, i]] for i, lp in enumerate(_slots(space, inputs)))


def ref_deterministic_leaf(space: gym.Space, inputs):
    """The explore=False action of one leaf: reshaped mean / per-slot argmax."""
    b = len(inputs)
    if isinstance(space, gym.spaces.Box):
        return inputs[:, : int(np.prod(space.shape))].reshape((b,) + space.shape)
    picks = np.stack([lp.argmax(1) for lp in _slots(space, np.asarray(inputs, np.float64))], 1)
    return picks[:, 0] if isinstance(space, gym.spaces.Discrete) else picks.reshape((b,) + space.shape)


def split_inputs(space: gym.Space, inputs):
    """[(leaf space, path, leaf inputs)] in flattening order."""
    leaves = _leaves(space)
    cuts = np.cumsum([_input_size(s) for s, _ in leaves])[:-1]
    return [(s, p, x) for (s, p), x in zip(leaves, np.split(inputs, cuts, axis=1))]


def ref_logp(space: gym.Space, inputs, actions):
    return sum(ref_logp_leaf(s, x, _get(actions, p)) for s, p, x in split_inputs(space, inputs))


def flat_train_actions(space: gym.Space, actions):
    """The train-batch action column: leaves of a Dict/Tuple concatenated as floats."""
    if not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return actions
    b = len(tree.flatten(actions)[0])
    return np.concatenate(
        [np.reshape(_get(actions, p), (b, -1)).astype(np.float32) for _, p in _leaves(space)], axis=1
    )


def sample_actions(space: gym.Space, n: int, seed: int = 0):
    """n actions from ``space`` stacked into a batch shaped like the space."""
    space.seed(seed)
    rows = [space.sample() for _ in range(n)]
    return tree.map_structure(lambda *xs: np.stack(xs), *rows)


def to_numpy(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def check_batch_actions(space: gym.Space, actions, batch: int) -> None:
    for leaf, path in _leaves(space):
        a = np.asarray(_get(actions, path))
        assert a.shape == (batch,) + leaf.shape, (path, a.shape)
        assert a.dtype == leaf.dtype, (path, a.dtype, leaf.dtype)


def rows_in_space(space: gym.Space, actions, batch: int):
    """Whether each row (unsquashed / clipped where the leaf is a Box) is inside ``space``."""
    rows = [tree.map_structure(lambda a, i=i: np.asarray(a)[i], actions) for i in range(batch)]
    return [space.contains(unsquash_action(r, space)) and space.contains(clip_action(r, space)) for r in rows]


# ------------------------------------------------------------------------ policies
def _policy_class(algo: str, framework: str):
    if algo == "ppo":
        from rlpolicy.agents.ppo import PPOTFPolicy, PPOTorchPolicy

        torch_cls, tf_cls = PPOTorchPolicy, PPOTFPolicy
    else:
        from rlpolicy.agents.pg import PGTFPolicy, PGTorchPolicy

        torch_cls, tf_cls = PGTorchPolicy, PGTFPolicy
    if framework == "torch":
        return torch_cls
    return tf_cls if framework == "tf" else tf_cls.as_eager()


@pytest.fixture(scope="module")
def policies():
    """A cache of built policies, keyed (algo, framework, space name); TF graphs are slow."""
    cache = {}

    def get(algo: str, framework: str, name: str):
        key = (algo, framework, name)
        if key not in cache:
            cls = _policy_class(algo, framework)
            cache[key] = cls(OBS_SPACE, SPACES[name], dict(CONFIG, framework=framework))
        return cache[key]

    return get


@pytest.fixture(params=list(SPACES))
def space_name(request):
    return request.param


def _obs(n: int, seed: int = 1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 4)).astype(np.float32)


def _weights(policy):
    return [np.array(w, copy=True) for w in tree.flatten(policy.get_weights())]


# -------------------------------------------------------------------- catalog level
@pytest.mark.parametrize("fw", ["torch", "tf"])
def test_catalog_sizes_flat_distributions(fw):
    pytest.importorskip("torch" if fw == "torch" else "tensorflow")
    expected = {"box": 12, "bits": 12, "md2": 11, "nested": 8 + 6 + 10 + 3}
    for name, space in SPACES.items():
        _, n = ModelCatalog.get_action_dist(space, None, framework=fw)
        assert n == expected[name], name
    assert ModelCatalog.get_action_dist(gym.spaces.MultiBinary(4), None, framework=fw)[1] == 8
    tup = gym.spaces.Tuple([BOX, BITS])
    assert ModelCatalog.get_action_dist(tup, None, framework=fw)[1] == 24
    _, n = ModelCatalog.get_action_dist(BOX, None, dist_type="deterministic", framework=fw)
    assert n == 6


@pytest.mark.tf
def test_action_shapes_and_placeholder(tf_modules):
    torch = pytest.importorskip("torch")
    assert ModelCatalog.get_action_shape(BITS, "torch") == (torch.int8, (None, 2, 3))
    assert ModelCatalog.get_action_shape(BOX, "torch") == (torch.float32, (None, 3, 2))
    # Flattened Dict: 4 (box) + 3 (bits) + 1 (d) + 4 (md) columns.
    assert ModelCatalog.get_action_shape(NESTED, "torch") == (torch.float32, (None, 12))
    tf1, tf = tf_modules
    with tf1.Graph().as_default():
        ph = ModelCatalog.get_action_placeholder(BITS)
        assert ph.dtype == tf.int8 and ph.shape.as_list() == [None, 2, 3]
        assert ModelCatalog.get_action_placeholder(NESTED).shape.as_list() == [None, 12]


@pytest.mark.parametrize("fw", ["torch", "tf2"])
def test_deterministic_dist_type_reshapes_inputs(fw, tf_modules):
    inputs = np.random.default_rng(3).normal(size=(5, 6)).astype(np.float32)
    cls, _ = ModelCatalog.get_action_dist(BOX, None, dist_type="deterministic", framework=fw)
    if fw == "torch":
        torch = pytest.importorskip("torch")
        dist = cls(torch.from_numpy(inputs), None)
    else:
        dist = cls(tf_modules[1].constant(inputs), None)
    for out in (dist.deterministic_sample(), dist.sample()):
        np.testing.assert_allclose(to_numpy(out), inputs.reshape(5, 3, 2), rtol=0, atol=0)


def test_unsquash_and_clip_multi_dim_box_batches():
    grid = np.arange(6, dtype=np.float32).reshape(3, 2)
    space = gym.spaces.Box(grid - 3, grid + 1, dtype=np.float32)
    batch = np.random.default_rng(4).uniform(-1.5, 1.5, (5, 3, 2)).astype(np.float32)
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    expected = np.clip(low + (batch + 1.0) * (high - low) / 2.0, low, high)
    np.testing.assert_allclose(unsquash_action(batch, space), expected, rtol=1e-6, atol=1e-6)
    big = batch * 5
    np.testing.assert_allclose(
        clip_action(big, space), np.minimum(np.maximum(big, low), high), rtol=0, atol=0
    )
    assert all(space.contains(r) for r in unsquash_action(batch, space))


def test_flatten_action_batch_layout_by_hand():
    from rlpolicy.utils.spaces.space_utils import flatten_action_batch

    actions = {
        "b": np.arange(8).reshape(2, 2, 2),
        "a": np.array([5, 6]),
        "c": (np.array([[1, 0, 1], [0, 1, 1]], np.int8),),
    }
    expected = [[5, 0, 1, 2, 3, 1, 0, 1], [6, 4, 5, 6, 7, 0, 1, 1]]  # sorted keys, row-major
    out = flatten_action_batch(actions, np.float32)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("space", [BOX, BITS, NESTED], ids=["box", "bits", "nested"])
def test_dqn_keeps_rejecting_non_discrete_actions(space, framework):
    from rlpolicy.agents.dqn import DQNTFPolicy, DQNTorchPolicy

    cls = DQNTorchPolicy if framework == "torch" else DQNTFPolicy
    if framework == "tf2":
        cls = cls.as_eager()
    with pytest.raises(UnsupportedSpaceException, match=r"is not supported for DQN; supported: Discrete"):
        cls(OBS_SPACE, space, {"framework": framework})


# --------------------------------------------------------------------- PPO policies
@pytest.mark.parametrize("batch", [1, 7])
def test_compute_actions_shape_dtype_and_bounds(policies, framework, space_name, batch):
    policy, space = policies("ppo", framework, space_name), SPACES[space_name]
    obs = _obs(batch)
    for explore in (True, False):
        actions, _, _ = policy.compute_actions(obs, explore=explore)
        check_batch_actions(space, actions, batch)
        assert all(rows_in_space(space, actions, batch)), (explore, actions)
    single = policy.compute_single_action(obs[0], explore=False)[0]
    for leaf, path in _leaves(space):
        assert np.shape(_get(single, path)) == leaf.shape, path


def test_deterministic_actions_and_log_likelihoods_match_numpy(policies, framework, space_name):
    policy, space = policies("ppo", framework, space_name), SPACES[space_name]
    obs = _obs(7, seed=2)
    actions, _, info = policy.compute_actions(obs, explore=False)
    inputs = np.asarray(info[SampleBatch.ACTION_DIST_INPUTS], np.float64)
    for leaf, path, x in split_inputs(space, inputs):
        np.testing.assert_allclose(
            np.asarray(_get(actions, path), np.float64), ref_deterministic_leaf(leaf, x), rtol=1e-5, atol=1e-6
        )
    given = sample_actions(space, 7)
    logp = to_numpy(policy.compute_log_likelihoods(given, obs))
    assert logp.shape == (7,)
    np.testing.assert_allclose(logp, ref_logp(space, inputs, given), rtol=1e-5, atol=1e-4)


def test_box_log_likelihood_normalizes_actions_when_asked(policies, framework):
    policy = policies("ppo", framework, "box")
    obs = _obs(5, seed=5)
    inputs = np.asarray(policy.compute_actions(obs, explore=False)[2][SampleBatch.ACTION_DIST_INPUTS])
    given = sample_actions(BOX, 5, seed=6)
    normalized = (given.astype(np.float64) - BOX.low) * 2.0 / (BOX.high - BOX.low) - 1.0
    logp = to_numpy(policy.compute_log_likelihoods(given, obs, actions_normalized=False))
    np.testing.assert_allclose(logp, ref_logp_leaf(BOX, inputs, normalized), rtol=1e-5, atol=1e-4)


def _train_batch(policy, space: gym.Space, n: int = 8, seed: int = 7, flatten: bool = True) -> SampleBatch:
    """Acted data plus the columns PPO/PG read (Dict/Tuple actions flattened unless told)."""
    obs = _obs(n, seed)
    actions, _, info = policy.compute_actions(obs, explore=True)
    r = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: flat_train_actions(space, actions) if flatten else actions,
            SampleBatch.ACTION_DIST_INPUTS: np.asarray(info[SampleBatch.ACTION_DIST_INPUTS]),
            SampleBatch.ACTION_LOGP: np.asarray(info[SampleBatch.ACTION_LOGP], np.float32),
            SampleBatch.VF_PREDS: np.asarray(info.get(SampleBatch.VF_PREDS, np.zeros(n)), np.float32),
            "advantages": r.normal(size=n).astype(np.float32),
            "value_targets": r.normal(size=n).astype(np.float32),
        }
    )


def _check_learns(policy, batch: SampleBatch) -> None:
    before = _weights(policy)
    policy.learn_on_batch(batch)
    after = _weights(policy)
    assert any(not np.allclose(a, b, rtol=0, atol=1e-9) for a, b in zip(before, after))
    assert all(np.all(np.isfinite(a)) for a in after)


def test_learn_on_batch_changes_weights(policies, framework, space_name):
    policy = policies("ppo", framework, space_name)
    _check_learns(policy, _train_batch(policy, SPACES[space_name]))


def test_pg_acts_and_learns(policies, framework):
    # PG shares the distributions with PPO; the Dict holds every kind of new leaf.
    policy, space = policies("pg", framework, "nested"), NESTED
    actions, _, _ = policy.compute_actions(_obs(3), explore=False)
    check_batch_actions(space, actions, 3)
    _check_learns(policy, _train_batch(policy, space))


def test_struct_actions_in_the_train_batch(policies, framework):
    # Dict actions kept per component (as the sampler stores them, and as with
    # _disable_action_flattening) are read like the flattened column.
    policy = policies("ppo", framework, "nested")
    _check_learns(policy, _train_batch(policy, NESTED, flatten=False))


class _CheckingEnv(gym.Env):
    """Four-step episodes that record every action outside the action space."""

    observation_space = OBS_SPACE

    def __init__(self, action_space: gym.Space):
        self.action_space, self.bad, self.t = action_space, [], 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        if not self.action_space.contains(action):
            self.bad.append(action)
        self.t += 1
        return np.full(4, 0.1 * self.t, np.float32), 1.0, self.t >= 4, False, {}


def test_rollout_worker_samples_and_learns(policies, framework):
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    envs = []

    def make_env(config=None):
        envs.append(_CheckingEnv(NESTED))
        return envs[-1]

    # The policy-instance call form reuses the module's policy (no new TF graph).
    worker = RolloutWorker(make_env, policies("ppo", framework, "nested"), rollout_fragment_length=8)
    batch = worker.sample()
    assert [e.bad for e in envs] == [[]]  # every action the env got is inside the space
    # RLlib 1.11 stores struct actions flattened: the leaves (dm-tree order) side by side.
    flat = np.asarray(batch[SampleBatch.ACTIONS])
    widths = [int(np.prod(leaf.shape)) or 1 for leaf, _ in _leaves(NESTED)]
    assert flat.shape == (len(batch), sum(widths)) and flat.dtype == np.float32
    parts = np.split(flat, np.cumsum(widths)[:-1], axis=1)
    rows = [
        {
            path[0]: part[i].reshape(leaf.shape).astype(leaf.dtype)
            for (leaf, path), part in zip(_leaves(NESTED), parts)
        }
        for i in range(len(batch))
    ]
    assert all(
        NESTED["d"].contains(r["d"].item())
        and NESTED["md"].contains(r["md"])
        and NESTED["bits"].contains(r["bits"])
        for r in rows
    )
    _check_learns(worker.get_policy(), batch)


def test_tuple_action_space_torch_round_trip():
    pytest.importorskip("torch")
    from rlpolicy.agents.ppo import PPOTorchPolicy

    space = gym.spaces.Tuple([BOX, BITS, MD2])
    policy = PPOTorchPolicy(OBS_SPACE, space, dict(CONFIG, framework="torch"))
    obs = _obs(4, seed=9)
    actions, _, info = policy.compute_actions(obs, explore=True)
    check_batch_actions(space, actions, 4)
    inputs = np.asarray(info[SampleBatch.ACTION_DIST_INPUTS], np.float64)
    np.testing.assert_allclose(
        to_numpy(policy.compute_log_likelihoods(actions, obs)),
        ref_logp(space, inputs, actions),
        rtol=1e-5,
        atol=1e-4,
    )
    np.testing.assert_allclose(
        info[SampleBatch.ACTION_LOGP], ref_logp(space, inputs, actions), rtol=1e-5, atol=1e-4
    )
