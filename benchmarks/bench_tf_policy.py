"""TF policies ("tf" graph mode and "tf2" eager) against plain TF doing the same work.

Workload (as /work/shared/bench/policy_bench.py's "discrete" variant): Box(4) ->
Discrete(2), a 2x256 tanh policy MLP plus a separate 2x256 tanh value MLP
(``vf_share_layers=False``), PPO's loss (clipped surrogate, KL term, clipped value
error; entropy coefficient 0) and Adam. Every system starts from the same weights
(checked: all compute the same logits and values before timing).

Systems, per framework (each group's first system is its baseline):

* ``tf``: ``PPOTFPolicy`` (graph mode) vs a hand-written tf1 ``Graph`` + ``Session``
  with placeholders, ``tf1.train.AdamOptimizer`` and numpy feeds.
* ``tf2``: ``PPOTFPolicy.as_eager()`` with ``eager_tracing=True`` and ``False`` vs
  hand-written ``tf.function`` steps (tf_keras Adam, the eager policy's optimizer);
  then ``eager_tracing=False`` vs the same steps run eagerly ("plain eager"), once as
  it runs (its Keras models replayed by ``models/tf/functional_replay.py``) and once
  with every Keras model called through Keras ("Keras calls": the replay switched off
  with ``replay_disabled()``), side by side.
* with ``--rllib``: RLlib's own ``PPOTF1Policy`` / traced ``PPOTF2Policy`` (ray.rllib
  old API stack) in the first group of each framework.

Cases: ``compute_actions`` at batch 1 (time ratio, lower is better) and 256
(throughput ratio, higher is better): sample + logp + prob + logits + value
estimate, numpy in and out; ``learn_on_batch`` on 4000 rows; and
``load_batch_into_buffer(4000)`` + 30 ``learn_on_loaded_batch`` of 128 on one
device (throughput ratios). The plain tf1 side feeds numpy slices of the loaded
batch (what RLlib 1.11 does on one CPU); the plain ``tf.function`` side makes the
batch tensors once and slices them inside the graph. The plain learn steps return
the loss only; ``--plain-stats`` makes them also compute and return PPO's learner
stats (the policies always do).

In each repeat the systems of a group run one after another in a rotating order.
The table shows median wall times and the median of the per-repeat ratios (system
/ plain) on process CPU time (steady on a shared machine: time spent waiting for a
core is not counted) and on wall time; goals are checked on the CPU-time ratio.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_tf_policy.py [--repeats 9] [--quick]
        [--frameworks tf,tf2] [--rllib] [--plain-stats] [--threads 1] [--profile SYSTEM:CASE]

``--profile traced:batch=1`` prints a cProfile of the matching systems and cases
instead of timing them (``BENCH_SORT=cumulative`` to sort by cumulative time).
``--rllib`` needs ``ray.rllib`` importable with its extras (pandas etc.; see
/work/shared/bench/README.md), e.g. with the shared bench venv appended to the path:
``PYTHONPATH=.venv/lib/python3.11/site-packages:/work/benchvenv/lib/python3.11/site-packages``.
TensorFlow is imported first, so RLlib keeps TF2 behaviour on; its tf1 policy is built
inside its own Graph and Session, as RLlib's rollout worker does. RLlib's eager
policies have no ``load_batch_into_buffer``: that case is skipped for them.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras = tf_keras, as rlpolicy sets it

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402  (before ray.rllib: keeps TF2 behaviour on)

tf1 = tf.compat.v1

OBS_DIM, NUM_ACTIONS, HIDDEN = 4, 2, 256
CLIP, VF_CLIP, KL_COEFF, VF_COEFF, ENT_COEFF, LR = 0.3, 10.0, 0.2, 1.0, 0.0, 5e-5
TRAIN_N, MINIBATCH, SGD_STEPS = 4000, 128, 30
PI_LAYERS, VF_LAYERS = ("fc_1", "fc_2", "fc_out"), ("fc_value_1", "fc_value_2", "value_out")
PLAIN_STATS = False  # --plain-stats: the plain steps also return PPO's learner stats
LOSS_KEYS = ("obs", "actions", "action_dist_inputs", "action_logp", "advantages", "value_targets")
Weights = Dict[str, Tuple[np.ndarray, np.ndarray]]


# ----------------------------------------------------------------- the shared math


def mlp(x: Any, layers: List[Tuple[Any, Any]]) -> Any:
    """tanh hidden layers, linear output (as the catalog's FC net)."""
    for i, (kernel, bias) in enumerate(layers):
        x = tf.nn.bias_add(tf.matmul(x, kernel), bias)
        if i < len(layers) - 1:
            x = tf.tanh(x)
    return x


def forward(ws: Dict[str, Tuple[Any, Any]], obs: Any) -> Tuple[Any, Any]:
    logits = mlp(obs, [ws[n] for n in PI_LAYERS])
    value = tf.reshape(mlp(obs, [ws[n] for n in VF_LAYERS]), [-1])
    return logits, value


def logp_of(logits: Any, actions: Any) -> Any:
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=tf.cast(actions, tf.int32))


