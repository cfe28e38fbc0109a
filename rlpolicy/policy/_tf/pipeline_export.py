"""The whole action pipeline of a TF policy as one SavedModel / ONNX artifact.

``TFPolicy.export_model(dir, onnx=None, pipeline=True)`` (graph mode) and
``EagerTFPolicy.export_model(..., pipeline=True)`` (tf2, traced or not) land
here. The artifact follows the contract of ``docs/export_pipeline.md``
(``rlpolicy._core.pipeline_contract``): raw observations (Dict/Tuple leaves,
raw Discrete integers) in; deterministic actions, actions sampled from an
explicit ``noise`` input, the distribution inputs and the RNN state out;
float Box actions unsquashed / clipped as the samplers do.

Two builders share one pipeline body (:func:`_pipeline_body`):

* graph policies (:func:`export_graph_pipeline`): the policy's action
  subgraph (observation placeholder -> distribution inputs and state outs) is
  frozen (variables to constants, loops made convertible) and imported into a
  fresh ``tf.Graph`` with its placeholders mapped onto the pipeline's
  preprocessing, ``explore``/``is_training`` fixed to False. That graph is
  written with ``SavedModelBuilder`` and converted by ``tf2onnx`` from its
  GraphDef. Everything happens in explicit graphs, so it works with eager on
  and in a TF1-mode process (``disable_v2_behavior``) alike.
* eager policies (:func:`export_eager_pipeline`): a ``tf.function`` over the
  model (and the policy's ``action_distribution_fn``, explore off), saved with
  ``tf.saved_model.save`` and converted by ``tf2onnx.convert.from_function``.

Before anything is installed the artifact is loaded in its consumer
(``tf.saved_model.load`` with eager on, TF1's ``saved_model.load`` into a
session in graph mode, ``onnxruntime.InferenceSession``) and checked against
the policy's ``compute_actions(explore=False)`` (``pc.verify_pipeline``).
Helpers here take data (session, tensors, model, spaces, config, callables),
never the policy. TensorFlow, tf2onnx and onnx are imported lazily.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core import pipeline_contract as pc
from rlpolicy.policy._pipeline_inputs import LeafPlan as _LeafPlan
from rlpolicy.policy._pipeline_inputs import check_model_inputs, observation_plan

#: Observation leaf plans: (kind, data), kind "float" (flattened), "ram" (Atari
#: RAM scaling), "one_hot" (data: (sizes, starts)) or "raw" (as it is).
#: ``(obs tensor, state tensors, seq_lens) -> (dist_inputs, dist_class, state outs)``.
_Forward = Callable[[Any, List[Any], Any], Tuple[Any, Any, List[Any]]]
_SERVE_TAG = "serve"
_SIGNATURE = "serving_default"


def _tf() -> Tuple[Any, Any]:
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf(error=True)
    return tf1, tf


@dataclass
class GraphActingTensors:
    """The graph policy's action subgraph, by tensor.

    Attributes:
        obs: The (preprocessed) observation placeholder.
        dist_inputs: The distribution inputs computed from it.
        state_inputs, state_outputs: RNN state placeholders and their next values.
        seq_lens: The ``seq_lens`` placeholder (recurrent models), else None.
        fixed: Placeholders fed a fixed value in the artifact (``explore``,
            ``is_training``: False; ``timestep``: 0).
    """

    obs: Any
    dist_inputs: Any
    state_inputs: List[Any] = field(default_factory=list)
    state_outputs: List[Any] = field(default_factory=list)
    seq_lens: Any = None
    fixed: Dict[Any, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------- entry points
def export_graph_pipeline(
    export_dir: str,
    *,
    session: Any,
    tensors: GraphActingTensors,
    dist_class: Any,
    model: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    config: Dict[str, Any],
    compute_actions: Callable[..., Any],
    initial_state: Sequence[Any],
    onnx: Optional[int] = None,
    exploration: str = "",
    batch_sizes: Sequence[int] = pc.VERIFY_BATCH_SIZES,
    steps: int = 2,
) -> pc.PipelineContract:
    """Exports, verifies and installs a graph policy's action pipeline.

    Args:
        export_dir: Where ``pipeline_savedmodel/`` (or ``pipeline.onnx``) and
            ``pipeline.json`` go (created if needed; other files untouched).
        session: The policy's session (its graph holds ``tensors``).
        tensors: The policy's action subgraph.
        dist_class: The action distribution class the policy builds on
            ``tensors.dist_inputs``.
        model: The policy's model (its view requirements are checked).
        observation_space, action_space, config: The policy's.
        compute_actions: The policy's ``compute_actions`` (the reference).
        initial_state: The model's initial state.
        onnx: An ONNX opset; None writes a SavedModel.
        exploration: The exploration's class name (recorded).
        batch_sizes, steps: How the artifact is checked.

    Raises:
        ValueError: Something the pipeline cannot express (named); nothing written.
        PipelineMismatchError: The loaded artifact differs from
            ``compute_actions(explore=False)``; nothing written.
    """
    from rlpolicy.policy._tf.export import freeze_serving_graph

    tf1, tf = _tf()
    if tensors.dist_inputs is None:
        raise ValueError(
            "the policy computes actions with an action_sampler_fn (no "
            "distribution inputs); its action pipeline cannot be exported"
        )
    plan = _Plan.make(model, observation_space, action_space, config, initial_state)
    mapped = [tensors.obs, *tensors.state_inputs] + (
        [tensors.seq_lens] if tensors.seq_lens is not None else []
    )
    fixed = {t: v for t, v in tensors.fixed.items() if tf.is_tensor(t)}
    outs = [tensors.dist_inputs, *tensors.state_outputs]
    frozen = freeze_serving_graph(session, [t.name for t in outs])
    frozen_nodes = {n.name for n in frozen.node}
    obs_dtype = tensors.obs.dtype

    graph = tf.Graph()
    with graph.as_default():
        placeholders = plan.placeholders(tf1, tf)

        def forward(obs: Any, states: List[Any], seq_lens: Any) -> Tuple[Any, Any, List[Any]]:
            input_map = {}
            for t, v in zip(mapped, [tf.cast(obs, obs_dtype), *states, seq_lens]):
                if t.op.name in frozen_nodes:
                    input_map[t.name] = v
            for t, v in fixed.items():
                if t.op.name in frozen_nodes:
                    input_map[t.name] = tf.constant(v, dtype=t.dtype)
            got = tf1.import_graph_def(
                frozen, input_map=input_map, return_elements=[t.name for t in outs], name="policy"
            )
            return got[0], dist_class, list(got[1:])

        body = _pipeline_body(tf, plan, placeholders, forward, model)
        noise = tf1.placeholder(tf.float32, [None, body.noise_dim], name=pc.NOISE_INPUT)
        results = body.finish(noise)
        outputs = [tf.identity(t, name=name) for t, name in zip(results, body.output_names)]
        with tf1.Session(graph=graph) as sess:  # (the outputs' dtypes and shapes, run once)
            example = plan.zeros_np(pc.TRACE_BATCH_SIZE)
            example.append(np.zeros([pc.TRACE_BATCH_SIZE, body.noise_dim], np.float32))
            ran = sess.run(outputs, dict(zip([*placeholders, noise], example)))
    contract = plan.contract(
        body, [(a.dtype, list(a.shape)) for a in ran], dist_class, exploration, onnx, "tf"
    )

    def write(tmp: str) -> None:
        in_map = dict(zip([s.name for s in contract.inputs], [*placeholders, noise]))
        out_map = dict(zip(body.output_names, outputs))
        if onnx:
            _graph_to_onnx(graph, in_map, out_map, tmp, onnx)
            return
        from rlpolicy.policy._tf.export import build_signature_def_map

        with graph.as_default():
            with tf1.Session(graph=graph) as sess:
                builder = tf1.saved_model.builder.SavedModelBuilder(tmp)
                builder.add_meta_graph_and_variables(
                    sess, [_SERVE_TAG], signature_def_map=build_signature_def_map(in_map, out_map)
                )
                builder.save()

    _write_verified(export_dir, contract, write, plan, compute_actions, batch_sizes, steps)
    return contract


def export_eager_pipeline(
    export_dir: str,
    *,
    model: Any,
    dist_class: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    config: Dict[str, Any],
    compute_actions: Callable[..., Any],
    initial_state: Sequence[Any],
    onnx: Optional[int] = None,
    exploration: str = "",
    dist_inputs_fn: Optional[Callable[..., Tuple[Any, Any, List[Any]]]] = None,
    model_forward: Optional[Callable[..., Tuple[Any, List[Any], Dict[str, Any]]]] = None,
    batch_sizes: Sequence[int] = pc.VERIFY_BATCH_SIZES,
    steps: int = 2,
) -> pc.PipelineContract:
    """Exports, verifies and installs an eager policy's action pipeline.

    Args:
        model: The policy's model (a ``TFModelV2`` or Keras model).
        dist_class: The policy's action distribution class.
        dist_inputs_fn: ``(model, input_dict, state_batches, seq_lens) ->
            (dist_inputs, dist_class, state_outs)`` replacing the model call
            (the policy's ``action_distribution_fn`` with explore off).
        model_forward: ``(model, input_dict, state_batches, seq_lens) ->
            (dist_inputs, state_outs, extra_fetches)``, the eager policy's
            forward pass (``eager_tf_policy.model_forward``, which the policy
            passes); required unless ``dist_inputs_fn`` is given.
        Others: as :func:`export_graph_pipeline`.

    Raises:
        ValueError, PipelineMismatchError: As :func:`export_graph_pipeline`.
    """
    from rlpolicy.policy.sample_batch import SampleBatch

    if dist_inputs_fn is None and model_forward is None:
        raise ValueError("export_eager_pipeline: pass model_forward (or dist_inputs_fn)")

    tf1, tf = _tf()
    if not tf.executing_eagerly():
        raise RuntimeError(
            "exporting an eager policy's pipeline needs eager execution "
            "(call it where the policy runs, in TF's eager mode)"
        )
    plan = _Plan.make(model, observation_space, action_space, config, initial_state)

    def forward(obs: Any, states: List[Any], seq_lens: Any) -> Tuple[Any, Any, List[Any]]:
        input_dict = SampleBatch({SampleBatch.OBS: obs}, _is_training=False)
        if dist_inputs_fn is not None:
            dist_inputs, cls, state_out = dist_inputs_fn(model, input_dict, states, seq_lens)
            return dist_inputs, cls, list(state_out or [])
        dist_inputs, state_out, _ = model_forward(model, input_dict, states, seq_lens)  # type: ignore[misc]
        return dist_inputs, dist_class, list(state_out or [])

    in_specs = plan.specs(tf)
    # One eager run fixes the noise layout (and so the noise input's width).
    probe = _pipeline_body(tf, plan, plan.zeros(tf, pc.TRACE_BATCH_SIZE), forward, model)
    noise_dim = probe.noise_dim
    names = list(probe.output_names)
    in_specs.append(tf.TensorSpec([None, noise_dim], tf.float32, name=pc.NOISE_INPUT))

    def flat(*args: Any) -> Dict[str, Any]:
        body = _pipeline_body(tf, plan, list(args[:-1]), forward, model)
        return dict(zip(names, body.finish(args[-1])))

    # (One trace serves the metadata, the SavedModel signature and tf2onnx.)
    fn = tf.function(flat, input_signature=in_specs, autograph=False)
    example = plan.zeros(tf, pc.TRACE_BATCH_SIZE) + [tf.zeros([pc.TRACE_BATCH_SIZE, noise_dim])]
    eager_out = fn(*example)
    contract = plan.contract(
        probe,
        [(eager_out[k].dtype.as_numpy_dtype, eager_out[k].shape.as_list()) for k in names],
        dist_class,
        exploration,
        onnx,
        "tf2",
    )

    def write(tmp: str) -> None:
        if onnx:
            _function_to_onnx(fn, in_specs, tmp, onnx)
            return
        module = tf.Module()
        module.model_variables = list(model.variables())
        module.serve = fn
        tf.saved_model.save(module, tmp, signatures={_SIGNATURE: fn.get_concrete_function()})

    _write_verified(export_dir, contract, write, plan, compute_actions, batch_sizes, steps)
    return contract


# ---------------------------------------------------------------------- the plan
@dataclass
class _Plan:
    """What the pipeline takes and returns, from the spaces and config."""

    raw_space: gym.Space
    obs_plan: List[_LeafPlan]
    obs_leaves: List[Tuple[Tuple[Any, ...], gym.Space]]
    act_leaves: List[Tuple[Tuple[Any, ...], gym.Space]]
    init: List[np.ndarray]
    normalize: bool
    clip: bool
    action_space: gym.Space

    @classmethod
    def make(
        cls,
        model: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Dict[str, Any],
        initial_state: Sequence[Any],
    ) -> "_Plan":
        raw_space, obs_plan = observation_plan(observation_space, config)
        check_model_inputs(model)
        normalize = bool(config.get("normalize_actions", True))
        clip = bool(config.get("clip_actions", False))
        pc.check_action_mapping(action_space, normalize)
        init = [np.asarray(s.numpy() if hasattr(s, "numpy") else s, np.float32) for s in initial_state]
        return cls(
            raw_space,
            obs_plan,
            pc.observation_leaves(raw_space),
            pc.action_leaves(action_space),
            init,
            normalize,
            clip,
            action_space,
        )

    @property
    def nested_obs(self) -> bool:
        return not (len(self.obs_leaves) == 1 and not self.obs_leaves[0][0])

    @property
    def nested_act(self) -> bool:
        return not (len(self.act_leaves) == 1 and not self.act_leaves[0][0])

    def input_specs(self) -> List[pc.TensorSpec]:
        """The contract's inputs but ``noise``."""
        names = pc.leaf_names("obs", len(self.obs_leaves), self.nested_obs)
        specs = [
            pc.TensorSpec(n, pc.obs_input_dtype(s), [None, *map(int, s.shape or ())], "obs", list(p), repr(s))
            for n, (p, s) in zip(names, self.obs_leaves)
        ]
        specs += [
            pc.TensorSpec(f"state_in_{i}", "float32", [None, *s.shape], "state")
            for i, s in enumerate(self.init)
        ]
        if self.init:
            specs.append(pc.TensorSpec("seq_lens", "int32", [None], "seq_lens"))
        return specs

    def placeholders(self, tf1: Any, tf: Any) -> List[Any]:
        return [tf1.placeholder(tf.as_dtype(s.dtype), s.shape, name=s.name) for s in self.input_specs()]

    def specs(self, tf: Any) -> List[Any]:
        return [tf.TensorSpec(s.shape, tf.as_dtype(s.dtype), name=s.name) for s in self.input_specs()]

    def zeros(self, tf: Any, batch: int) -> List[Any]:
        return [tf.constant(a) for a in self.zeros_np(batch)]

    def zeros_np(self, batch: int) -> List[np.ndarray]:
        """Example inputs (but ``noise``): zeros, the initial state, ones for seq_lens."""
        out, states = [], iter(self.init)
        for s in self.input_specs():
            if s.role == "state":
                arr = np.repeat(next(states)[None], batch, axis=0)
            elif s.role == "seq_lens":
                arr = np.ones(batch, np.int32)
            else:
                arr = np.zeros([batch, *[int(d or 0) for d in s.shape[1:]]], s.dtype)
            out.append(arr)
        return out

    def contract(
        self,
        body: "_Body",
        outs: List[Tuple[Any, List[Any]]],
        dist_class: Any,
        exploration: str,
        onnx: Optional[int],
        framework: str,
    ) -> pc.PipelineContract:
        inputs = self.input_specs()
        inputs.append(pc.TensorSpec(pc.NOISE_INPUT, "float32", [None, body.noise_dim], "noise"))
        n = len(self.act_leaves)
        roles = (
            ["action"] * n + ["sampled_action"] * n + ["dist_inputs"] + ["state"] * (len(outs) - 2 * n - 1)
        )
        leaves = list(self.act_leaves) * 2 + [((), None)] * (len(outs) - 2 * n)
        outputs = [
            pc.TensorSpec(
                name,
                np.dtype(dtype).name,
                [None, *shape[1:]],
                role,
                list(path),
                repr(s) if s is not None else "",
            )
            for name, (dtype, shape), role, (path, s) in zip(body.output_names, outs, roles, leaves)
        ]
        fmt = "onnx" if onnx else "savedmodel"
        return pc.PipelineContract(
            format=fmt,
            artifact=pc.ARTIFACT_FILES[fmt],
            framework=framework,
            opset=int(onnx) if onnx else None,
            inputs=inputs,
            outputs=outputs,
            noise=body.noise,
            noise_dim=body.noise_dim,
            observation_space=repr(self.raw_space),
            action_space=repr(self.action_space),
            normalize_actions=self.normalize,
            clip_actions=self.clip,
            initial_state=[s.tolist() for s in self.init],
            dist_class=_class_name(dist_class),
            exploration=exploration,
        )


# ---------------------------------------------------------------------- the body
@dataclass
class _Body:
    """The pipeline up to the noise input: its model part is built, the
    sampled actions are built by :meth:`finish` once the noise tensor exists."""

    tf: Any
    plan: _Plan
    leaf_dists: List[Any]
    det: List[Any]
    dist_inputs: Any
    state_out: List[Any]
    noise: List[pc.NoiseSlice]
    output_names: List[str]

    @property
    def noise_dim(self) -> int:
        return max(1, sum(s.size for s in self.noise))

    def finish(self, noise: Any) -> List[Any]:
        """All outputs in contract order: actions, sampled actions, dist inputs, states."""
        tf = self.tf
        sampled = []
        for leaf, det, sl in zip(self.leaf_dists, self.det, self._slices()):
            sampled.append(_sample(tf, leaf, det, noise[:, sl[0] : sl[0] + sl[1]]))
        dist_inputs = self.dist_inputs
        if not self.noise:
            # Nothing samples: the noise input still feeds the graph (ONNX drops
            # unused inputs), adding 0.
            dist_inputs = dist_inputs + 0.0 * noise[:, :1]
        det = [_to_env(tf, a, s, self.plan) for a, (_, s) in zip(self.det, self.plan.act_leaves)]
        sampled = [_to_env(tf, a, s, self.plan) for a, (_, s) in zip(sampled, self.plan.act_leaves)]
        return [*det, *sampled, dist_inputs, *self.state_out]

    def _slices(self) -> List[Tuple[int, int]]:
        by_action = {s.action: (s.start, s.size) for s in self.noise}
        names = self.output_names[: len(self.det)]
        return [by_action.get(name, (0, 0)) for name in names]


def _pipeline_body(tf: Any, plan: _Plan, inputs: List[Any], forward: _Forward, model: Any) -> _Body:
    """Preprocessing, the model and the deterministic actions on ``inputs``
    (the contract's inputs but ``noise``)."""
    k = len(plan.obs_plan)
    obs = _preprocess(tf, plan.obs_plan, inputs[:k])
    states = list(inputs[k : k + len(plan.init)])
    seq_lens = inputs[k + len(plan.init)] if plan.init else None
    dist_inputs, dist_class, state_out = forward(obs, states, seq_lens)
    if dist_class is None:
        raise ValueError("the policy's action_distribution_fn returned no distribution class")
    dist = dist_class(dist_inputs, model)
    children = getattr(dist, "flat_child_distributions", None)
    leaves = list(children) if children is not None else [dist]
    if len(leaves) != len(plan.act_leaves):
        raise ValueError(
            f"the action distribution {type(dist).__name__} has {len(leaves)} "
            f"components, the action space {len(plan.act_leaves)}"
        )
    det = tree.flatten(dist.deterministic_sample())
    n = len(plan.act_leaves)
    det_names = pc.leaf_names("actions", n, plan.nested_act)
    names = (
        det_names
        + pc.leaf_names("sampled_actions", n, plan.nested_act)
        + [pc.DIST_INPUTS_OUTPUT]
        + [f"state_out_{i}" for i in range(len(state_out))]
    )
    slices, start = [], 0
    for name, leaf in zip(det_names, leaves):
        kind, size = _noise_kind(leaf)
        if size:
            slices.append(pc.NoiseSlice(start, size, kind, name, type(leaf).__name__))
            start += size
    if plan.init and len(state_out) != len(plan.init):
        raise ValueError(
            f"the model returned {len(state_out)} state outs for {len(plan.init)} initial state tensors"
        )
    return _Body(tf, plan, leaves, det, dist_inputs, list(state_out) if plan.init else [], slices, names)


def _preprocess(tf: Any, obs_plan: List[_LeafPlan], leaves: Sequence[Any]) -> Any:
    if len(obs_plan) == 1 and obs_plan[0][0] == "raw":
        x = leaves[0]
        return tf.cast(x, tf.float32) if x.dtype.is_floating else x
    parts = []
    for x, (kind, data) in zip(leaves, obs_plan):
        flat = tf.reshape(x, [-1, int(np.prod(x.shape[1:]))])  # (static width)
        if kind == "one_hot":
            for j, (n, start) in enumerate(zip(*data)):
                idx = tf.cast(flat[:, j], tf.int64) - start
                parts.append(tf.one_hot(idx, n, dtype=tf.float32))
        elif kind == "ram":
            parts.append((tf.cast(flat, tf.float32) - 128.0) / 128.0)
        else:
            parts.append(tf.cast(flat, tf.float32))
    return tf.concat(parts, axis=1) if len(parts) > 1 else parts[0]


def _noise_kind(leaf: Any) -> Tuple[str, int]:
    from rlpolicy.models.tf import tf_action_dist as d

    if isinstance(leaf, d.Categorical):
        return "uniform", 1
    if isinstance(leaf, d.MultiCategorical):
        return "uniform", len(leaf.cats)
    if isinstance(leaf, (d.SquashedGaussian, d.DiagGaussian)):
        return "normal", int(leaf.mean.shape[-1])
    if isinstance(leaf, d.Deterministic):
        return "none", 0
    raise ValueError(
        f"pipeline export cannot sample {type(leaf).__name__} from explicit noise "
        "(supported: Categorical, MultiCategorical, DiagGaussian, SquashedGaussian, "
        "Deterministic and Dict/Tuple of them)"
    )


def _categorical(tf: Any, logits: Any, u: Any) -> Any:
    """Inverse-CDF draw: the number of ``cdf[:n-1]`` entries below ``u``."""
    cdf = tf.cumsum(tf.nn.softmax(logits, axis=-1), axis=-1)
    return tf.reduce_sum(tf.cast(cdf[:, :-1] < u, tf.int64), axis=-1)


def _sample(tf: Any, leaf: Any, det: Any, noise: Any) -> Any:
    from rlpolicy.models.tf import tf_action_dist as d

    if isinstance(leaf, d.Categorical):
        out = _categorical(tf, leaf.inputs, noise[:, :1])
    elif isinstance(leaf, d.MultiCategorical):
        idx = tf.stack(
            [_categorical(tf, c.inputs, noise[:, j : j + 1]) for j, c in enumerate(leaf.cats)], axis=1
        )
        out = leaf._to_action_space(idx) if hasattr(leaf, "_to_action_space") else idx
    elif isinstance(leaf, d.SquashedGaussian):
        out = leaf._squash(leaf.mean + leaf.std * noise)
    elif isinstance(leaf, d.DiagGaussian):
        out = leaf.mean + leaf.std * noise
    else:
        return det
    return tf.reshape(tf.cast(out, det.dtype), tf.shape(det))


def _to_env(tf: Any, a: Any, space: gym.Space, plan: _Plan) -> Any:
    s: Any = space
    if not (pc.is_float_box(s) and (plan.normalize or plan.clip)):
        return a
    low = tf.constant(np.asarray(s.low, np.float32))
    high = tf.constant(np.asarray(s.high, np.float32))
    a = tf.cast(a, tf.float32)
    if plan.normalize:
        a = low + (a + 1.0) * (high - low) / 2.0
    return tf.clip_by_value(a, low, high)


# ---------------------------------------------------------------------- writing
def _reference(compute_actions: Callable[..., Any], plan: _Plan) -> Callable[..., Any]:
    """``(raw obs, states) -> (flat env actions, state outs, dist inputs)`` of the
    policy's ``compute_actions(explore=False)``, its actions mapped to the env."""
    leaf_spaces = [s for _, s in plan.act_leaves]

    def reference(obs: Any, state: List[np.ndarray]) -> Tuple[List[Any], List[Any], Any]:
        actions, state_out, extra = compute_actions(obs, state_batches=state or None, explore=False)
        flat = pc.env_actions(tree.flatten(actions), leaf_spaces, plan.normalize, plan.clip)
        return flat, [np.asarray(s) for s in state_out], extra["action_dist_inputs"]

    return reference


def _write_verified(
    export_dir: str,
    contract: pc.PipelineContract,
    write: Callable[[str], None],
    plan: _Plan,
    compute_actions: Callable[..., Any],
    batch_sizes: Sequence[int],
    steps: int,
) -> None:
    """Writes the artifact (``write(path)``) under a temporary name in
    ``export_dir``, loads it in its consumer, verifies it against
    ``compute_actions`` and installs it; on failure nothing is left (a
    directory made for it is removed again)."""
    reference = _reference(compute_actions, plan)
    created = not os.path.isdir(export_dir)
    os.makedirs(export_dir, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(dir=export_dir, prefix=".tmp-pipeline-")
    tmp = os.path.join(tmp_dir, contract.artifact)
    installed = False
    try:
        write(tmp)
        run = pc.onnx_runner(tmp) if contract.opset else _saved_model_runner(tmp, contract)
        contract.verified = pc.verify_pipeline(
            contract,
            run,
            reference,
            lambda k, seed: pc.sample_observations(plan.raw_space, k, seed),
            batch_sizes=batch_sizes,
            steps=steps,
        )
        contract.verified["consumer"] = _consumer_name(contract)
        pc.install_artifact(export_dir, tmp, contract)
        installed = True
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if created and not installed and os.path.isdir(export_dir) and not os.listdir(export_dir):
            os.rmdir(export_dir)


def _consumer_name(contract: pc.PipelineContract) -> str:
    if contract.opset:
        return "onnxruntime.InferenceSession"
    _, tf = _tf()
    return "tf.saved_model.load" if tf.executing_eagerly() else "tf.compat.v1.saved_model.load (Session)"


def _saved_model_runner(
    path: str, contract: pc.PipelineContract
) -> Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]:
    """The SavedModel's serving signature, loaded as a serving program would:
    ``tf.saved_model.load`` with eager on, TF1's loader into a session otherwise."""
    tf1, tf = _tf()
    in_names = [s.name for s in contract.inputs]
    if tf.executing_eagerly():
        loaded = tf.saved_model.load(path)
        signature = loaded.signatures[_SIGNATURE]

        def run(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
            got = signature(**{k: tf.constant(feeds[k]) for k in in_names})
            return {k: v.numpy() for k, v in got.items()}

        run.loaded = loaded  # type: ignore[attr-defined]  # (keeps its variables alive)
        return run
    graph = tf.Graph()
    sess = tf1.Session(graph=graph)
    with graph.as_default():
        meta = tf1.saved_model.load(sess, [_SERVE_TAG], path)
    sig = meta.signature_def[_SIGNATURE]
    fetches = {k: v.name for k, v in sig.outputs.items()}
    inputs = {k: v.name for k, v in sig.inputs.items()}

    def run_session(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return sess.run(fetches, {inputs[k]: feeds[k] for k in in_names if k in inputs})

    return run_session


def _graph_to_onnx(
    graph: Any, inputs: Dict[str, Any], outputs: Dict[str, Any], path: str, opset: int
) -> None:
    """Converts the (variable-free) pipeline graph with tf2onnx; its ONNX inputs
    and outputs carry the contract's names."""
    from rlpolicy.policy._tf.export import import_tf2onnx
    from rlpolicy.utils.tf_utils import tf_log_filtered

    tf2onnx = import_tf2onnx()
    tf1, tf = _tf()
    out_names = [t.name for t in outputs.values()]
    with tf_log_filtered("is deprecated and will be removed"):  # a TF1 graph tool, as in export.py
        graph_def = tf1.graph_util.extract_sub_graph(
            graph.as_graph_def(), [n.split(":")[0] for n in out_names]
        )
    present = {n.name for n in graph_def.node}
    in_names = [t.name for t in inputs.values() if t.op.name in present]
    with tf.Graph().as_default():
        model, _ = tf2onnx.convert.from_graph_def(
            graph_def, input_names=in_names, output_names=out_names, opset=int(opset)
        )
    _rename_onnx_io(
        model, dict(zip([t.name for t in inputs.values()], inputs)), dict(zip(out_names, outputs))
    )
    _save_onnx(model, path)


def _function_to_onnx(fn: Any, specs: List[Any], path: str, opset: int) -> None:
    """Converts the eager pipeline's ``tf.function`` (returning ``{name: tensor}``)
    with tf2onnx; its ONNX inputs and outputs carry the contract's names."""
    from rlpolicy.policy._tf.export import import_tf2onnx

    tf2onnx = import_tf2onnx()
    _, tf = _tf()
    concrete = fn.get_concrete_function()
    # (the graph outputs follow tf.nest's flattening of the returned dict: sorted keys)
    names = tf.nest.flatten({k: k for k in concrete.structured_outputs})
    outs = dict(zip(names, [t.name for t in concrete.outputs if t.dtype != tf.resource]))
    model, _ = tf2onnx.convert.from_function(fn, input_signature=specs, opset=int(opset))
    _rename_onnx_io(
        model, {f"{s.name}:0": s.name for s in specs}, {outs[k]: k for k in concrete.structured_outputs}
    )  # (contract order)
    _save_onnx(model, path)


def _rename_onnx_io(model: Any, inputs: Dict[str, str], outputs: Dict[str, str]) -> None:
    """Gives the ONNX graph's inputs and outputs the contract's names: each
    renamed input feeds an Identity to its old name, each output is an
    Identity of its old value (sub-graphs referring to old names stay valid)."""
    import onnx

    graph = model.graph
    new_nodes = []
    for value in graph.input:
        new = inputs.get(value.name)
        if new and new != value.name:
            new_nodes.append(
                onnx.helper.make_node("Identity", [new], [value.name], name=f"pipeline_in_{new}")
            )
            value.name = new
    for node in reversed(new_nodes):
        graph.node.insert(0, node)
    for value in graph.output:
        new = outputs.get(value.name)
        if new and new != value.name:
            graph.node.append(
                onnx.helper.make_node("Identity", [value.name], [new], name=f"pipeline_out_{new}")
            )
            value.name = new
    missing = [n for n in outputs.values() if n not in {v.name for v in graph.output}]
    if missing:
        raise RuntimeError(f"tf2onnx's model has no outputs for {missing}")
    # In the contract's order (the order ``outputs`` lists them).
    rank = {name: i for i, name in enumerate(outputs.values())}
    ordered = sorted(graph.output, key=lambda v: rank.get(v.name, len(rank)))
    copies = [type(v)() for v in ordered]
    for copy, value in zip(copies, ordered):
        copy.CopyFrom(value)
    del graph.output[:]
    graph.output.extend(copies)


def _save_onnx(model: Any, path: str) -> None:
    import onnx

    onnx.checker.check_model(model)
    onnx.save(model, path)


def _class_name(dist_class: Any) -> str:
    name = getattr(dist_class, "__name__", None) or getattr(
        getattr(dist_class, "func", None), "__name__", None
    )
    return str(name or repr(dist_class))


__all__ = [
    "GraphActingTensors",
    "export_graph_pipeline",
    "export_eager_pipeline",
    "observation_plan",
    "check_model_inputs",
]
