"""Multi-optimizer policies: a SAC-style actor-critic built with both factories.

One algorithm, written twice: ``SACStyleTorchPolicy`` (``build_policy_class``,
framework "torch") and ``SACStyleTFPolicy`` (``build_tf_policy``: graph "tf",
and tf2 through ``SACStyleTFPolicy.as_eager()``, traced or not). Each has

* a model with a squashed-Gaussian actor over a Box(-1, 1) action space, twin
  Q critics ``Q(obs, action)`` and a learned entropy coefficient
  ``alpha = exp(log_alpha)``; a second copy of it is the target network;
* three optimizers (``optimizer_fn`` returns a list): actor, critic (both Q
  nets) and alpha, each owning only its own variables;
* a ``loss_fn`` returning three losses, one per optimizer, in that order (what
  RLlib 1.11's SAC computes, with one critic loss for both Q nets)::

      a~, logp~   = tanh-squashed reparameterised samples of the actor
      target      = r + gamma * (1 - terminated) * (min Q_targ(s', a~') - alpha * logp~')
      critic_loss = mean(huber(Q1(s, a) - target)) + mean(huber(Q2(s, a) - target))
      actor_loss  = mean(alpha * logp~ - min(Q1, Q2)(s, a~))
      alpha_loss  = -mean(log_alpha * (logp~ + target_entropy))

  (``target``, ``alpha`` in the actor loss and ``logp~ + target_entropy`` in
  the alpha loss are constants for the gradient);
* a polyak target update ``target = tau * model + (1 - tau) * target`` after
  every ``learn_on_batch`` (``PolyakAfterLearn``, on top of the frameworks'
  ``TargetNetworkMixin``).

Torch assigns each parameter to one optimizer through the optimizers' param
groups. TF takes every loss's gradients from one tape (or graph), so the TF
policy passes ``compute_gradients_fn``: each loss is differentiated w.r.t. its
optimizer's variables only (the actor loss also depends on the critics, whose
variables it must not move). TF runs several losses only with
``_tf_policy_handles_more_than_one_loss`` in the config (set in the defaults).

The reparameterisation noise comes from ``policy.sample_noise``; a subclass may
override it (the tests fix it to compare frameworks step by step).

Run:  python examples/sac_style_policy.py [--steps N] [--frameworks torch,tf2]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
It learns a one-step continuous task (reward ``-|a - obs/2|^2``) from a fixed
random data set and prints the greedy reward before and after, per framework.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any, Dict, List, Sequence, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from rlpolicy.models.tf.functional_replay import KerasReplay  # noqa: E402
from rlpolicy.models.tf.tf_action_dist import SquashedGaussian  # noqa: E402
from rlpolicy.models.tf.tf_modelv2 import TFModelV2  # noqa: E402
from rlpolicy.models.torch.torch_action_dist import TorchSquashedGaussian  # noqa: E402
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2  # noqa: E402
from rlpolicy.policy import tf_mixins, torch_mixins  # noqa: E402
from rlpolicy.policy.policy_template import build_policy_class  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy_template import build_tf_policy  # noqa: E402
from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

#: Bounds of the actor's log standard deviation (RLlib's SAC uses the same).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
#: Keeps ``log(1 - tanh(z)^2)`` finite at the squashing's edges.
TANH_EPS = 1e-6

DEFAULT_CONFIG: Dict[str, Any] = {
    "gamma": 0.99,
    "tau": 5e-3,  # polyak coefficient of the target update after each learn step
    "hiddens": [256, 256],  # of the actor and of each Q net
    "initial_alpha": 1.0,
    "target_entropy": "auto",  # "auto": -(number of action dimensions)
    "actor_lr": 3e-4,
    "critic_lr": 3e-4,
    "alpha_lr": 3e-4,
    "adam_epsilon": 1e-8,
    "_tf_policy_handles_more_than_one_loss": True,
}


def _sizes(obs_space: gym.spaces.Space, action_space: gym.spaces.Space) -> Tuple[int, int]:
    if (
        not isinstance(action_space, gym.spaces.Box)
        or action_space.shape is None
        or len(action_space.shape) != 1
    ):
        raise ValueError(f"SAC-style policy: needs a 1-D Box action space, got {action_space}")
    if not (np.all(action_space.low == -1.0) and np.all(action_space.high == 1.0)):
        raise ValueError(f"SAC-style policy: the action space must be Box(-1, 1), got {action_space}")
    return int(np.prod(obs_space.shape)), int(action_space.shape[0])


def target_entropy(config: Dict[str, Any], act_dim: int) -> float:
    """``config["target_entropy"]``, with "auto" meaning ``-act_dim``."""
    value = config["target_entropy"]
    return -float(act_dim) if value == "auto" else float(value)


# ---------------------------------------------------------------- torch


def _torch_mlp(n_in: int, hiddens: Sequence[int], n_out: int) -> nn.Sequential:
    layers: List[nn.Module] = []
    for h in hiddens:
        layers += [nn.Linear(n_in, h), nn.ReLU()]
        n_in = h
    return nn.Sequential(*layers, nn.Linear(n_in, n_out))


class SACStyleTorchModel(TorchModelV2, nn.Module):
    """Actor ``action_model``, critics ``q_net`` / ``twin_q_net``, scalar ``log_alpha``."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, hiddens, initial_alpha):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        obs_dim, act_dim = _sizes(obs_space, action_space)
        self.action_model = _torch_mlp(obs_dim, hiddens, 2 * act_dim)
        self.q_net = _torch_mlp(obs_dim + act_dim, hiddens, 1)
        self.twin_q_net = _torch_mlp(obs_dim + act_dim, hiddens, 1)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha), dtype=torch.float32))

    def forward(self, input_dict, state, seq_lens):
        """The flat observations; the heads below read them."""
        return input_dict["obs_flat"].float(), state

    def action_dist_inputs(self, obs):
        """Mean and log std of the pre-squash Gaussian, concatenated ``[B, 2k]``."""
        return self.action_model(obs)

    def q_values(self, obs, actions):
        """``(Q1, Q2)``, each ``[B]``."""
        x = torch.cat([obs, actions], -1)
        return self.q_net(x).squeeze(-1), self.twin_q_net(x).squeeze(-1)

    def policy_variables(self) -> List[nn.Parameter]:
        """The actor's parameters."""
        return list(self.action_model.parameters())

    def q_variables(self) -> List[nn.Parameter]:
        """Both critics' parameters."""
        return list(self.q_net.parameters()) + list(self.twin_q_net.parameters())


