"""The whole action pipeline of a torch policy as one TorchScript / ONNX artifact.

``TorchPolicy.export_model(dir, onnx=None, pipeline=True)`` lands here. The
artifact goes from raw observations to env actions:

1. observation preprocessing: Dict/Tuple observations flattened and
   concatenated in the preprocessor's order, Discrete/MultiDiscrete parts
   one-hot encoded (as ``rlpolicy.policy._obs_prep`` does on the numpy side);
2. the model, with RNN state in/out;
3. deterministic action selection (the distribution's
   ``deterministic_sample``, what ``compute_actions(explore=False)`` returns)
   and sampled selection from an explicit ``noise`` input (inverse-CDF for
   categoricals, ``mean + std * noise`` for Gaussians);
4. the mapping to the env: float Box actions unsquashed (``normalize_actions``)
   or clipped (``clip_actions``).

The contract (names, dtypes, noise layout, ``pipeline.json``) and the
verification loop live in ``rlpolicy._core.pipeline_contract``; see
``docs/export_pipeline.md``. Helpers here take data (model, distribution
class, spaces, config, a ``compute_actions`` callable), never the policy.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core import pipeline_contract as pc
from rlpolicy.policy._pipeline_inputs import LeafPlan as _LeafPlan
from rlpolicy.policy._pipeline_inputs import check_model_inputs, observation_plan
from rlpolicy.policy._torch.export import onnx_exporter_kwargs
from rlpolicy.utils.framework import try_import_torch

torch, nn = try_import_torch()
# A name mypy accepts as a base class (nn is a variable here); object without torch.
_Module: Any = nn.Module if nn is not None else object

#: Observation leaf plans: (kind, data) with kind "float" (flattened), "ram"
#: (Atari RAM scaling), "one_hot" (data: (sizes, starts)) or "raw" (passed to
#: the model as it is: a policy without preprocessor).


def export_pipeline(
    export_dir: str,
    *,
    model: Any,
    dist_class: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    config: Dict[str, Any],
    compute_actions: Callable[..., Tuple[Any, List[Any], Dict[str, Any]]],
    initial_state: Sequence[Any],
    onnx: Optional[int] = None,
    exploration: str = "",
    device: Any = "cpu",
    dist_inputs_fn: Optional[Callable[..., Tuple[Any, Any, List[Any]]]] = None,
    batch_sizes: Sequence[int] = pc.VERIFY_BATCH_SIZES,
    steps: int = 2,
) -> pc.PipelineContract:
    """Exports, verifies and installs the action pipeline into ``export_dir``.

    Args:
        export_dir: Where ``pipeline.pt`` / ``pipeline.onnx`` and
            ``pipeline.json`` go (created if needed; other files untouched).
        model: The policy's ``TorchModelV2``.
        dist_class: The policy's action distribution class (or partial).
        observation_space: The policy's observation space (a flat Box with
            ``original_space`` for preprocessed Dict/Tuple/one-hot ones).
        action_space: The policy's action space.
        config: The policy's config (``normalize_actions``, ``clip_actions``,
            ``_disable_preprocessor_api``).
        compute_actions: ``(obs_batch, state_batches=, explore=False) ->
            (actions, state_outs, extra)``: the policy's own, the reference.
        initial_state: The model's initial state (one array per tensor).
        onnx: An ONNX opset; None exports TorchScript.
        exploration: The exploration's name (recorded in the metadata).
        device: The model's device (a model on a GPU is exported from a CPU
            copy: the artifact runs on the CPU).
        dist_inputs_fn: ``(model, input_dict, state_batches, seq_lens) ->
            (dist_inputs, dist_class, state_outs)`` replacing the model call
            (a policy's ``action_distribution_fn``, explore off); None calls
            the model and uses ``dist_class``.
        batch_sizes: Batch sizes the artifact is checked at.
        steps: Steps per batch size (RNN state carried over).

    Returns:
        The written contract.

    Raises:
        ValueError: A space, distribution or model input the pipeline cannot
            express (named in the message); nothing is written.
        PipelineMismatchError: The loaded artifact does not reproduce
            ``compute_actions(explore=False)``; nothing is written.
    """
    fmt = "onnx" if onnx else "torchscript"
    if any(p.device.type != "cpu" for p in model.parameters()):
        # A serving artifact for the CPU: traced from a CPU copy (a trace on a
        # GPU would bake the device into the graph's constants).
        model, device = copy.deepcopy(model).to("cpu"), "cpu"
    raw_space, obs_plan = observation_plan(observation_space, config)
    check_model_inputs(model)
    normalize = bool(config.get("normalize_actions", True))
    clip = bool(config.get("clip_actions", False))
    pc.check_action_mapping(action_space, normalize)
    act_leaves = pc.action_leaves(action_space)
    init = [np.asarray(_to_numpy(s), np.float32) for s in initial_state]
    module = ActionPipeline(
        model, dist_class, obs_plan, len(init), act_leaves, normalize, clip, dist_inputs_fn
    )
    was_training = model.training
    model.eval()  # (dropout etc. off, as compute_actions has it)
    try:
        contract, example = _contract(module, raw_space, act_leaves, init, device)
        contract.format, contract.artifact, contract.opset = fmt, pc.ARTIFACT_FILES[fmt], onnx
        contract.observation_space, contract.action_space = repr(raw_space), repr(action_space)
        contract.normalize_actions, contract.clip_actions = normalize, clip
        contract.dist_class, contract.exploration = _class_name(dist_class), exploration
        leaf_spaces = [s for _, s in act_leaves]

        def reference(obs: Any, state: List[np.ndarray]) -> Tuple[List[Any], List[Any], Any]:
            actions, state_out, extra = compute_actions(obs, state_batches=state or None, explore=False)
            flat = pc.env_actions(tree.flatten(actions), leaf_spaces, normalize, clip)
            return flat, [np.asarray(s) for s in state_out], extra["action_dist_inputs"]

        _write_verified(
            export_dir,
            module,
            example,
            contract,
            reference,
            lambda k, seed: pc.sample_observations(raw_space, k, seed),
            batch_sizes,
            steps,
        )
    finally:
        model.train(was_training)
    return contract


def _contract(
    module: "ActionPipeline",
    raw_space: gym.Space,
    act_leaves: List[Tuple[Tuple[Any, ...], gym.Space]],
    init: List[np.ndarray],
    device: Any,
) -> Tuple[pc.PipelineContract, List[Any]]:
    """The contract's interface (inputs, outputs, noise layout; the caller
    fills in the rest) and the example inputs to trace with. The noise layout
    and the outputs' dtypes and shapes come from eager runs of ``module``."""
    obs_leaves = pc.observation_leaves(raw_space)
    nested_obs = not (len(obs_leaves) == 1 and not obs_leaves[0][0])
    nested_act = not (len(act_leaves) == 1 and not act_leaves[0][0])
    inputs = [
        pc.TensorSpec(
            name, pc.obs_input_dtype(s), [None, *map(int, s.shape or ())], "obs", list(path), repr(s)
        )
        for name, (path, s) in zip(pc.leaf_names("obs", len(obs_leaves), nested_obs), obs_leaves)
    ]
    inputs += [
        pc.TensorSpec(f"state_in_{i}", "float32", [None, *s.shape], "state") for i, s in enumerate(init)
    ]
    if init:
        inputs.append(pc.TensorSpec("seq_lens", "int32", [None], "seq_lens"))

    det_names = pc.leaf_names("actions", len(act_leaves), nested_act)
    example = _example_inputs(inputs, init, pc.TRACE_BATCH_SIZE, device, noise_dim=0)
    noise = [
        pc.NoiseSlice(start, size, kind, name, dist_name)
        for name, (start, size, kind, dist_name) in zip(det_names, module.plan_noise(example[:-1]))
        if size
    ]
    noise_dim = max(1, sum(s.size for s in noise))
    inputs.append(pc.TensorSpec(pc.NOISE_INPUT, "float32", [None, noise_dim], "noise"))
    example = _example_inputs(inputs, init, pc.TRACE_BATCH_SIZE, device, noise_dim)
    outs = module.run_eager(example)

    outputs = []
    n = len(act_leaves)
    for role, names, tensors in (
        ("action", det_names, outs[:n]),
        ("sampled_action", pc.leaf_names("sampled_actions", n, nested_act), outs[n : 2 * n]),
    ):
        outputs += [
            pc.TensorSpec(name, _dtype_name(t), [None, *t.shape[1:]], role, list(path), repr(s))
            for name, t, (path, s) in zip(names, tensors, act_leaves)
        ]
    outputs.append(
        pc.TensorSpec(
            pc.DIST_INPUTS_OUTPUT, _dtype_name(outs[2 * n]), [None, *outs[2 * n].shape[1:]], "dist_inputs"
        )
    )
    outputs += [
        pc.TensorSpec(f"state_out_{i}", _dtype_name(t), [None, *t.shape[1:]], "state")
        for i, t in enumerate(outs[2 * n + 1 :])
    ]
    contract = pc.PipelineContract(
        format="",
        artifact="",
        framework="torch",
        opset=None,
        inputs=inputs,
        outputs=outputs,
        noise=noise,
        noise_dim=noise_dim,
        observation_space="",
        action_space="",
        normalize_actions=False,
        clip_actions=False,
        initial_state=[s.tolist() for s in init],
        dist_class="",
    )
    return contract, example


