"""Policies on a ``Repeated(Box(...), max_len=4)`` observation space (torch, tf, tf2).

Written as a RLlib 1.x user module would be (imports renamed): a custom model
that mean-pools the valid items of ``input_dict["obs"]`` (a ``RepeatedValues``)
with a mask from ``.lengths``, registered with the ``ModelCatalog``, and a
PG-style policy per framework (``build_policy_class`` for torch,
``build_tf_policy`` for tf and its ``as_eager()`` for tf2, with and without
tracing). Expected values: a numpy forward pass of the pooling model written
here from the policy's weights, the reference flat encoding, and invariances
(item order, padding contents).
"""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.repeated_values import RepeatedValues
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.spaces.repeated import Repeated

ATOL = 1e-4
MAX_LEN, ITEM_DIM, HIDDEN, N_ACTIONS = 4, 3, 8, 3
ITEM_SPACE = gym.spaces.Box(-1.0, 1.0, (ITEM_DIM,), np.float32)
OBS_SPACE = Repeated(ITEM_SPACE, max_len=MAX_LEN)
ACT_SPACE = gym.spaces.Discrete(N_ACTIONS)
FLAT = 1 + MAX_LEN * ITEM_DIM
SEEN_OBS_TYPES = set()  # (framework, whether input_dict["obs"] was a RepeatedValues)


def encode(obs):
    """Reference flat encoding: [len, item_0, ..., item_3], zero-padded."""
    out = np.zeros(FLAT, np.float32)
    out[0] = len(obs)
    for i, item in enumerate(obs):
        out[1 + i * ITEM_DIM : 1 + (i + 1) * ITEM_DIM] = item
    return out


def np_logits(flat, w):
    """Numpy forward pass of the pooling model: masked mean of relu(items W1 + b1), then W2."""
    lengths = flat[:, 0].astype(np.int64)
    items = flat[:, 1:].reshape(len(flat), MAX_LEN, ITEM_DIM)
    hidden = np.maximum(items @ w["embed_w"] + w["embed_b"], 0.0)
    mask = (np.arange(MAX_LEN)[None, :] < lengths[:, None]).astype(np.float32)
    pooled = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1.0)
    return pooled @ w["logits_w"] + w["logits_b"]


# ---------------------------------------------------------------- 1.x-style models


def _torch_model_cls():
    from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
    from rlpolicy.utils.framework import try_import_torch

    torch, nn = try_import_torch()

    class TorchItemPoolModel(TorchModelV2, nn.Module):
        """Embeds each item, mean-pools the valid ones (mask from obs.lengths)."""

        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
            nn.Module.__init__(self)
            item_dim = obs_space.original_space.child_space.shape[0]
            self.embed = nn.Linear(item_dim, HIDDEN)
            self.logits = nn.Linear(HIDDEN, num_outputs)
            self.value = nn.Linear(HIDDEN, 1)
            self._pooled = None

        def forward(self, input_dict, state, seq_lens):
            obs = input_dict["obs"]
            SEEN_OBS_TYPES.add(("torch", isinstance(obs, RepeatedValues)))
            hidden = torch.relu(self.embed(obs.values))  # [B, N, H]
            mask = (torch.arange(obs.max_len)[None, :] < obs.lengths[:, None]).float()
            count = mask.sum(1, keepdim=True).clamp(min=1.0)
            self._pooled = (hidden * mask.unsqueeze(-1)).sum(1) / count
            return self.logits(self._pooled), state

        def value_function(self):
            return self.value(self._pooled).squeeze(1)

    return TorchItemPoolModel