def model_builder(model_class):
    """A ``make_model`` for ``model_class`` (either framework's model below): builds
    the model and ``policy.target_model``, of the same layout."""

    def make_model(policy, obs_space, action_space, config):
        def make(name):
            return model_class(
                obs_space,
                action_space,
                _sizes(obs_space, action_space)[0],
                config["model"],
                name,
                config["hiddens"],
                config["initial_alpha"],
            )  # num_outputs: forward() passes the flat observations through

        policy.target_model = make("target")
        return make("model")

    return make_model


def _torch_squashed_sample(dist_inputs, noise):
    """tanh(mean + std * noise) and its log-density (tanh Jacobian included)."""
    mean, log_std = torch.chunk(dist_inputs, 2, dim=-1)
    log_std = torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)
    z = mean + torch.exp(log_std) * noise
    action = torch.tanh(z)
    normal_logp = -0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)
    return action, torch.sum(normal_logp - torch.log(1 - action**2 + TANH_EPS), -1)


def _torch_huber(x):
    return torch.where(x.abs() < 1.0, 0.5 * x**2, x.abs() - 0.5)


def torch_losses(policy, model, dist_class, train_batch):
    """loss_fn: ``[actor_loss, critic_loss, alpha_loss]`` (see the module docstring)."""
    target_model = policy.target_models[model]
    obs, next_obs = train_batch[SampleBatch.CUR_OBS].float(), train_batch[SampleBatch.NEXT_OBS].float()
    actions = train_batch[SampleBatch.ACTIONS].float()
    not_done = 1.0 - train_batch[SampleBatch.TERMINATEDS].float()
    alpha = torch.exp(model.log_alpha)

    inputs_t, inputs_tp1 = model.action_dist_inputs(obs), model.action_dist_inputs(next_obs)
    a_t, logp_t = _torch_squashed_sample(inputs_t, policy.sample_noise(inputs_t, "t"))
    a_tp1, logp_tp1 = _torch_squashed_sample(inputs_tp1, policy.sample_noise(inputs_tp1, "tp1"))

    q_t, twin_q_t = model.q_values(obs, actions)
    q_pi = torch.min(*model.q_values(obs, a_t))
    q_tp1 = torch.min(*target_model.q_values(next_obs, a_tp1)) - alpha * logp_tp1
    target = (train_batch[SampleBatch.REWARDS].float() + policy.config["gamma"] * not_done * q_tp1).detach()

    critic_loss = torch.mean(_torch_huber(q_t - target)) + torch.mean(_torch_huber(twin_q_t - target))
    actor_loss = torch.mean(alpha.detach() * logp_t - q_pi)
    alpha_loss = -torch.mean(model.log_alpha * (logp_t + policy.target_entropy).detach())
    model.tower_stats.update(
        actor_loss=actor_loss, critic_loss=critic_loss, alpha_loss=alpha_loss, alpha_value=alpha.detach()
    )
    return [actor_loss, critic_loss, alpha_loss]


