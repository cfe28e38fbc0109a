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
the policy's ``compute_actions(explore=False)`` (``pc.export_verified``).
Helpers here take data (session, tensors, model, spaces, config, callables),
never the policy. TensorFlow, tf2onnx and onnx are imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core import pipeline_contract as pc
from rlpolicy.policy._pipeline_inputs import LeafPlan as _LeafPlan
from rlpolicy.policy._pipeline_inputs import pipeline_plan

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
    from rlpolicy.policy._tf.export import build_signature_def_map, freeze_serving_graph

    tf1, tf = _tf()
    if tensors.dist_inputs is None:
        raise ValueError(
            "the policy computes actions with an action_sampler_fn (no "
            "distribution inputs); its action pipeline cannot be exported"
        )
    plan = pipeline_plan(model, observation_space, action_space, config, initial_state)
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
        placeholders = [
            tf1.placeholder(tf.as_dtype(s.dtype), s.shape, name=s.name) for s in plan.input_specs()
        ]

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
        noise = tf1.placeholder(tf.float32, [None, pc.noise_width(body.noise)], name=pc.NOISE_INPUT)
        names = plan.output_names()
        outputs = [tf.identity(t, name=name) for t, name in zip(body.finish(noise), names)]
        with tf1.Session(graph=graph) as sess:  # (the outputs' dtypes and shapes, run once)
            example = plan.example_inputs(pc.TRACE_BATCH_SIZE)
            example.append(np.zeros([pc.TRACE_BATCH_SIZE, pc.noise_width(body.noise)], np.float32))
            ran = sess.run(outputs, dict(zip([*placeholders, noise], example)))
    in_map = dict(zip([s.name for s in plan.input_specs()] + [pc.NOISE_INPUT], [*placeholders, noise]))
    out_map = dict(zip(names, outputs))

    def write(path: str) -> None:
        if onnx:
            _graph_to_onnx(graph, in_map, out_map, path, onnx)
            return
        with graph.as_default(), tf1.Session(graph=graph) as sess:
            builder = tf1.saved_model.builder.SavedModelBuilder(path)
            signatures = build_signature_def_map(in_map, out_map)
            builder.add_meta_graph_and_variables(sess, [_SERVE_TAG], signature_def_map=signatures)
            builder.save()

    contract = plan.contract(body.noise, ran, "savedmodel", "tf", onnx, dist_class, exploration)
    return _export_verified(export_dir, plan, contract, write, compute_actions, batch_sizes, steps)


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
    model_forward: Callable[..., Tuple[Any, List[Any], Dict[str, Any]]],
    dist_inputs_fn: Optional[Callable[..., Tuple[Any, Any, List[Any]]]] = None,
    batch_sizes: Sequence[int] = pc.VERIFY_BATCH_SIZES,
    steps: int = 2,
) -> pc.PipelineContract:
    """Exports, verifies and installs an eager policy's action pipeline.

    Args:
        model: The policy's model (a ``TFModelV2`` or Keras model).
        dist_class: The policy's action distribution class.
        model_forward: ``(model, input_dict, state_batches, seq_lens) ->
            (dist_inputs, state_outs, extra_fetches)``, the eager policy's
            forward pass (``eager_tf_policy.model_forward``).
        dist_inputs_fn: ``(model, input_dict, state_batches, seq_lens) ->
            (dist_inputs, dist_class, state_outs)`` replacing the model call
            (the policy's ``action_distribution_fn`` with explore off).
        Others: as :func:`export_graph_pipeline`.

    Raises:
        ValueError, PipelineMismatchError: As :func:`export_graph_pipeline`.
    """
    from rlpolicy.policy.sample_batch import SampleBatch

    _, tf = _tf()  # (EagerTFPolicy's public methods run in eager mode)
    plan = pipeline_plan(model, observation_space, action_space, config, initial_state)

    def forward(obs: Any, states: List[Any], seq_lens: Any) -> Tuple[Any, Any, List[Any]]:
        input_dict = SampleBatch({SampleBatch.OBS: obs}, _is_training=False)
        if dist_inputs_fn is not None:
            dist_inputs, cls, state_out = dist_inputs_fn(model, input_dict, states, seq_lens)
            return dist_inputs, cls, list(state_out or [])
        dist_inputs, state_out, _ = model_forward(model, input_dict, states, seq_lens)
        return dist_inputs, dist_class, list(state_out or [])

    # One eager run fixes the noise layout (and so the noise input's width).
    example = [tf.constant(a) for a in plan.example_inputs(pc.TRACE_BATCH_SIZE)]
    noise = _pipeline_body(tf, plan, example, forward, model).noise
    in_specs = [tf.TensorSpec(s.shape, tf.as_dtype(s.dtype), name=s.name) for s in plan.input_specs()]
    in_specs.append(tf.TensorSpec([None, pc.noise_width(noise)], tf.float32, name=pc.NOISE_INPUT))
    names = plan.output_names()

    def flat(*args: Any) -> Dict[str, Any]:
        body = _pipeline_body(tf, plan, list(args[:-1]), forward, model)
        return dict(zip(names, body.finish(args[-1])))

    # (One trace serves the metadata, the SavedModel signature and tf2onnx.)
    fn = tf.function(flat, input_signature=in_specs, autograph=False)
    eager_out = fn(*example, tf.zeros([pc.TRACE_BATCH_SIZE, pc.noise_width(noise)]))

    def write(path: str) -> None:
        if onnx:
            _function_to_onnx(fn, in_specs, path, onnx)
            return
        module = tf.Module()
        module.model_variables = list(model.variables())
        module.serve = fn
        tf.saved_model.save(module, path, signatures={_SIGNATURE: fn.get_concrete_function()})

    outs = [eager_out[k].numpy() for k in names]
    contract = plan.contract(noise, outs, "savedmodel", "tf2", onnx, dist_class, exploration)
    return _export_verified(export_dir, plan, contract, write, compute_actions, batch_sizes, steps)


