"""The exported action pipeline's contract, framework-neutral (no torch/tf here).

``policy.export_model(dir, onnx=..., pipeline=True)`` writes one artifact
that goes from raw observations to the actions an env takes (see
``docs/export_pipeline.md``). This module holds what every framework's
exporter shares:

* the names, dtypes and shapes of the artifact's inputs and outputs
  (:class:`TensorSpec`), derived from the spaces and config by
  :class:`PipelinePlan`, which also builds the contract and example inputs;
* the noise layout (:class:`NoiseSlice`): which columns of the ``noise``
  input are uniform draws and which standard-normal draws, per action
  component;
* the metadata file ``pipeline.json`` (:class:`PipelineContract`), with
  :meth:`PipelineContract.feeds` to build an input feed from a raw
  observation batch and :meth:`PipelineContract.draw_noise`;
* the verification loop (:func:`verify_pipeline`), which takes callables
  (run the loaded artifact; the policy's own ``compute_actions``) and raises
  :class:`PipelineMismatchError` when they disagree, and the write / load /
  verify / install sequence around it (:func:`export_verified`), to which each
  framework passes its write and load callables;
* :func:`env_actions`: the policy's actions mapped the way the samplers send
  them to the env (``normalize_actions`` / ``clip_actions``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.utils.spaces.repeated import Repeated

#: The metadata file written beside the artifact.
METADATA_FILE = "pipeline.json"
#: The artifact's file name per format.
ARTIFACT_FILES = {"torchscript": "pipeline.pt", "onnx": "pipeline.onnx", "savedmodel": "pipeline_savedmodel"}
#: Version of the contract below (bumped on incompatible changes).
CONTRACT_VERSION = 1
#: Name of the input carrying the sampled path's random draws.
NOISE_INPUT = "noise"
#: Name of the output carrying the action distribution's inputs.
DIST_INPUTS_OUTPUT = "action_dist_inputs"
#: Observation batch sizes the export is checked at (it is traced at another one).
VERIFY_BATCH_SIZES = (1, 3, 8)
#: Batch size the artifact is traced / exported at.
TRACE_BATCH_SIZE = 2

_FLOAT_ATOL = 1e-4
_FLOAT_RTOL = 1e-4


class PipelineMismatchError(RuntimeError):
    """The exported pipeline does not reproduce the policy's ``compute_actions``."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the artifact.

    Attributes:
        name: The graph input/output name (TorchScript: its position in
            ``PipelineContract.inputs`` / ``outputs``).
        dtype: numpy dtype name ("float32", "int64", "int32").
        shape: The shape; ``None`` marks the dynamic batch axis (axis 0).
        role: "obs", "state", "seq_lens", "noise" (inputs); "action",
            "sampled_action", "dist_inputs", "state" (outputs).
        path: Where the leaf sits in the nested observation/action (Dict keys
            and Tuple indices); ``[]`` for a non-nested space.
        space: The leaf's space, as ``repr``.
    """

    name: str
    dtype: str
    shape: List[Optional[int]]
    role: str
    path: List[Any] = field(default_factory=list)
    space: str = ""


@dataclass(frozen=True)
class NoiseSlice:
    """Columns ``[start, start + size)`` of the ``noise`` input.

    Attributes:
        start, size: The columns.
        kind: "uniform" (draws in [0, 1): one per categorical sub-action,
            inverse-CDF sampling) or "normal" (standard normal draws: one per
            Gaussian dimension, ``mean + std * noise``).
        action: The deterministic action output this slice samples for.
        distribution: The action distribution class's name.
    """

    start: int
    size: int
    kind: str
    action: str
    distribution: str


def observation_leaves(space: gym.Space) -> List[Tuple[Tuple[Any, ...], gym.Space]]:
    """``(path, leaf space)`` of a raw observation space in its preprocessor's order.

    Dict spaces in their own key order, Tuple spaces in index order: the
    order in which RLlib's flattening preprocessors concatenate the parts.

    Raises:
        ValueError: For a Repeated (variable-length) part: a fixed-shape
            artifact cannot take it.
    """
    out: List[Tuple[Tuple[Any, ...], gym.Space]] = []

    def walk(s: gym.Space, path: Tuple[Any, ...]) -> None:
        if isinstance(s, Repeated):
            raise ValueError(
                f"observation{_path_str(path)}: Repeated (variable-length) "
                "observations cannot be exported as a pipeline"
            )
        if isinstance(s, gym.spaces.Dict):
            for k, sub in s.spaces.items():
                walk(sub, path + (k,))
        elif isinstance(s, gym.spaces.Tuple):
            for i, sub in enumerate(s.spaces):
                walk(sub, path + (i,))
        else:
            out.append((path, s))

    walk(space, ())
    return out


def action_leaves(space_struct: Any) -> List[Tuple[Tuple[Any, ...], gym.Space]]:
    """``(path, leaf space)`` of an action space (or its base struct) in
    ``tree.flatten`` order: the order of the flat child distributions and of
    ``tree.flatten(actions)``."""
    struct = _base_struct(space_struct)
    return [(tuple(p), s) for p, s in tree.flatten_with_path(struct)]


def leaf_names(prefix: str, n: int, nested: bool) -> List[str]:
    """``[prefix]`` for a non-nested space, else ``[prefix_0, ..., prefix_{n-1}]``."""
    return [prefix] if not nested else [f"{prefix}_{i}" for i in range(n)]


def obs_input_dtype(space: gym.Space) -> str:
    """The input dtype of an observation leaf: int64 for Discrete/MultiDiscrete/
    MultiBinary, float32 for everything else (Box leaves of any dtype)."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return "int64"
    return "float32"