def torch_stats(policy, train_batch):
    """stats_fn: the three losses and alpha (mean over towers)."""
    keys = ("actor_loss", "critic_loss", "alpha_loss", "alpha_value")
    return {k: torch.stack(policy.get_tower_stats(k)).mean() for k in keys}


def torch_optimizers(policy, config):
    """optimizer_fn: Adam for the actor, the critics and log_alpha, in the losses' order."""
    eps, m = config["adam_epsilon"], policy.model
    return [
        torch.optim.Adam(m.policy_variables(), lr=config["actor_lr"], eps=eps),
        torch.optim.Adam(m.q_variables(), lr=config["critic_lr"], eps=eps),
        torch.optim.Adam([m.log_alpha], lr=config["alpha_lr"], eps=eps),
    ]


def action_distribution_fn(policy, model, input_dict, *, explore=True, **kwargs):
    """The actor's outputs as the inputs of a squashed Gaussian (both frameworks)."""
    model_out, _ = model(input_dict, [], None)
    dist_class = TorchSquashedGaussian if policy.framework == "torch" else SquashedGaussian
    return model.action_dist_inputs(model_out), dist_class, []


class TorchSACNoise:
    """``sample_noise``: standard normal noise shaped like the actor's mean."""

    def sample_noise(self, dist_inputs, which: str):
        """Noise for the samples at ``which`` ("t": obs, "tp1": next obs)."""
        return torch.randn_like(torch.chunk(dist_inputs, 2, dim=-1)[0])


class TorchPolyakAfterLearn:
    """Runs ``update_target()`` (tau = ``config["tau"]``) after each ``learn_on_batch``."""

    def learn_on_batch(self, postprocessed_batch):
        """The parent's learn step, then the polyak target update."""
        out = super().learn_on_batch(postprocessed_batch)  # type: ignore[misc]
        self.update_target()  # type: ignore[attr-defined]
        return out


def _torch_setup(policy, obs_space, action_space, config):
    policy.target_entropy = target_entropy(config, _sizes(obs_space, action_space)[1])
    torch_mixins.TargetNetworkMixin.__init__(policy)  # hard sync of the target


SACStyleTorchPolicy = build_policy_class(
    "SACStyleTorchPolicy",
    "torch",
    loss_fn=torch_losses,
    stats_fn=torch_stats,
    optimizer_fn=torch_optimizers,
    make_model=model_builder(SACStyleTorchModel),
    action_distribution_fn=action_distribution_fn,
    get_default_config=lambda: DEFAULT_CONFIG,
    before_loss_init=_torch_setup,
    mixins=[TorchPolyakAfterLearn, TorchSACNoise, torch_mixins.TargetNetworkMixin],
)


# ---------------------------------------------------------------- TF (graph "tf" and eager "tf2")


def _keras_mlp(n_in: int, hiddens: Sequence[int], n_out: int, name: str):
    keras = get_keras()
    inp = keras.layers.Input(shape=(n_in,), name=f"{name}_in")
    x = inp
    for i, h in enumerate(hiddens):
        x = keras.layers.Dense(h, activation="relu", name=f"{name}_fc_{i}")(x)
    return keras.Model(inp, keras.layers.Dense(n_out, name=f"{name}_out")(x), name=name)


class SACStyleTFModel(TFModelV2):
    """The TF twin of :class:`SACStyleTorchModel` (same heads, Keras layers)."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, hiddens, initial_alpha):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        obs_dim, act_dim = _sizes(obs_space, action_space)
        self.action_model = _keras_mlp(obs_dim, hiddens, 2 * act_dim, f"{name}_action")
        self.q_net = _keras_mlp(obs_dim + act_dim, hiddens, 1, f"{name}_q")
        self.twin_q_net = _keras_mlp(obs_dim + act_dim, hiddens, 1, f"{name}_twin_q")
        self.log_alpha = tf.Variable(math.log(initial_alpha), dtype=tf.float32, name=f"{name}_log_alpha")
        # Eagerly, a Keras call costs more than a small net's maths: a KerasReplay runs the
        # same layers (same variables) without Layer.__call__ (graph/traced: plain Keras).
        self._replay = {head: KerasReplay() for head in ("action_model", "q_net", "twin_q_net")}

    def forward(self, input_dict, state, seq_lens):
        """The flat observations; the heads below read them."""
        return tf.cast(input_dict["obs_flat"], tf.float32), state

    def action_dist_inputs(self, obs):
        """Mean and log std of the pre-squash Gaussian, concatenated ``[B, 2k]``."""
        return self._replay["action_model"](self.action_model, obs)

    def q_values(self, obs, actions):
        """``(Q1, Q2)``, each ``[B]``."""
        x = tf.concat([obs, actions], -1)
        q1 = self._replay["q_net"](self.q_net, x)
        q2 = self._replay["twin_q_net"](self.twin_q_net, x)
        return tf.squeeze(q1, -1), tf.squeeze(q2, -1)

    def policy_variables(self) -> List[Any]:
        """The actor's variables."""
        return list(self.action_model.variables)

    def q_variables(self) -> List[Any]:
        """Both critics' variables."""
        return list(self.q_net.variables) + list(self.twin_q_net.variables)