def act_outputs(ws: Dict[str, Tuple[Any, Any]], obs: Any) -> Tuple[Any, ...]:
    """Sampled actions, their logp and prob, the logits and the value estimates."""
    logits, value = forward(ws, obs)
    actions = tf.squeeze(tf.random.categorical(logits, 1), axis=1)
    logp = logp_of(logits, actions)
    return actions, logp, tf.exp(logp), logits, value


def ppo_loss(ws: Dict[str, Tuple[Any, Any]], b: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """PPOTFPolicy's loss (same formula and op forms as its Categorical), and, with
    ``--plain-stats``, the tensor learner stats PPO reports (else an empty dict)."""
    logits, value = forward(ws, b["obs"])
    ratio = tf.exp(logp_of(logits, b["actions"]) - b["action_logp"])
    adv = b["advantages"]
    surrogate = tf.minimum(adv * ratio, adv * tf.clip_by_value(ratio, 1 - CLIP, 1 + CLIP))
    a0 = b["action_dist_inputs"] - tf.reduce_max(b["action_dist_inputs"], axis=1, keepdims=True)
    a1 = logits - tf.reduce_max(logits, axis=1, keepdims=True)
    ea0, ea1 = tf.exp(a0), tf.exp(a1)
    z0 = tf.reduce_sum(ea0, axis=1, keepdims=True)
    z1 = tf.reduce_sum(ea1, axis=1, keepdims=True)
    kl = tf.reduce_sum(ea0 / z0 * (a0 - tf.math.log(z0) - a1 + tf.math.log(z1)), axis=1)
    entropy = tf.reduce_sum(ea1 / z1 * (tf.math.log(z1) - a1), axis=1)
    vf_err = tf.clip_by_value(tf.square(value - b["value_targets"]), 0, VF_CLIP)
    loss = tf.reduce_mean(-surrogate + KL_COEFF * kl + VF_COEFF * vf_err - ENT_COEFF * entropy)
    if not PLAIN_STATS:
        return loss, {}
    _, y_var = tf.nn.moments(b["value_targets"], axes=[0])
    _, d_var = tf.nn.moments(b["value_targets"] - value, axes=[0])
    return loss, {
        "total_loss": loss,
        "policy_loss": tf.reduce_mean(-surrogate),
        "vf_loss": tf.reduce_mean(vf_err),
        "kl": tf.reduce_mean(kl),
        "entropy": tf.reduce_mean(entropy),
        "vf_explained_var": tf.maximum(-1.0, 1 - d_var / y_var),
    }


def to_numpy(out: Any) -> Any:
    return tf.nest.map_structure(lambda t: t.numpy(), out)


def act_dict(out: Tuple[np.ndarray, ...]) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    a, logp, prob, logits, v = out
    return a, {"action_logp": logp, "action_prob": prob, "action_dist_inputs": logits, "vf_preds": v}


# ----------------------------------------------------------------- plain baselines


class PlainTF1:
    """tf1 Graph + Session, placeholders, numpy feeds, tf1.train.AdamOptimizer."""

    def __init__(self, weights: Weights, session_args: Dict[str, Any]):
        self.graph = tf1.Graph()
        with self.graph.as_default():
            ws = {n: (tf1.Variable(k), tf1.Variable(b)) for n, (k, b) in weights.items()}
            self.obs = tf1.placeholder(tf.float32, [None, OBS_DIM], name="obs")
            self.act_fetches = act_outputs(ws, self.obs)
            self.ph = {
                k: tf1.placeholder(dt, shape, name=k)
                for k, dt, shape in [
                    ("obs", tf.float32, [None, OBS_DIM]),
                    ("actions", tf.int64, [None]),
                    ("action_dist_inputs", tf.float32, [None, NUM_ACTIONS]),
                    ("action_logp", tf.float32, [None]),
                    ("advantages", tf.float32, [None]),
                    ("value_targets", tf.float32, [None]),
                ]
            }
            self.loss, self.stats = ppo_loss(ws, self.ph)
            self.train_op = tf1.train.AdamOptimizer(LR).minimize(self.loss)
            self.sess = tf1.Session(graph=self.graph, config=tf1.ConfigProto(**session_args))
            self.sess.run(tf1.global_variables_initializer())
        self.buffer: Dict[str, np.ndarray] = {}

    def compute_actions(self, obs: np.ndarray) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        return act_dict(self.sess.run(self.act_fetches, {self.obs: obs}))

    def learn(self, batch: Dict[str, np.ndarray]) -> Any:
        return self.sess.run(
            [self.train_op, self.loss, self.stats], {self.ph[k]: batch[k] for k in LOSS_KEYS}
        )[1:]

    def sgd(self, batch: Dict[str, np.ndarray]) -> None:
        self.buffer = dict(batch)
        for i in range(SGD_STEPS):
            o = (i * MINIBATCH) % (TRAIN_N - MINIBATCH)
            self.learn({k: v[o : o + MINIBATCH] for k, v in self.buffer.items()})


class PlainTF2:
    """tf.Variables, tf_keras Adam (the eager policy's optimizer), and ``tf.function``
    act and train steps (``compiled=False``: the same steps run eagerly)."""

    def __init__(self, weights: Weights, compiled: bool = True):
        from rlpolicy.utils.framework import get_keras

        self.ws = {n: (tf.Variable(k), tf.Variable(b)) for n, (k, b) in weights.items()}
        self.vars = [v for n in PI_LAYERS + VF_LAYERS for v in self.ws[n]]
        self.opt = get_keras().optimizers.Adam(LR)
        self.compiled = compiled
        wrap = tf.function if compiled else (lambda f: f)
        self._act = wrap(lambda obs: act_outputs(self.ws, obs))
        self._train = wrap(self._train_step)
        self._train_slice = wrap(self._train_slice_step)
        self.buffer: Dict[str, Any] = {}

    def _train_step(self, b: Dict[str, Any]) -> Any:
        with tf.GradientTape() as tape:
            loss, stats = ppo_loss(self.ws, b)
        self.opt.apply_gradients(zip(tape.gradient(loss, self.vars), self.vars))
        return loss, stats

    def _train_slice_step(self, buffer: Dict[str, Any], offset: Any) -> Any:
        return self._train_step({k: v[offset : offset + MINIBATCH] for k, v in buffer.items()})

    def compute_actions(self, obs: np.ndarray) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        return act_dict(tuple(t.numpy() for t in self._act(tf.constant(obs))))

    def learn(self, batch: Dict[str, np.ndarray]) -> float:
        return to_numpy(self._train({k: tf.constant(batch[k]) for k in LOSS_KEYS}))

    def sgd(self, batch: Dict[str, np.ndarray]) -> None:
        if not self.compiled:  # eagerly, numpy slices + tf.constant beat slicing tensors
            for i in range(SGD_STEPS):
                o = (i * MINIBATCH) % (TRAIN_N - MINIBATCH)
                self.learn({k: batch[k][o : o + MINIBATCH] for k in LOSS_KEYS})
            return
        # The loaded batch becomes tensors once; each step slices it inside the graph.
        self.buffer = {k: tf.constant(batch[k]) for k in LOSS_KEYS}
        for i in range(SGD_STEPS):
            o = (i * MINIBATCH) % (TRAIN_N - MINIBATCH)
            to_numpy(self._train_slice(self.buffer, tf.constant(o)))


# ----------------------------------------------------------------- policies


def layer_weights(weights: Dict[str, np.ndarray]) -> Weights:
    """``{layer: (kernel, bias)}`` from a get_weights dict (any key spelling)."""
    out: Dict[str, List[Any]] = {}
    for key, value in weights.items():
        parts = key.replace(".", "/").split("/")
        layer = next((p for p in parts if p in PI_LAYERS + VF_LAYERS), None)
        if layer is not None:
            out.setdefault(layer, [None, None])[0 if parts[-1].startswith("kernel") else 1] = value
    return {n: (k, b) for n, (k, b) in out.items()}


def set_layer_weights(policy: Any, weights: Weights) -> None:
    """Sets ``weights`` (by layer) into a policy whose get_weights is a dict, or a
    list in ``variables()`` order (RLlib's eager policies)."""
    own = policy.get_weights()
    keys = list(own) if isinstance(own, dict) else [v.name for v in policy.variables()]
    new = []
    for key in keys:
        parts = key.replace(".", "/").split("/")
        layer = next(p for p in parts if p in PI_LAYERS + VF_LAYERS)
        new.append(weights[layer][0 if parts[-1].startswith("kernel") else 1])
    policy.set_weights(dict(zip(keys, new)) if isinstance(own, dict) else new)


def spaces() -> Tuple[gym.Space, gym.Space]:
    return gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(NUM_ACTIONS)


def policy_config(framework: str, tracing: bool, threads: int) -> Dict[str, Any]:
    return {
        "framework": framework,
        "eager_tracing": tracing,
        "lr": LR,
        "clip_param": CLIP,
        "vf_clip_param": VF_CLIP,
        "kl_coeff": KL_COEFF,
        "vf_loss_coeff": VF_COEFF,
        "entropy_coeff": ENT_COEFF,
        "sgd_minibatch_size": MINIBATCH,
        "train_batch_size": TRAIN_N,
        "tf_session_args": session_args(threads),
        "model": {"fcnet_hiddens": [HIDDEN, HIDDEN], "fcnet_activation": "tanh", "vf_share_layers": False},
    }


def session_args(threads: int) -> Dict[str, Any]:
    return {
        "intra_op_parallelism_threads": threads,
        "inter_op_parallelism_threads": threads,
        "device_count": {"CPU": 1},
        "allow_soft_placement": True,
    }


def make_rlpolicy(framework: str, tracing: bool, threads: int) -> Any:
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    cls = PPOTFPolicy if framework == "tf" else PPOTFPolicy.as_eager()
    return cls(*spaces(), policy_config(framework, tracing, threads))


def make_rllib(framework: str, tracing: bool, threads: int) -> Any:
    """RLlib's own (old API stack) PPO TF policy, or raises ImportError."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.ppo.ppo_tf_policy import PPOTF1Policy, PPOTF2Policy

    cfg = (
        PPOConfig()
        .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
        .framework(framework, eager_tracing=tracing)
    ).to_dict()
    ours = policy_config(framework, tracing, threads)
    cfg.update({k: v for k, v in ours.items() if k != "model"})
    cfg["minibatch_size"] = MINIBATCH
    cfg["model"].update(ours["model"])
    if framework == "tf2":  # the traced subclass, as RLlib's workers pick it
        from ray.rllib.utils.tf_utils import get_tf_eager_cls_if_necessary

        return get_tf_eager_cls_if_necessary(PPOTF2Policy, cfg)(*spaces(), cfg)
    with tf1.Graph().as_default():
        with tf1.Session(config=tf1.ConfigProto(**session_args(threads))).as_default():
            return PPOTF1Policy(*spaces(), cfg)


class PolicySystem:
    """Runs the benchmark's work through the Policy API.

    RLlib's PPO loss also reads ``rewards`` and ``terminateds``; its batches
    get those two columns (zeros) on top of the six every system uses.
    """

    def __init__(self, policy: Any):
        from rlpolicy.policy.sample_batch import SampleBatch

        self.policy = policy
        self.sample_batch = SampleBatch
        self.extra: Dict[str, np.ndarray] = {}
        if type(policy).__module__.startswith("ray."):
            from ray.rllib.policy.sample_batch import SampleBatch as RaySampleBatch

            self.sample_batch = RaySampleBatch
            self.extra = {"rewards": np.zeros(TRAIN_N, np.float32), "terminateds": np.zeros(TRAIN_N, bool)}

    def compute_actions(self, obs: np.ndarray) -> Any:
        return self.policy.compute_actions(obs)

    def learn(self, batch: Dict[str, np.ndarray]) -> Any:
        return self.policy.learn_on_batch(self.sample_batch({**batch, **self.extra}))

    def sgd(self, batch: Dict[str, np.ndarray]) -> None:
        per = self.policy.load_batch_into_buffer(self.sample_batch({**batch, **self.extra}), buffer_index=0)
        for i in range(SGD_STEPS):
            self.policy.learn_on_loaded_batch((i * MINIBATCH) % (per - MINIBATCH), buffer_index=0)


class KerasCallSystem(PolicySystem):
    """A policy whose eager model calls go through Keras (the functional replay off).

    The "before" of ``models/tf/functional_replay.py``: the same policy code with
    every Keras model called through ``Model.__call__``.
    """

    def __init__(self, policy: Any):
        from rlpolicy.models.tf.functional_replay import replay_disabled

        super().__init__(policy)
        self.replay_disabled = replay_disabled

    def compute_actions(self, obs: np.ndarray) -> Any:
        with self.replay_disabled():
            return super().compute_actions(obs)

    def learn(self, batch: Dict[str, np.ndarray]) -> Any:
        with self.replay_disabled():
            return super().learn(batch)

    def sgd(self, batch: Dict[str, np.ndarray]) -> None:
        with self.replay_disabled():
            super().sgd(batch)


# ----------------------------------------------------------------- measuring


def make_batch(n: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
    logits = rng.normal(size=(n, NUM_ACTIONS)).astype(np.float32)
    actions = rng.integers(0, NUM_ACTIONS, n)
    logp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True)))[np.arange(n), actions]
    return {
        "obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32),
        "actions": actions,
        "action_dist_inputs": logits,
        "action_logp": logp.astype(np.float32),
        "advantages": rng.normal(size=n).astype(np.float32),
        "value_targets": rng.normal(size=n).astype(np.float32),
    }


def timed(fn: Callable[[], Any], inner: int) -> Tuple[float, float]:
    """(wall seconds, process CPU seconds) per call."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - wall) / inner, (time.process_time() - cpu) / inner


def compare(
    case: str, fns: Dict[str, Callable[[], Any]], inner: int, repeats: int, kind: str
) -> List[Dict[str, Any]]:
    """Times every system of ``fns`` (the first is the plain baseline) in rotating order.

    Returns one row per non-baseline system: median wall times and the
    medians of the per-repeat ratios (time: system/plain; throughput:
    plain/system), on wall-clock and on process CPU time. The CPU-time ratio
    is the steadier one on a shared machine (waiting for a core is not
    counted); with one TF thread the two agree on an idle machine.
    """
    fns = dict(fns)
    for name, fn in list(fns.items()):  # warm-up (traces, first session runs)
        try:
            fn()
            fn()
        except NotImplementedError:  # e.g. RLlib's eager policies have no tower buffers
            print(f"  {case:30s} {name:22s}: not implemented, skipped")
            del fns[name]
    names = list(fns)
    times: Dict[str, List[Tuple[float, float]]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        if r % 2:
            order.reverse()
        for n in order:
            times[n].append(timed(fns[n], inner))
    base = names[0]
    rows = []
    for n in names[1:]:
        row = {
            "case": case,
            "system": n,
            "baseline": base,
            "kind": kind,
            "plain_ms": statistics.median(w for w, _ in times[base]) * 1e3,
            "ms": statistics.median(w for w, _ in times[n]) * 1e3,
        }
        for clock, i in (("wall", 0), ("cpu", 1)):
            ratios = [(t[i] / p[i] if kind == "time" else p[i] / t[i]) for t, p in zip(times[n], times[base])]
            row[clock] = statistics.median(ratios)
            row[clock + "_range"] = (min(ratios), max(ratios))
        rows.append(row)
        print(
            f"  {case:30s} {n:22s} vs {base:18s}: plain {row['plain_ms']:8.3f} ms  "
            f"system {row['ms']:8.3f} ms  {kind} ratio cpu {row['cpu']:5.2f} ({row['cpu_range'][0]:.2f}-{row['cpu_range'][1]:.2f})"
            f"  wall {row['wall']:5.2f}",
            flush=True,
        )
    return rows


KERAS_CALL = "rlpolicy tf2 untraced, Keras calls"
GOALS = {
    "compute_actions batch=1": ("time", 1.5),
    "compute_actions batch=256": ("throughput", 0.9),
    "learn_on_batch 4000": ("throughput", 0.95),
    f"load {TRAIN_N} + {SGD_STEPS} SGD of {MINIBATCH}": ("throughput", 0.95),
}


def build_systems(framework: str, threads: int, with_rllib: bool) -> List[Dict[str, Any]]:
    """Groups of systems, each with its plain baseline first.

    tf: plain tf1 vs rlpolicy (and RLlib). tf2: plain ``tf.function`` vs
    rlpolicy traced and untraced (and RLlib traced); then plain eager TF vs
    rlpolicy untraced (the same execution model), with and without the
    functional replay of its Keras models (before/after in one run).
    """
    policies: Dict[str, Any] = {}
    for tracing in [True, False] if framework == "tf2" else [False]:
        label = f"rlpolicy {framework}" + (
            "" if framework == "tf" else (" traced" if tracing else " untraced")
        )
        policies[label] = make_rlpolicy(framework, tracing, threads)
    if framework == "tf2":  # the untraced policy without the functional replay ("before")
        policies[KERAS_CALL] = make_rlpolicy(framework, False, threads)
    first = next(iter(policies.values()))
    # (A graph policy's get_weights() is keyed; an eager one's is a list: ask for keys.)
    weights = layer_weights(first.get_weights() if framework == "tf" else first.get_weights(as_dict=True))
    for pol in list(policies.values())[1:]:
        set_layer_weights(pol, weights)
    if with_rllib:
        try:
            pol = make_rllib(framework, True, threads)
            set_layer_weights(pol, weights)
            policies[f"ray.rllib {framework}" + (" traced" if framework == "tf2" else "")] = pol
        except Exception as e:  # noqa: BLE001  (a peer that cannot run is reported, not fatal)
            print(f"  ray.rllib {framework}: skipped ({type(e).__name__}: {str(e)[:300]})")
    wrapped = {n: (KerasCallSystem if n == KERAS_CALL else PolicySystem)(p) for n, p in policies.items()}
    if framework == "tf":
        groups = [{"plain tf1 session": PlainTF1(weights, session_args(threads)), **wrapped}]
    else:
        untraced = {n: s for n, s in wrapped.items() if "untraced" in n}
        groups = [
            {"plain tf.function": PlainTF2(weights), **{n: s for n, s in wrapped.items() if n != KERAS_CALL}},
            {"plain eager": PlainTF2(weights, compiled=False), **untraced},
        ]
    for group in groups:
        check_same_outputs(group)
    return groups


def check_same_outputs(systems: Dict[str, Any]) -> None:
    """Raises unless every system computes the baseline's logits and values (same weights)."""
    obs = np.random.default_rng(1).normal(size=(8, OBS_DIM)).astype(np.float32)
    (base_name, base), *others = systems.items()
    ref = base.compute_actions(obs)[-1]
    for name, system in others:
        extra = system.compute_actions(obs)[-1]
        for key in ("action_dist_inputs", "vf_preds"):
            if not np.allclose(extra[key], ref[key], rtol=1e-4, atol=1e-5):
                raise RuntimeError(
                    f"{name} computes other {key} than {base_name}: not the same network/weights"
                )


def cases(
    systems: Dict[str, Any], rng: np.random.Generator, quick: bool
) -> List[Tuple[str, Dict[str, Callable[[], Any]], int, str]]:
    out = []
    for bs, inner, kind in [(1, 200, "time"), (256, 50, "throughput")]:
        obs = rng.normal(size=(bs, OBS_DIM)).astype(np.float32)
        out.append(
            (
                f"compute_actions batch={bs}",
                {n: (lambda s=s, obs=obs: s.compute_actions(obs)) for n, s in systems.items()},
                inner // (4 if quick else 1),
                kind,
            )
        )
    data = make_batch(TRAIN_N, rng)
    out.append(
        (
            "learn_on_batch 4000",
            {n: (lambda s=s: s.learn(data)) for n, s in systems.items()},
            1 if quick else 3,
            "throughput",
        )
    )
    out.append(
        (
            f"load {TRAIN_N} + {SGD_STEPS} SGD of {MINIBATCH}",
            {n: (lambda s=s: s.sgd(data)) for n, s in systems.items()},
            1,
            "throughput",
        )
    )
    return out


def profile(fn: Callable[[], Any], inner: int, top: int = 25) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(inner):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(top)


def profile_matching(spec: str, case: str, fns: Dict[str, Callable[[], Any]], inner: int) -> None:
    """cProfiles the systems/cases whose names contain ``spec``'s SYSTEM:CASE parts."""
    who, _, what = spec.partition(":")
    for n, fn in fns.items():
        if who in n and what in case:
            fn()
            print(f"profile of {n} / {case}:")
            profile(fn, inner * 5)


def run(
    frameworks: List[str],
    repeats: int,
    quick: bool,
    threads: int,
    with_rllib: bool,
    profile_spec: Optional[str] = None,
) -> List[Dict[str, Any]]:
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    rows: List[Dict[str, Any]] = []
    for fw in frameworks:
        print(f"framework {fw}:", flush=True)
        for systems in build_systems(fw, threads, with_rllib):
            for case, fns, inner, kind in cases(systems, np.random.default_rng(0), quick):
                if profile_spec:
                    profile_matching(profile_spec, case, fns, inner)
                else:
                    rows += compare(case, fns, inner, repeats, kind)
    if rows:
        print_table(rows)
    return rows


def print_table(rows: List[Dict[str, Any]]) -> None:
    print(
        "\n| case | system | baseline | plain ms | system ms | ratio, CPU time (min-max) | ratio, wall "
        "| goal |"
    )
    print("|---|---|---|---:|---:|---|---:|---|")
    for r in rows:
        kind, goal = GOALS[r["case"]]
        ok = r["cpu"] <= goal if kind == "time" else r["cpu"] >= goal
        sign = "<=" if kind == "time" else ">="
        lo, hi = r["cpu_range"]
        print(
            f"| {r['case']} | {r['system']} | {r['baseline']} | {r['plain_ms']:.3f} | {r['ms']:.3f} | "
            f"{r['cpu']:.2f} ({lo:.2f}-{hi:.2f}) | {r['wall']:.2f} | "
            f"{kind} {sign} {goal} {'ok' if ok else 'MISS'} |"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--frameworks", default="tf,tf2")
    ap.add_argument("--threads", type=int, default=1, help="TF intra/inter-op threads (all systems)")
    ap.add_argument("--rllib", action="store_true", help="also measure ray.rllib's PPO TF policies")
    ap.add_argument(
        "--plain-stats",
        action="store_true",
        help="plain learn steps also compute and return PPO's learner stats",
    )
    ap.add_argument(
        "--profile",
        default=None,
        help="SYSTEM:CASE substrings, e.g. 'traced:batch=1': cProfile instead of timing",
    )
    args = ap.parse_args()
    PLAIN_STATS = args.plain_stats
    run(args.frameworks.split(","), args.repeats, args.quick, args.threads, args.rllib, args.profile)