def _tf_model_cls():
    from rlpolicy.models.tf.tf_modelv2 import TFModelV2
    from rlpolicy.utils.framework import get_keras, try_import_tf

    _, tf, _ = try_import_tf()

    class TFItemPoolModel(TFModelV2):
        """The same model as a keras functional model (items and mask in, logits and value out)."""

        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            super().__init__(obs_space, action_space, num_outputs, model_config, name)
            keras = get_keras()
            space = obs_space.original_space
            items = keras.layers.Input(shape=(space.max_len, space.child_space.shape[0]))
            mask = keras.layers.Input(shape=(space.max_len,))
            hidden = keras.layers.Dense(HIDDEN, activation="relu", name="embed")(items)
            pooled = keras.layers.Lambda(
                lambda t: (
                    tf.reduce_sum(t[0] * t[1][..., None], 1)
                    / tf.maximum(tf.reduce_sum(t[1], 1, keepdims=True), 1.0)
                )
            )([hidden, mask])
            logits = keras.layers.Dense(num_outputs, name="logits")(pooled)
            value = keras.layers.Dense(1, name="value")(pooled)
            self.base_model = keras.Model([items, mask], [logits, value])

        def forward(self, input_dict, state, seq_lens):
            obs = input_dict["obs"]
            SEEN_OBS_TYPES.add(("tf", isinstance(obs, RepeatedValues)))
            mask = tf.sequence_mask(tf.cast(obs.lengths, tf.int32), obs.max_len, dtype=tf.float32)
            logits, self._value = self.base_model([obs.values, mask])
            return logits, state

        def value_function(self):
            return tf.reshape(self._value, [-1])

    return TFItemPoolModel


# ---------------------------------------------------------------- 1.x-style policies


def add_returns(policy, batch, other_agent_batches=None, episode=None):
    rewards = np.asarray(batch[SampleBatch.REWARDS], np.float32)
    batch["advantages"] = rewards - rewards.mean()
    return batch