def _tf_squashed_sample(dist_inputs, noise):
    mean, log_std = tf.split(dist_inputs, 2, axis=-1)
    log_std = tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX)
    z = mean + tf.exp(log_std) * noise
    action = tf.tanh(z)
    normal_logp = -0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)
    return action, tf.reduce_sum(normal_logp - tf.math.log(1 - action**2 + TANH_EPS), -1)


def _tf_huber(x):
    return tf.where(tf.abs(x) < 1.0, 0.5 * x**2, tf.abs(x) - 0.5)


def tf_losses(policy, model, dist_class, train_batch):
    """loss_fn: ``[actor_loss, critic_loss, alpha_loss]`` (see the module docstring)."""
    obs = tf.cast(train_batch[SampleBatch.CUR_OBS], tf.float32)
    next_obs = tf.cast(train_batch[SampleBatch.NEXT_OBS], tf.float32)
    actions = tf.cast(train_batch[SampleBatch.ACTIONS], tf.float32)
    not_done = 1.0 - tf.cast(train_batch[SampleBatch.TERMINATEDS], tf.float32)
    alpha = tf.exp(model.log_alpha)

    inputs_t, inputs_tp1 = model.action_dist_inputs(obs), model.action_dist_inputs(next_obs)
    a_t, logp_t = _tf_squashed_sample(inputs_t, policy.sample_noise(inputs_t, "t"))
    a_tp1, logp_tp1 = _tf_squashed_sample(inputs_tp1, policy.sample_noise(inputs_tp1, "tp1"))

    q_t, twin_q_t = model.q_values(obs, actions)
    q_pi = tf.minimum(*model.q_values(obs, a_t))
    q_tp1 = tf.minimum(*policy.target_model.q_values(next_obs, a_tp1)) - alpha * logp_tp1
    rewards = tf.cast(train_batch[SampleBatch.REWARDS], tf.float32)
    target = tf.stop_gradient(rewards + policy.config["gamma"] * not_done * q_tp1)

    critic_loss = tf.reduce_mean(_tf_huber(q_t - target)) + tf.reduce_mean(_tf_huber(twin_q_t - target))
    actor_loss = tf.reduce_mean(tf.stop_gradient(alpha) * logp_t - q_pi)
    alpha_loss = -tf.reduce_mean(model.log_alpha * tf.stop_gradient(logp_t + policy.target_entropy))
    policy.sac_stats = {
        "actor_loss": actor_loss,
        "critic_loss": critic_loss,
        "alpha_loss": alpha_loss,
        "alpha_value": alpha,
    }
    return [actor_loss, critic_loss, alpha_loss]


def tf_stats(policy, train_batch):
    """stats_fn: the three losses and alpha."""
    return dict(policy.sac_stats)


def tf_optimizers(policy, config):
    """optimizer_fn: three Adams (Keras eagerly, ``tf1.train`` in a graph)."""
    lrs, eps = (config["actor_lr"], config["critic_lr"], config["alpha_lr"]), config["adam_epsilon"]
    if policy.framework == "tf":
        return [tf1.train.AdamOptimizer(learning_rate=lr, epsilon=eps) for lr in lrs]
    return [get_keras().optimizers.Adam(learning_rate=lr, epsilon=eps) for lr in lrs]


def tf_gradients(policy, optimizers, losses):
    """compute_gradients_fn: each loss w.r.t. its own optimizer's variables only."""
    m = policy.model
    var_lists = (m.policy_variables(), m.q_variables(), [m.log_alpha])
    return [opt.compute_gradients(loss, var_list=vs) for opt, loss, vs in zip(optimizers, losses, var_lists)]