def _write_verified(
    export_dir: str,
    module: "ActionPipeline",
    example: List[Any],
    contract: pc.PipelineContract,
    reference: Callable[..., Any],
    sample_obs: Callable[[int, int], Any],
    batch_sizes: Sequence[int],
    steps: int,
) -> None:
    """Traces ``module`` into a temporary file in ``export_dir``, loads it in its
    consumer, verifies it and installs it; on any failure nothing is left (a
    directory made for it is removed again)."""
    created = not os.path.isdir(export_dir)
    os.makedirs(export_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=export_dir, prefix=".tmp-", suffix=contract.artifact)
    os.close(fd)
    installed = False
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*batch_size.*")
            warnings.filterwarnings("ignore", message="Constant folding")
            if contract.opset:
                _export_onnx(module, example, contract, tmp, contract.opset)
            else:
                torch.jit.trace(module, tuple(example), strict=False, check_trace=False).save(tmp)
        run = pc.onnx_runner(tmp) if contract.opset else _torchscript_runner(tmp, contract)
        contract.verified = pc.verify_pipeline(
            contract, run, reference, sample_obs, batch_sizes=batch_sizes, steps=steps
        )
        contract.verified["consumer"] = "onnxruntime.InferenceSession" if contract.opset else "torch.jit.load"
        pc.install_artifact(export_dir, tmp, contract)
        installed = True
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
        elif os.path.exists(tmp):
            os.remove(tmp)
        if created and not installed and not os.listdir(export_dir):
            os.rmdir(export_dir)