# ---------------------------------------------------------------------- the body
@dataclass
class _Body:
    """The pipeline up to the noise input: its model part is built, the
    sampled actions are built by :meth:`finish` once the noise tensor exists."""

    tf: Any
    plan: pc.PipelinePlan
    leaf_dists: List[Any]
    det: List[Any]
    dist_inputs: Any
    state_out: List[Any]
    noise: List[pc.NoiseSlice]

    def finish(self, noise: Any) -> List[Any]:
        """All outputs in contract order: actions, sampled actions, dist inputs, states."""
        tf, plan = self.tf, self.plan
        sampled = [
            _sample(tf, leaf, det, noise[:, sl.start : sl.start + sl.size])
            for leaf, det, sl in zip(self.leaf_dists, self.det, self.noise)
        ]
        dist_inputs = self.dist_inputs
        if not any(sl.size for sl in self.noise):
            # Nothing samples: the noise input still feeds the graph (ONNX drops
            # unused inputs), adding 0.
            dist_inputs = dist_inputs + 0.0 * noise[:, :1]
        det = [_to_env(tf, a, s, plan) for a, (_, s) in zip(self.det, plan.act_leaves)]
        sampled = [_to_env(tf, a, s, plan) for a, (_, s) in zip(sampled, plan.act_leaves)]
        return [*det, *sampled, dist_inputs, *self.state_out]


def _pipeline_body(tf: Any, plan: pc.PipelinePlan, inputs: List[Any], forward: _Forward, model: Any) -> _Body:
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
    leaves = pc.leaf_distributions(dist, len(plan.act_leaves))
    det = tree.flatten(dist.deterministic_sample())
    state_out = plan.state_outs(state_out)
    return _Body(tf, plan, leaves, det, dist_inputs, state_out, plan.noise_layout(leaves, _noise_kind))


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


def _to_env(tf: Any, a: Any, space: gym.Space, plan: pc.PipelinePlan) -> Any:
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
def _export_verified(
    export_dir: str,
    plan: pc.PipelinePlan,
    contract: pc.PipelineContract,
    write: Callable[[str], None],
    compute_actions: Callable[..., Any],
    batch_sizes: Sequence[int],
    steps: int,
) -> pc.PipelineContract:
    """``pc.export_verified`` with a SavedModel loaded as a serving program would."""
    _, tf = _tf()
    consumer = "tf.saved_model.load" if tf.executing_eagerly() else "tf.compat.v1.saved_model.load (Session)"
    return pc.export_verified(
        export_dir, plan, contract, write, _saved_model_runner, consumer, compute_actions, batch_sizes, steps
    )


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


__all__ = ["GraphActingTensors", "export_graph_pipeline", "export_eager_pipeline"]