class TFSACNoise:
    """``sample_noise``: standard normal noise shaped like the actor's mean."""

    def sample_noise(self, dist_inputs, which: str):
        """Noise for the samples at ``which`` ("t": obs, "tp1": next obs)."""
        return tf.random.normal(tf.shape(tf.split(dist_inputs, 2, axis=-1)[0]))


class TFPolyakAfterLearn:
    """Runs ``update_target()`` (tau = ``config["tau"]``) after each ``learn_on_batch``."""

    def learn_on_batch(self, postprocessed_batch):
        """The parent's learn step, then the polyak target update."""
        out = super().learn_on_batch(postprocessed_batch)  # type: ignore[misc]
        self.update_target()  # type: ignore[attr-defined]
        return out


def _tf_set_target_entropy(policy, obs_space, action_space, config):
    policy.target_entropy = target_entropy(config, _sizes(obs_space, action_space)[1])


def _tf_sync_target(policy, obs_space, action_space, config):
    tf_mixins.TargetNetworkMixin.__init__(policy, obs_space, action_space, config)


SACStyleTFPolicy = build_tf_policy(
    name="SACStyleTFPolicy",
    loss_fn=tf_losses,
    stats_fn=tf_stats,
    optimizer_fn=tf_optimizers,
    compute_gradients_fn=tf_gradients,
    make_model=model_builder(SACStyleTFModel),
    action_distribution_fn=action_distribution_fn,
    get_default_config=lambda: DEFAULT_CONFIG,
    before_loss_init=_tf_set_target_entropy,
    after_init=_tf_sync_target,
    mixins=[TFPolyakAfterLearn, TFSACNoise, tf_mixins.TargetNetworkMixin],
)


# ---------------------------------------------------------------- demo


def make_policy(framework: str, obs_space, action_space, config=None, *, traced: bool = True):
    """A SAC-style policy for "torch", "tf" (graph) or "tf2" (eager; ``traced``)."""
    config = dict(config or {}, framework=framework)
    if framework == "torch":
        return SACStyleTorchPolicy(obs_space, action_space, config)
    if framework == "tf":
        return SACStyleTFPolicy(obs_space, action_space, config)
    return SACStyleTFPolicy.as_eager()(obs_space, action_space, dict(config, eager_tracing=traced))


def bandit_batch(rng: np.random.Generator, n: int, obs_dim: int) -> SampleBatch:
    """One-step episodes: random obs and actions, reward ``-|a - obs/2|^2``."""
    obs = rng.uniform(-1, 1, (n, obs_dim)).astype(np.float32)
    actions = rng.uniform(-1, 1, (n, obs_dim)).astype(np.float32)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.NEXT_OBS: rng.uniform(-1, 1, (n, obs_dim)).astype(np.float32),
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: -np.sum((actions - obs / 2) ** 2, -1).astype(np.float32),
            SampleBatch.TERMINATEDS: np.ones(n, bool),
            SampleBatch.DONES: np.ones(n, bool),
        }
    )


def greedy_reward(policy, obs: np.ndarray) -> float:
    """Mean reward of the deterministic (mean) actions on ``obs``."""
    actions = policy.compute_actions(obs, explore=False)[0]
    return float(np.mean(-np.sum((actions - obs / 2) ** 2, -1)))


def main() -> None:
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80 if quick else 1000)
    parser.add_argument("--frameworks", default="torch,tf2")
    args = parser.parse_args()

    obs_dim = 2
    obs_space = gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
    config = {"hiddens": [64, 64], "actor_lr": 3e-3, "critic_lr": 3e-3, "alpha_lr": 3e-3, "tau": 0.05}
    rng = np.random.default_rng(0)
    data = [bandit_batch(rng, 128, obs_dim) for _ in range(16)]
    test_obs = rng.uniform(-1, 1, (256, obs_dim)).astype(np.float32)
    for framework in args.frameworks.split(","):
        torch.manual_seed(0)
        tf.random.set_seed(0)
        policy = make_policy(framework, obs_space, action_space, config)
        print(
            f"{framework}: optimizers={len(policy._optimizers)} before: greedy reward={greedy_reward(policy, test_obs):.3f}"
        )
        for step in range(args.steps):
            stats = policy.learn_on_batch(data[step % len(data)].copy())["learner_stats"]
        losses = " ".join(f"{k}={float(stats[k]):.3f}" for k in ("actor_loss", "critic_loss", "alpha_loss"))
        print(
            f"{framework}: after {args.steps} steps: greedy reward={greedy_reward(policy, test_obs):.3f} "
            f"alpha={float(stats['alpha_value']):.3f} {losses}"
        )


if __name__ == "__main__":
    main()