class ActionPipeline(_Module):
    """Raw observations -> (actions, sampled actions, dist inputs, state outs).

    ``forward`` takes the contract's inputs positionally: the observation
    leaves, the state tensors, ``seq_lens`` (recurrent models only), then
    ``noise``; it returns the deterministic action leaves, the sampled action
    leaves, the distribution inputs and the state outs, as a flat tuple.
    """

    def __init__(
        self,
        model: Any,
        dist_class: Any,
        obs_plan: List[_LeafPlan],
        num_states: int,
        act_leaves: List[Tuple[Tuple[Any, ...], gym.Space]],
        normalize: bool,
        clip: bool,
        dist_inputs_fn: Optional[Callable[..., Any]] = None,
    ):
        super().__init__()
        self.model = model
        self.dist_class = dist_class
        self.dist_inputs_fn = dist_inputs_fn
        self.obs_plan = obs_plan
        self.num_states = num_states
        self.num_actions = len(act_leaves)
        self.noise_plan: List[Tuple[int, int, str, str]] = []
        # Per action leaf: "unsquash", "clip" or "" (and its bounds as buffers).
        self.mapping: List[str] = []
        for i, (_, leaf) in enumerate(act_leaves):
            s: Any = leaf
            mode = ""
            if pc.is_float_box(s) and (normalize or clip):
                mode = "unsquash" if normalize else "clip"
                self.register_buffer(f"low_{i}", torch.as_tensor(s.low, dtype=torch.float32))
                self.register_buffer(f"high_{i}", torch.as_tensor(s.high, dtype=torch.float32))
            self.mapping.append(mode)

    # ------------------------------------------------------------------ pieces
    def _obs(self, leaves: Sequence[Any]) -> Any:
        """The model's "obs" input from the raw observation leaves."""
        if len(self.obs_plan) == 1 and self.obs_plan[0][0] == "raw":
            x = leaves[0]
            return x if not torch.is_floating_point(x) else x.float()
        parts = []
        for x, (kind, data) in zip(leaves, self.obs_plan):
            flat = x.reshape(x.shape[0], -1)
            if kind == "one_hot":
                sizes, starts = data
                for j, (n, start) in enumerate(zip(sizes, starts)):
                    idx = flat[:, j : j + 1].long() - start
                    parts.append((idx == torch.arange(n, device=x.device)).float())
            elif kind == "ram":
                parts.append((flat.float() - 128.0) / 128.0)
            else:
                parts.append(flat.float())
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]

    def _model(self, args: Sequence[Any]) -> Tuple[Any, Any, List[Any]]:
        k = len(self.obs_plan)
        obs = self._obs(args[:k])
        states = list(args[k : k + self.num_states])
        seq_lens = args[k + self.num_states] if self.num_states else None
        if self.dist_inputs_fn is not None:
            dist_inputs, dist_class, state_out = self.dist_inputs_fn(
                self.model, {"obs": obs}, states, seq_lens
            )
        else:
            dist_inputs, state_out = self.model({"obs": obs}, states, seq_lens)
            dist_class = self.dist_class
        dist = dist_class(dist_inputs, self.model)
        return dist_inputs, dist, list(state_out) if self.num_states else []

    def _leaf_dists(self, dist: Any) -> List[Any]:
        children = getattr(dist, "flat_child_distributions", None)
        leaves = list(children) if children is not None else [dist]
        if len(leaves) != self.num_actions:
            raise ValueError(
                f"the action distribution {type(dist).__name__} has {len(leaves)} "
                f"components, the action space {self.num_actions}"
            )
        return leaves

    def plan_noise(self, args: Sequence[Any]) -> List[Tuple[int, int, str, str]]:
        """Runs the model once (eagerly) and fixes the noise layout: per action
        leaf ``(start, size, kind, distribution name)``."""
        with torch.no_grad():
            _, dist, _ = self._model(args)
        plan, start = [], 0
        for leaf in self._leaf_dists(dist):
            kind, size = _noise_kind(leaf)
            plan.append((start, size, kind, type(leaf).__name__))
            start += size
        self.noise_plan = plan
        return plan

    def run_eager(self, args: Sequence[Any]) -> List[Any]:
        """``forward`` without tracing (for the output dtypes and shapes)."""
        with torch.no_grad():
            return list(self.forward(*args))

    def forward(self, *args: Any) -> Tuple[Any, ...]:
        noise = args[-1]
        dist_inputs, dist, state_out = self._model(args[:-1])
        det = tree.flatten(dist.deterministic_sample())
        sampled = []
        for leaf, d, (start, size, kind, _) in zip(self._leaf_dists(dist), det, self.noise_plan):
            sampled.append(_sample(leaf, d, noise[:, start : start + size], kind))
        if not any(size for _, size, _, _ in self.noise_plan):
            # Nothing samples: the one noise column is still an input of the
            # graph (an ONNX export drops unused inputs), contributing 0.
            dist_inputs = dist_inputs + 0.0 * noise[:, :1]
        det = [self._to_env(i, a) for i, a in enumerate(det)]
        sampled = [self._to_env(i, a) for i, a in enumerate(sampled)]
        return (*det, *sampled, dist_inputs, *state_out)

    def _to_env(self, i: int, a: Any) -> Any:
        mode = self.mapping[i]
        if not mode:
            return a
        low, high = getattr(self, f"low_{i}"), getattr(self, f"high_{i}")
        a = a.float()
        if mode == "unsquash":
            a = low + (a + 1.0) * (high - low) / 2.0
        return torch.maximum(torch.minimum(a, high), low)