def _torch_policy_cls():
    from rlpolicy.policy.policy_template import build_policy_class
    from rlpolicy.utils.framework import try_import_torch

    torch, _ = try_import_torch()

    def pg_loss(policy, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        policy.pg_loss = -torch.mean(logp * train_batch["advantages"])
        return policy.pg_loss

    return build_policy_class(
        "ItemPoolPGTorch",
        "torch",
        loss_fn=pg_loss,
        postprocess_fn=add_returns,
        stats_fn=lambda policy, batch: {"policy_loss": policy.pg_loss},
    )


def _tf_policy_cls():
    from rlpolicy.policy.tf_policy_template import build_tf_policy
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()

    def pg_loss(policy, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        policy.pg_loss = -tf.reduce_mean(logp * train_batch["advantages"])
        return policy.pg_loss

    return build_tf_policy(
        "ItemPoolPGTF",
        loss_fn=pg_loss,
        postprocess_fn=add_returns,
        stats_fn=lambda policy, batch: {"policy_loss": policy.pg_loss},
    )


MODES = {
    "torch": ("torch", {}),
    "tf": ("tf", {}),
    "tf2": ("tf2", {}),
    "tf2-traced": ("tf2", {"eager_tracing": True}),
}


def _make(mode):
    framework, extra = MODES[mode]
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    name = f"item_pool_{'torch' if framework == 'torch' else 'tf'}"
    ModelCatalog.register_custom_model(name, _torch_model_cls() if framework == "torch" else _tf_model_cls())
    config = {"framework": framework, "model": {"custom_model": name}, "lr": 0.1, "seed": 0, **extra}
    if framework == "torch":
        return _torch_policy_cls()(OBS_SPACE, ACT_SPACE, config)
    cls = _tf_policy_cls()
    return (cls if framework == "tf" else cls.as_eager())(OBS_SPACE, ACT_SPACE, config)


@pytest.fixture(scope="module", params=list(MODES))
def mode_policy(request):
    return request.param, _make(request.param)


def _named_weights(mode, policy):
    """{embed_w, embed_b, logits_w, logits_b} as numpy ([in, out] kernels)."""
    if mode == "torch":
        sd = {k: v.detach().numpy().copy() for k, v in policy.model.state_dict().items()}
        return {
            "embed_w": sd["embed.weight"].T,
            "embed_b": sd["embed.bias"],
            "logits_w": sd["logits.weight"].T,
            "logits_b": sd["logits.bias"],
        }
    # Graph tf: {"embed/kernel": ...}; eager: {"base_model.embed.kernel:0": ...}.
    weights = policy.get_weights() if mode == "tf" else policy.get_weights(as_dict=True)

    def find(layer, kind):
        (key,) = [k for k in weights if f"{layer}/{kind}" in k.replace(".", "/")]
        return np.array(weights[key], copy=True)

    return {
        f"{layer}_{short}": find(layer, kind)
        for layer in ("embed", "logits")
        for short, kind in (("w", "kernel"), ("b", "bias"))
    }


def _raw_rows(n, seed):
    rng = np.random.default_rng(seed)
    rows = [
        [rng.uniform(-1, 1, ITEM_DIM).astype(np.float32) for _ in range(int(k))]
        for k in rng.integers(0, MAX_LEN + 1, n)
    ]
    rows[0] = []
    return rows


def _logits(policy, obs):
    _, _, extra = policy.compute_actions(obs, explore=False)
    return np.asarray(extra[SampleBatch.ACTION_DIST_INPUTS])


# ---------------------------------------------------------------- tests


@pytest.mark.tf
def test_builds_on_the_flat_space_with_the_custom_model(mode_policy):
    mode, policy = mode_policy
    assert isinstance(policy.observation_space, gym.spaces.Box)
    assert policy.observation_space.shape == (FLAT,)
    assert policy.observation_space.original_space is OBS_SPACE
    assert type(policy.model).__name__.endswith("ItemPoolModel")
    fw = "torch" if mode == "torch" else "tf"
    assert {seen for seen in SEEN_OBS_TYPES if seen[0] == fw} == {(fw, True)}  # always, never flat


@pytest.mark.tf
def test_raw_list_observations_act_like_the_numpy_reference(mode_policy):
    mode, policy = mode_policy
    rows = _raw_rows(6, seed=1)
    flat = np.stack([encode(r) for r in rows])
    want = np_logits(flat, _named_weights(mode, policy))
    np.testing.assert_allclose(_logits(policy, rows), want, atol=ATOL)  # raw lists of items
    np.testing.assert_allclose(_logits(policy, flat), want, atol=ATOL)  # flat rows, unchanged
    same_length = np.stack([np.stack(r) for r in rows if len(r) == len(rows[1])])  # [b, n, 3]
    np.testing.assert_allclose(
        _logits(policy, same_length),
        np_logits(np.stack([encode(r) for r in same_length]), _named_weights(mode, policy)),
        atol=ATOL,
    )
    action, _, extra = policy.compute_single_action(rows[3], explore=False)
    assert ACT_SPACE.contains(int(action))
    np.testing.assert_allclose(extra[SampleBatch.ACTION_DIST_INPUTS], want[3], atol=ATOL)


@pytest.mark.tf
def test_the_model_reads_only_valid_items(mode_policy):
    _, policy = mode_policy
    a, b = np.array([0.5, -0.2, 0.9], np.float32), np.array([-0.7, 0.3, 0.1], np.float32)
    swapped = _logits(policy, [[a, b], [b, a]])
    np.testing.assert_allclose(swapped[0], swapped[1], atol=ATOL)  # pooling: order-free
    clean = encode([a])
    noisy = clean.copy()
    noisy[1 + ITEM_DIM :] = 0.77  # garbage in the padded slots: masked out by .lengths
    out = _logits(policy, np.stack([clean, noisy, encode([a, b])]))
    np.testing.assert_allclose(out[0], out[1], atol=ATOL)
    assert np.abs(out[0] - out[2]).max() > 1e-4


@pytest.mark.tf
def test_learns_finite_loss_and_weights_change(mode_policy):
    mode, policy = mode_policy
    rows = _raw_rows(16, seed=2)
    batch = SampleBatch(
        {
            SampleBatch.OBS: np.stack([encode(r) for r in rows]),
            SampleBatch.ACTIONS: np.arange(16) % N_ACTIONS,
            SampleBatch.REWARDS: np.linspace(-1.0, 1.0, 16).astype(np.float32),
            SampleBatch.DONES: np.zeros(16, bool),
        }
    )
    before = _named_weights(mode, policy)
    stats = policy.learn_on_batch(policy.postprocess_trajectory(batch))
    from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY

    loss = float(np.asarray(stats[LEARNER_STATS_KEY]["policy_loss"]))
    assert np.isfinite(loss)
    after = _named_weights(mode, policy)
    assert any(np.abs(after[k] - before[k]).max() > 1e-6 for k in before)


class ItemsEnv(gym.Env):
    """Emits 0..4 random items per step; remembers every observation it emitted."""

    observation_space = OBS_SPACE
    action_space = ACT_SPACE

    def __init__(self, length=6):
        self.length, self.t, self.emitted = length, 0, []

    def _obs(self):
        n = int(self.np_random.integers(0, MAX_LEN + 1))
        obs = [self.np_random.uniform(-1, 1, ITEM_DIM).astype(np.float32) for _ in range(n)]
        self.emitted.append(obs)
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action), self.t >= self.length, False, {}


@pytest.mark.parametrize("mode", ["torch", "tf"])
def test_rollout_worker_samples_flat_rows_and_the_policy_learns(mode):
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    policy = _make(mode)
    envs = []

    def env_creator(ctx=None):
        envs.append(ItemsEnv())
        return envs[-1]

    worker = RolloutWorker(env_creator, policy, rollout_fragment_length=6, seed=3)
    batch = worker.sample()
    (env,) = envs
    assert batch[SampleBatch.OBS].shape == (6, FLAT)
    np.testing.assert_allclose(
        batch[SampleBatch.OBS], np.stack([encode(o) for o in env.emitted[:6]]), atol=ATOL
    )
    np.testing.assert_allclose(
        batch[SampleBatch.NEXT_OBS], np.stack([encode(o) for o in env.emitted[1:7]]), atol=ATOL
    )
    from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY

    stats = policy.learn_on_batch(batch)
    assert np.isfinite(float(np.asarray(stats[LEARNER_STATS_KEY]["policy_loss"])))


def test_default_model_policy_on_the_repeated_space():
    """Without a custom model 1.11's catalog gives the FC net on the flat obs."""
    pytest.importorskip("torch")
    from rlpolicy.agents.pg import PGTorchPolicy

    policy = PGTorchPolicy(OBS_SPACE, ACT_SPACE, {"model": {"fcnet_hiddens": [4]}})
    assert type(policy.model).__name__ == "FullyConnectedNetwork"
    actions, _, _ = policy.compute_actions(_raw_rows(3, seed=4))
    assert all(ACT_SPACE.contains(int(a)) for a in actions)


def test_checkpoint_round_trip_keeps_the_repeated_space(tmp_path):
    pytest.importorskip("torch")
    from rlpolicy.agents.pg import PGTorchPolicy
    from rlpolicy.policy.policy import Policy

    policy = PGTorchPolicy(OBS_SPACE, ACT_SPACE, {"model": {"fcnet_hiddens": [4]}})
    policy.export_checkpoint(str(tmp_path))
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert restored.observation_space.original_space == OBS_SPACE
    rows = _raw_rows(4, seed=5)
    np.testing.assert_allclose(_logits(restored, rows), _logits(policy, rows), atol=ATOL)


# ---------------------------------------------------------------- 1.11's RPG-style spy model

MAX_PLAYERS, MAX_ITEMS = 3, 2
PLAYER = gym.spaces.Dict(
    {
        "location": gym.spaces.Box(-100.0, 100.0, (2,), np.float32),
        "status": gym.spaces.Box(-1.0, 1.0, (10,), np.float32),
        "items": Repeated(gym.spaces.Box(-5.0, 5.0, (5,), np.float32), max_len=MAX_ITEMS),
    }
)
PLAYERS = Repeated(PLAYER, max_len=MAX_PLAYERS)


def to_list(value):
    """Nested lists/dicts of python floats from arrays or tensors of any framework."""
    if isinstance(value, (list, tuple)):
        return [to_list(x) for x in value]
    if isinstance(value, dict):
        return {k: to_list(v) for k, v in value.items()}
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value).tolist()