def is_float_box(space: gym.Space) -> bool:
    """Whether actions of ``space`` are unsquashed/clipped (a float Box)."""
    return isinstance(space, gym.spaces.Box) and space.dtype in (np.float32, np.float64)


def check_action_mapping(space_struct: Any, normalize_actions: bool) -> None:
    """Raises ValueError if ``normalize_actions`` would unsquash onto a Box
    with infinite bounds (``low + (a + 1) * (high - low) / 2`` is undefined)."""
    if not normalize_actions:
        return
    for path, leaf in action_leaves(space_struct):
        s: Any = leaf
        if is_float_box(s) and not (np.all(np.isfinite(s.low)) and np.all(np.isfinite(s.high))):
            raise ValueError(
                f"action{_path_str(path)}: normalize_actions=True unsquashes onto the bounds "
                f"of {s}, which are not finite; set normalize_actions=False (and clip_actions "
                "as wanted) to export this policy's pipeline"
            )


def env_actions(
    flat_actions: Sequence[Any], leaf_spaces: Sequence[gym.Space], normalize_actions: bool, clip_actions: bool
) -> List[np.ndarray]:
    """The policy's (flat, batched) actions as the samplers send them to the env:
    float Box components unsquashed from [-1, 1] onto the bounds (and clipped)
    with ``normalize_actions``, else clipped with ``clip_actions``."""
    from rlpolicy.utils.spaces.space_utils import clip_action, unsquash_action

    out = []
    for a, s in zip(flat_actions, leaf_spaces):
        a = np.asarray(a)
        if is_float_box(s):
            if normalize_actions:
                a = unsquash_action(a, s)
            elif clip_actions:
                a = clip_action(a, s)
        out.append(np.asarray(a))
    return out


def sample_observations(space: gym.Space, n: int, seed: int) -> Any:
    """``n`` observations drawn from ``space`` (seeded), batched leaf by leaf
    (a dict / tuple of arrays for Dict / Tuple spaces)."""
    space.seed(seed)
    rows = [space.sample() for _ in range(n)]

    def stack(s: gym.Space, items: List[Any]) -> Any:
        if isinstance(s, gym.spaces.Dict):
            return {k: stack(sub, [r[k] for r in items]) for k, sub in s.spaces.items()}
        if isinstance(s, gym.spaces.Tuple):
            return tuple(stack(sub, [r[i] for r in items]) for i, sub in enumerate(s.spaces))
        return np.stack([np.asarray(r) for r in items])

    return stack(space, rows)