def _noise_kind(leaf: Any) -> Tuple[str, int]:
    """``(kind, columns)`` of the noise one action component's sampling takes."""
    from rlpolicy.models.torch import torch_action_dist as d

    if isinstance(leaf, d.TorchCategorical):
        return "uniform", 1
    if isinstance(leaf, d.TorchMultiCategorical):
        return "uniform", len(leaf.cats)
    if isinstance(leaf, d.TorchSquashedGaussian):
        return "normal", int(leaf.mean.shape[-1])
    if isinstance(leaf, d.TorchDiagGaussian):
        inputs: Any = leaf.inputs
        return "normal", int(inputs.shape[1]) // 2
    if isinstance(leaf, d.TorchDeterministic):
        return "none", 0
    raise ValueError(
        f"pipeline export cannot sample {type(leaf).__name__} from explicit noise "
        "(supported: TorchCategorical, TorchMultiCategorical, TorchDiagGaussian, "
        "TorchSquashedGaussian, TorchDeterministic and Dict/Tuple of them)"
    )


def _categorical(logits: Any, u: Any) -> Any:
    """Inverse-CDF draw: the first index whose cumulative probability exceeds ``u``."""
    cdf = torch.cumsum(torch.softmax(logits, dim=-1), dim=-1)
    # The last column is never compared: a draw past cdf[-2] is the last index
    # (also when rounding leaves cdf[-1] just under u).
    return (cdf[:, :-1] < u).long().sum(dim=-1)