def _spy_model_cls(framework):
    if framework == "torch":
        from rlpolicy.models.torch.fcnet import FullyConnectedNetwork
        from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
        from rlpolicy.utils.framework import try_import_torch

        _, nn = try_import_torch()
        bases = (TorchModelV2, nn.Module)
    else:
        from rlpolicy.models.tf.fcnet import FullyConnectedNetwork
        from rlpolicy.models.tf.tf_modelv2 import TFModelV2

        bases = (TFModelV2,)

    class RepeatedSpyModel(*bases):
        """Records what it sees, unbatched; acts from the first player's location."""

        seen = []

        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            bases[0].__init__(self, obs_space, action_space, num_outputs, model_config, name)
            if len(bases) > 1:
                bases[1].__init__(self)
            self.fc = FullyConnectedNetwork(
                obs_space.original_space.child_space["location"],
                action_space,
                num_outputs,
                model_config,
                name + "_fc",
            )

        def forward(self, input_dict, state, seq_lens):
            obs = input_dict["obs"]
            assert len(obs.unbatch_repeat_dim()) == MAX_PLAYERS
            RepeatedSpyModel.seen.append(to_list(obs.unbatch_all()))
            return self.fc({"obs": obs.values["location"][:, 0]}, state, seq_lens)

        def value_function(self):
            return self.fc.value_function()

    return RepeatedSpyModel