@dataclass
class PipelineContract:
    """What ``pipeline.json`` holds: the artifact's interface and how it was checked.

    Attributes:
        format: "torchscript", "onnx" or "savedmodel".
        artifact: The artifact's file (or directory) name beside the json.
        framework: The exporting policy's framework.
        opset: The ONNX opset (None for other formats).
        inputs: The inputs, in positional order (TorchScript calls take them
            positionally in this order).
        outputs: The outputs, in order.
        noise: The noise layout (empty: nothing to sample, the ``noise``
            input is still there, one ignored column).
        noise_dim: Width of the ``noise`` input.
        observation_space, action_space: ``repr`` of the raw spaces.
        normalize_actions, clip_actions: How float Box actions are mapped to
            the env (both outputs are mapped the same way).
        initial_state: The RNN's initial state (one list per state tensor,
            without batch axis); empty for models without state.
        dist_class: The action distribution class's name.
        exploration: The policy's exploration type; the sampled output is
            the distribution's sample (what StochasticSampling does), not
            other exploration strategies (epsilon-greedy etc.).
        verified: How the export was checked (batch sizes, steps, max diff).
    """

    format: str
    artifact: str
    framework: str
    opset: Optional[int]
    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    noise: List[NoiseSlice]
    noise_dim: int
    observation_space: str
    action_space: str
    normalize_actions: bool
    clip_actions: bool
    initial_state: List[Any]
    dist_class: str
    exploration: str = ""
    verified: Dict[str, Any] = field(default_factory=dict)
    version: int = CONTRACT_VERSION

    # ------------------------------------------------------------------ names
    def names(self, role: str, outputs: bool = False) -> List[str]:
        """Names of the inputs (or ``outputs``) with ``role``, in order."""
        return [s.name for s in (self.outputs if outputs else self.inputs) if s.role == role]

    # ------------------------------------------------------------------ feeds
    def draw_noise(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """A ``noise`` input [batch_size, noise_dim]: uniform [0, 1) draws in the
        uniform slices, standard normals in the normal ones."""
        noise = np.zeros((batch_size, self.noise_dim), np.float32)
        for s in self.noise:
            cols = slice(s.start, s.start + s.size)
            noise[:, cols] = (
                rng.random((batch_size, s.size))
                if s.kind == "uniform"
                else rng.standard_normal((batch_size, s.size))
            )
        return noise

    def feeds(
        self, obs: Any, state: Optional[Sequence[Any]] = None, noise: Optional[np.ndarray] = None
    ) -> Dict[str, np.ndarray]:
        """The input feed ``{name: array}`` for a raw observation batch.

        Args:
            obs: A batch of raw observations: an array, or for Dict / Tuple
                spaces a dict / tuple of batched leaves.
            state: The RNN state batches (None: the initial state for every row).
            noise: The ``noise`` input (None: zeros; the sampled output is then
                the distributions' medians for Gaussians).

        Raises:
            ValueError: A missing Dict key / Tuple item, or a leaf whose shape
                does not fit its input.
        """
        feed: Dict[str, np.ndarray] = {}
        batch = None
        for spec in self.inputs:
            if spec.role != "obs":
                continue
            leaf = obs
            for key in spec.path:
                try:
                    leaf = leaf[key]
                except (KeyError, IndexError, TypeError) as err:
                    raise ValueError(
                        f"observation{_path_str(tuple(spec.path))}: missing from "
                        f"the observation batch ({type(obs).__name__})"
                    ) from err
            arr = np.asarray(leaf).astype(spec.dtype, copy=False)
            if arr.ndim != len(spec.shape) or list(arr.shape[1:]) != spec.shape[1:]:
                raise ValueError(
                    f"input {spec.name!r} (observation{_path_str(tuple(spec.path))}): "
                    f"shape {arr.shape} does not fit {spec.shape} (None: batch)"
                )
            if batch is None:
                batch = arr.shape[0]
            elif arr.shape[0] != batch:
                raise ValueError(
                    f"input {spec.name!r}: batch size {arr.shape[0]}, the other "
                    f"observation leaves have {batch}"
                )
            feed[spec.name] = arr
        assert batch is not None
        names = self.names("state")
        if state is None:
            state = [np.repeat(np.asarray(s, np.float32)[None], batch, axis=0) for s in self.initial_state]
        if len(state) != len(names):
            raise ValueError(f"{len(state)} state batches given, the pipeline takes {len(names)}")
        for name, s in zip(names, state):
            feed[name] = np.asarray(s, np.float32)
        if self.names("seq_lens"):
            feed["seq_lens"] = np.ones(batch, np.int32)
        if noise is None:
            noise = np.zeros((batch, self.noise_dim), np.float32)
        noise = np.asarray(noise, np.float32)
        if noise.shape != (batch, self.noise_dim):
            raise ValueError(f"input 'noise': shape {noise.shape}, expected ({batch}, {self.noise_dim})")
        feed[NOISE_INPUT] = noise
        return feed

    def unflatten(self, outputs: Dict[str, np.ndarray], role: str = "action") -> Any:
        """The nested actions from the flat ``role`` outputs ("action" or
        "sampled_action"): a dict / tuple for Dict / Tuple action spaces."""
        specs = [s for s in self.outputs if s.role == role]
        if len(specs) == 1 and not specs[0].path:
            return outputs[specs[0].name]
        root: Dict[Any, Any] = {}
        for spec in specs:
            node = root
            for key in spec.path[:-1]:
                node = node.setdefault(key, {})
            node[spec.path[-1]] = outputs[spec.name]
        return _dicts_to_tuples(root)

    # ------------------------------------------------------------------ file
    def to_json(self) -> Dict[str, Any]:
        """A JSON-able dict of the contract."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "PipelineContract":
        """The contract of a ``to_json`` dict.

        Raises:
            ValueError: For another contract version.
        """
        if data.get("version") != CONTRACT_VERSION:
            raise ValueError(
                f"{METADATA_FILE}: contract version {data.get('version')!r}, "
                f"this rlpolicy reads version {CONTRACT_VERSION}"
            )
        data = dict(data)
        data["inputs"] = [TensorSpec(**s) for s in data["inputs"]]
        data["outputs"] = [TensorSpec(**s) for s in data["outputs"]]
        data["noise"] = [NoiseSlice(**s) for s in data["noise"]]
        return cls(**data)

    @classmethod
    def read(cls, export_dir: str) -> "PipelineContract":
        """The contract in ``export_dir/pipeline.json``."""
        with open(os.path.join(export_dir, METADATA_FILE), encoding="utf-8") as f:
            return cls.from_json(json.load(f))


@dataclass
class PipelinePlan:
    """What an exported pipeline takes and returns, from the policy's spaces and
    config (``policy._pipeline_inputs.pipeline_plan`` makes it); every framework's
    exporter builds its contract and example inputs from it.

    Attributes:
        raw_space: The raw observation space the artifact takes.
        obs_plan: Per observation leaf, how it becomes part of the model's
            input: ``("raw" | "float" | "ram", None)`` or ``("one_hot", (sizes, starts))``.
        action_space: The policy's action space.
        init: The model's initial state (float32 arrays, no batch axis).
        normalize, clip: ``normalize_actions`` / ``clip_actions``.
    """

    raw_space: gym.Space
    obs_plan: List[Tuple[str, Any]]
    action_space: gym.Space
    init: List[np.ndarray]
    normalize: bool
    clip: bool

    def __post_init__(self) -> None:
        self.obs_leaves = observation_leaves(self.raw_space)
        self.act_leaves = action_leaves(self.action_space)
        self.nested_act = not (len(self.act_leaves) == 1 and not self.act_leaves[0][0])

    def input_specs(self) -> List[TensorSpec]:
        """The contract's inputs but ``noise``."""
        nested = not (len(self.obs_leaves) == 1 and not self.obs_leaves[0][0])
        names = leaf_names("obs", len(self.obs_leaves), nested)
        specs = [
            TensorSpec(n, obs_input_dtype(s), [None, *map(int, s.shape or ())], "obs", list(p), repr(s))
            for n, (p, s) in zip(names, self.obs_leaves)
        ]
        specs += [
            TensorSpec(f"state_in_{i}", "float32", [None, *s.shape], "state") for i, s in enumerate(self.init)
        ]
        if self.init:
            specs.append(TensorSpec("seq_lens", "int32", [None], "seq_lens"))
        return specs

    def example_inputs(self, batch: int) -> List[np.ndarray]:
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

    def output_names(self) -> List[str]:
        """The outputs in contract order: actions, sampled actions, dist inputs, states."""
        n = len(self.act_leaves)
        return (
            leaf_names("actions", n, self.nested_act)
            + leaf_names("sampled_actions", n, self.nested_act)
            + [DIST_INPUTS_OUTPUT]
            + [f"state_out_{i}" for i in range(len(self.init))]
        )

    def state_outs(self, state_out: Optional[Sequence[Any]]) -> List[Any]:
        """The model's state outs as the pipeline returns them (none for a
        model without initial state).

        Raises:
            ValueError: If their number is not the initial state's.
        """
        if not self.init:
            return []
        if len(state_out or ()) != len(self.init):
            raise ValueError(
                f"the model returned {len(state_out or ())} state outs for {len(self.init)} initial state tensors"
            )
        return list(state_out or ())

    def noise_layout(
        self, leaf_dists: Sequence[Any], noise_kind: Callable[[Any], Tuple[str, int]]
    ) -> List[NoiseSlice]:
        """Per action leaf, its columns of the ``noise`` input (``size`` 0: it
        samples nothing); ``noise_kind(dist) -> (kind, columns)``."""
        out, start = [], 0
        for name, leaf in zip(self.output_names(), leaf_dists):
            kind, size = noise_kind(leaf)
            out.append(NoiseSlice(start, size, kind, name, type(leaf).__name__))
            start += size
        return out

    def contract(
        self,
        noise: List[NoiseSlice],
        example_outputs: Sequence[np.ndarray],
        native_format: str,
        framework: str,
        onnx: Optional[int],
        dist_class: Any,
        exploration: str,
    ) -> PipelineContract:
        """The contract, the outputs' dtypes and shapes taken from an example run."""
        n = len(self.act_leaves)
        roles = ["action"] * n + ["sampled_action"] * n + ["dist_inputs"] + ["state"] * len(self.init)
        leaves = list(self.act_leaves) * 2 + [((), None)] * (1 + len(self.init))
        outputs = [
            TensorSpec(
                name,
                np.dtype(a.dtype).name,
                [None, *a.shape[1:]],
                role,
                list(p),
                "" if s is None else repr(s),
            )
            for name, a, role, (p, s) in zip(self.output_names(), example_outputs, roles, leaves)
        ]
        fmt = "onnx" if onnx else native_format
        return PipelineContract(
            format=fmt,
            artifact=ARTIFACT_FILES[fmt],
            framework=framework,
            opset=int(onnx) if onnx else None,
            inputs=self.input_specs()
            + [TensorSpec(NOISE_INPUT, "float32", [None, noise_width(noise)], "noise")],
            outputs=outputs,
            noise=[s for s in noise if s.size],
            noise_dim=noise_width(noise),
            observation_space=repr(self.raw_space),
            action_space=repr(self.action_space),
            normalize_actions=self.normalize,
            clip_actions=self.clip,
            initial_state=[s.tolist() for s in self.init],
            dist_class=_class_name(dist_class),
            exploration=exploration,
        )


def noise_width(noise: Sequence[NoiseSlice]) -> int:
    """Width of the ``noise`` input: its sampled columns, at least one."""
    return max(1, sum(s.size for s in noise))


def leaf_distributions(dist: Any, num_actions: int) -> List[Any]:
    """The action distribution's per-leaf distributions, in ``tree.flatten`` order.

    Raises:
        ValueError: If their number is not the action space's.
    """
    children = getattr(dist, "flat_child_distributions", None)
    leaves = list(children) if children is not None else [dist]
    if len(leaves) != num_actions:
        raise ValueError(
            f"the action distribution {type(dist).__name__} has {len(leaves)} "
            f"components, the action space {num_actions}"
        )
    return leaves


def export_verified(
    export_dir: str,
    plan: PipelinePlan,
    contract: PipelineContract,
    write: Callable[[str], None],
    load: Callable[[str, PipelineContract], Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]],
    consumer: str,
    compute_actions: Callable[..., Any],
    batch_sizes: Sequence[int],
    steps: int,
) -> PipelineContract:
    """Writes the artifact (``write(path)``) under a temporary name in
    ``export_dir``, loads it in its consumer (``load(path, contract) -> run``;
    onnxruntime for ONNX), verifies it against the policy's
    ``compute_actions(explore=False)`` and installs it; on failure nothing is
    left (a directory made for it is removed again)."""
    leaf_spaces = [s for _, s in plan.act_leaves]

    def reference(obs: Any, state: List[np.ndarray]) -> Tuple[List[Any], List[Any], Any]:
        actions, state_out, extra = compute_actions(obs, state_batches=state or None, explore=False)
        flat = env_actions(tree.flatten(actions), leaf_spaces, plan.normalize, plan.clip)
        return flat, [np.asarray(s) for s in state_out], extra[DIST_INPUTS_OUTPUT]

    created = not os.path.isdir(export_dir)
    os.makedirs(export_dir, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(dir=export_dir, prefix=".tmp-pipeline-")
    tmp = os.path.join(tmp_dir, contract.artifact)
    installed = False
    try:
        write(tmp)
        run = onnx_runner(tmp) if contract.opset else load(tmp, contract)
        contract.verified = verify_pipeline(
            contract,
            run,
            reference,
            lambda k, seed: sample_observations(plan.raw_space, k, seed),
            batch_sizes=batch_sizes,
            steps=steps,
        )
        contract.verified["consumer"] = "onnxruntime.InferenceSession" if contract.opset else consumer
        install_artifact(export_dir, tmp, contract)
        installed = True
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if created and not installed and os.path.isdir(export_dir) and not os.listdir(export_dir):
            os.rmdir(export_dir)
    return contract


def install_artifact(export_dir: str, artifact_tmp: str, contract: PipelineContract) -> None:
    """Moves a verified artifact (file or directory) into ``export_dir`` under
    ``contract.artifact`` and writes ``pipeline.json`` beside it (each written
    under a temporary name first, then renamed into place). A pipeline artifact
    of another format already there is removed: the directory holds one
    pipeline export, the one ``pipeline.json`` describes."""
    os.makedirs(export_dir, exist_ok=True)
    final = os.path.join(export_dir, contract.artifact)
    fd, meta_tmp = tempfile.mkstemp(dir=export_dir, prefix=".tmp-", suffix=METADATA_FILE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(contract.to_json(), f, indent=1)
        if os.path.isdir(final):
            shutil.rmtree(final)
        os.replace(artifact_tmp, final)
        os.replace(meta_tmp, os.path.join(export_dir, METADATA_FILE))
        for name in ARTIFACT_FILES.values():
            other = os.path.join(export_dir, name)
            if name != contract.artifact and os.path.isdir(other):
                shutil.rmtree(other)
            elif name != contract.artifact and os.path.exists(other):
                os.remove(other)
    finally:
        if os.path.exists(meta_tmp):
            os.remove(meta_tmp)


def verify_pipeline(
    contract: PipelineContract,
    run: Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]],
    reference: Callable[[Any, List[np.ndarray]], Tuple[List[np.ndarray], List[np.ndarray], np.ndarray]],
    sample_obs: Callable[[int, int], Any],
    batch_sizes: Sequence[int] = VERIFY_BATCH_SIZES,
    steps: int = 2,
    seed: int = 0,
) -> Dict[str, Any]:
    """Runs the loaded artifact against the policy and raises if they differ.

    Args:
        contract: The artifact's contract.
        run: ``feeds -> {output name: array}``: the artifact in its consumer.
        reference: ``(raw obs batch, state batches) -> (flat env actions,
            state outs, dist inputs)``: the policy's ``compute_actions(explore=False)``,
            its actions mapped by :func:`env_actions`.
        sample_obs: ``(n, seed) -> raw observation batch``.
        batch_sizes: Batch sizes to check.
        steps: Steps per batch size (the state outs feed the next step).
        seed: Seed of the observation and noise draws.

    Returns:
        ``{"batch_sizes", "steps", "max_abs_diff"}``.

    Raises:
        PipelineMismatchError: A deterministic action, the distribution inputs
            or a state out differs (discrete actions exactly, floats beyond
            atol/rtol 1e-4), or an output is missing / has the wrong dtype or
            shape.
    """
    rng = np.random.default_rng(seed)
    actions = contract.names("action", outputs=True)
    sampled = contract.names("sampled_action", outputs=True)
    state_outs = contract.names("state", outputs=True)
    specs = {s.name: s for s in contract.outputs}
    max_diff = 0.0
    for n in batch_sizes:
        state: Optional[List[np.ndarray]] = None
        for step in range(steps):
            where = f"batch size {n}, step {step}"
            obs = sample_obs(n, seed + 1000 * n + step)
            feeds = contract.feeds(obs, state, contract.draw_noise(n, rng))
            want_actions, want_states, want_dist = reference(obs, [feeds[k] for k in contract.names("state")])
            got = run(feeds)
            missing = [s.name for s in contract.outputs if s.name not in got]
            if missing:
                raise PipelineMismatchError(f"{where}: the artifact returned no {missing}")
            for name, want in zip(actions, want_actions):
                max_diff = max(max_diff, _compare(name, got[name], want, specs[name], where))
            for name, want in zip(state_outs, want_states):
                max_diff = max(max_diff, _compare(name, got[name], want, specs[name], where))
            max_diff = max(
                max_diff,
                _compare(
                    DIST_INPUTS_OUTPUT, got[DIST_INPUTS_OUTPUT], want_dist, specs[DIST_INPUTS_OUTPUT], where
                ),
            )
            for name, det in zip(sampled, actions):
                g = np.asarray(got[name])
                if g.shape != np.shape(got[det]) or g.dtype != np.dtype(specs[name].dtype):
                    raise PipelineMismatchError(
                        f"{where}: {name!r} is {g.dtype}{list(g.shape)}, its deterministic "
                        f"twin {det!r} {np.asarray(got[det]).dtype}{list(np.shape(got[det]))}"
                    )
            state = [np.asarray(got[k]) for k in state_outs]
    return {"batch_sizes": list(batch_sizes), "steps": steps, "max_abs_diff": max_diff}