def _sample(leaf: Any, det: Any, noise: Any, kind: str) -> Any:
    from rlpolicy.models.torch import torch_action_dist as d

    if isinstance(leaf, d.TorchCategorical):
        return _categorical(leaf.inputs, noise[:, :1]).reshape(det.shape)
    if isinstance(leaf, d.TorchMultiCategorical):
        idx = [_categorical(cat.logits, noise[:, j : j + 1]) for j, cat in enumerate(leaf.cats)]
        return torch.stack(idx, dim=1).reshape(det.shape)
    if isinstance(leaf, d.TorchSquashedGaussian):
        raw = leaf.mean + leaf.std * noise
        squashed = (torch.tanh(raw) + 1.0) / 2.0 * (leaf.high - leaf.low) + leaf.low
        return torch.clamp(squashed, leaf.low, leaf.high).reshape(det.shape)
    if isinstance(leaf, d.TorchDiagGaussian):
        mean, log_std = torch.chunk(leaf.inputs, 2, dim=1)
        return (mean + torch.exp(log_std) * noise).reshape(det.shape)
    return det


def _example_inputs(
    inputs: List[pc.TensorSpec], init: List[np.ndarray], batch: int, device: Any, noise_dim: int
) -> List[Any]:
    """Example tensors (batch ``batch``) for the inputs; zeros, the initial state,
    ones for ``seq_lens``, and a ``noise`` of ``noise_dim`` columns (or none
    for ``noise_dim`` 0, to plan the noise first)."""
    out = []
    states = iter(init)
    for spec in inputs:
        if spec.role == "noise":
            continue
        if spec.role == "state":
            arr = np.repeat(next(states)[None], batch, axis=0)
        elif spec.role == "seq_lens":
            arr = np.ones(batch, np.int32)
        else:
            arr = np.zeros([batch, *[int(d or 0) for d in spec.shape[1:]]], spec.dtype)
        out.append(torch.as_tensor(arr, device=device))
    if noise_dim:
        out.append(torch.full((batch, noise_dim), 0.5, dtype=torch.float32, device=device))
    else:
        out.append(torch.zeros((batch, 0), dtype=torch.float32, device=device))
    return out


def _export_onnx(
    module: Any, example: List[Any], contract: pc.PipelineContract, path: str, opset: int
) -> None:
    in_names = [s.name for s in contract.inputs]
    out_names = [s.name for s in contract.outputs]
    torch.onnx.export(
        module,
        tuple(example),
        path,
        export_params=True,
        opset_version=opset,
        do_constant_folding=True,
        input_names=in_names,
        output_names=out_names,
        **onnx_exporter_kwargs(),
        dynamic_axes={name: {0: "batch_size"} for name in in_names + out_names},
    )


def _torchscript_runner(
    path: str, contract: pc.PipelineContract
) -> Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch>=2.9 flags jit.load
        loaded = torch.jit.load(path, map_location="cpu")
    in_names = [s.name for s in contract.inputs]
    out_names = [s.name for s in contract.outputs]

    def run(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        with torch.no_grad():
            outs = loaded(*[torch.from_numpy(np.ascontiguousarray(feeds[k])) for k in in_names])
        return {k: v.numpy() for k, v in zip(out_names, outs)}

    return run


def _class_name(dist_class: Any) -> str:
    """``TorchCategorical`` for the class or a ``functools.partial`` of it."""
    name = getattr(dist_class, "__name__", None) or getattr(
        getattr(dist_class, "func", None), "__name__", None
    )
    return str(name or repr(dist_class))


def _dtype_name(t: Any) -> str:
    return str(t.detach().cpu().numpy().dtype)


def _to_numpy(x: Any) -> Any:
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return x