class PlayersEnv(gym.Env):
    """Cycles through fixed samples of the players space (as 1.11's RepeatedSpaceEnv)."""

    observation_space = PLAYERS
    action_space = gym.spaces.Discrete(2)

    def __init__(self, samples):
        self.samples, self.i = samples, 0

    def reset(self, *, seed=None, options=None):
        self.i = 0
        return self.samples[0], {}

    def step(self, action):
        self.i += 1
        return self.samples[self.i % len(self.samples)], 1.0, self.i >= len(self.samples), False, {}


@pytest.mark.parametrize("framework", ["torch", "tf2"])
def test_model_sees_the_sampled_nested_lists(framework):
    """As 1.11's test_nested_observation_spaces.test_torch_repeated: what the model
    unbatches while sampling equals the raw observations the env emitted."""
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    PLAYERS.seed(9)
    samples = [PLAYERS.sample() for _ in range(4)]
    samples[1][0]["items"] = []  # a player without items
    spy = _spy_model_cls(framework)
    ModelCatalog.register_custom_model(f"repeated_spy_{framework}", spy)
    config = {
        "framework": framework,
        "model": {"custom_model": f"repeated_spy_{framework}", "fcnet_hiddens": [4]},
    }
    policy = (_torch_policy_cls() if framework == "torch" else _tf_policy_cls().as_eager())(
        PLAYERS, PlayersEnv.action_space, config
    )
    spy.seen.clear()  # (calls made by the loss initialisation)
    worker = RolloutWorker(lambda ctx=None: PlayersEnv(samples), policy, rollout_fragment_length=4)
    batch = worker.sample()
    assert batch[SampleBatch.OBS].shape == (4, 1 + MAX_PLAYERS * (2 + 10 + 1 + MAX_ITEMS * 5))
    assert len(spy.seen) == 4
    for i, seen in enumerate(spy.seen):
        assert seen[-1] == to_list(samples[i])


def test_torchscript_export_serves_flat_rows(tmp_path):
    torch = pytest.importorskip("torch")
    policy = _make("torch")
    policy.export_model(str(tmp_path))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch>=2.9 flags torch.jit
        loaded = torch.jit.load(str(tmp_path / "model.pt"))
    flat = np.stack([encode(r) for r in _raw_rows(5, seed=6)])
    with torch.no_grad():
        # (a stateless model is traced with one dummy state input, see policy/_torch/export)
        out, _ = loaded({"obs": torch.from_numpy(flat)}, [torch.ones(1)], torch.ones(5, dtype=torch.int32))
    np.testing.assert_allclose(out.numpy(), np_logits(flat, _named_weights("torch", policy)), atol=ATOL)