def _compare(name: str, got: Any, want: Any, spec: TensorSpec, where: str) -> float:
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != np.dtype(spec.dtype):
        raise PipelineMismatchError(
            f"{where}: output {name!r} has dtype {got.dtype}, the contract says {spec.dtype}"
        )
    if got.shape != want.shape:
        raise PipelineMismatchError(
            f"{where}: output {name!r} has shape {got.shape}, compute_actions gives {want.shape}"
        )
    if got.size == 0:
        return 0.0
    if got.dtype.kind in "iub":
        bad = got != want
        if bad.any():
            raise PipelineMismatchError(
                f"{where}: output {name!r} differs from compute_actions(explore=False) in "
                f"{int(bad.sum())} of {got.size} entries"
            )
        return 0.0
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    limit = _FLOAT_ATOL + _FLOAT_RTOL * np.abs(want.astype(np.float64))
    if not np.all(diff <= limit):
        raise PipelineMismatchError(
            f"{where}: output {name!r} differs from compute_actions(explore=False): "
            f"max |difference| {float(np.max(diff)):.3g}"
        )
    return float(np.max(diff))


def _base_struct(space: Any) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _base_struct(s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_base_struct(s) for s in space.spaces)
    return space


def _dicts_to_tuples(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(isinstance(k, int) for k in node):
        return tuple(_dicts_to_tuples(node[i]) for i in range(len(node)))
    return {k: _dicts_to_tuples(v) for k, v in node.items()}


def _path_str(path: Tuple[Any, ...]) -> str:
    return "".join(f"[{k!r}]" for k in path)


def _class_name(dist_class: Any) -> str:
    """``Categorical`` for the class or a ``functools.partial`` of it."""
    name = getattr(dist_class, "__name__", None) or getattr(
        getattr(dist_class, "func", None), "__name__", None
    )
    return str(name or repr(dist_class))


def onnx_runner(path: str) -> Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]:
    """Runs an exported ONNX pipeline in onnxruntime (CPU): feeds by input name
    in, ``{output name: array}`` out (what :func:`verify_pipeline` calls)."""
    try:
        import onnxruntime as ort
    except ImportError as err:
        raise ImportError(
            "verifying an ONNX pipeline export needs onnxruntime: pip install 'rlpolicy[onnx]'"
        ) from err
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    outs = [o.name for o in session.get_outputs()]

    def run(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return dict(zip(outs, session.run(None, {k: feeds[k] for k in names})))

    return run
