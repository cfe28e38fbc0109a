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
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core import pipeline_contract as pc
from rlpolicy.policy._pipeline_inputs import pipeline_plan
from rlpolicy.policy._torch.export import onnx_export
from rlpolicy.utils.framework import try_import_torch

torch, nn = try_import_torch()
# A name mypy accepts as a base class (nn is a variable here); object without torch.
_Module: Any = nn.Module if nn is not None else object


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
    if any(p.device.type != "cpu" for p in model.parameters()):
        # A serving artifact for the CPU: traced from a CPU copy (a trace on a
        # GPU would bake the device into the graph's constants).
        model, device = copy.deepcopy(model).to("cpu"), "cpu"
    plan = pipeline_plan(model, observation_space, action_space, config, initial_state)
    module = ActionPipeline(model, dist_class, plan, dist_inputs_fn)
    was_training = model.training
    model.eval()  # (dropout etc. off, as compute_actions has it)
    try:
        example = [torch.as_tensor(a, device=device) for a in plan.example_inputs(pc.TRACE_BATCH_SIZE)]
        noise = module.plan_noise(example)
        example.append(
            torch.full((pc.TRACE_BATCH_SIZE, pc.noise_width(noise)), 0.5, dtype=torch.float32, device=device)
        )
        with torch.no_grad():
            outs = [t.detach().cpu().numpy() for t in module(*example)]
        contract = plan.contract(noise, outs, "torchscript", "torch", onnx, dist_class, exploration)

        def write(path: str) -> None:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.filterwarnings("ignore", message=".*batch_size.*")
                warnings.filterwarnings("ignore", message="Constant folding")
                if onnx:
                    names = [[s.name for s in specs] for specs in (contract.inputs, contract.outputs)]
                    onnx_export(module, tuple(example), path, onnx, *names)
                else:
                    torch.jit.trace(module, tuple(example), strict=False, check_trace=False).save(path)

        return pc.export_verified(
            export_dir,
            plan,
            contract,
            write,
            _torchscript_runner,
            "torch.jit.load",
            compute_actions,
            batch_sizes,
            steps,
        )
    finally:
        model.train(was_training)


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
        plan: pc.PipelinePlan,
        dist_inputs_fn: Optional[Callable[..., Any]] = None,
    ):
        super().__init__()
        self.model = model
        self.dist_class = dist_class
        self.dist_inputs_fn = dist_inputs_fn
        self.plan = plan
        self.obs_plan = plan.obs_plan
        self.num_states = len(plan.init)
        self.num_actions = len(plan.act_leaves)
        self.noise_plan: List[pc.NoiseSlice] = []
        # Per action leaf: "unsquash", "clip" or "" (and its bounds as buffers).
        self.mapping: List[str] = []
        for i, (_, leaf) in enumerate(plan.act_leaves):
            s: Any = leaf
            mode = ""
            if pc.is_float_box(s) and (plan.normalize or plan.clip):
                mode = "unsquash" if plan.normalize else "clip"
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
        return dist_inputs, dist, self.plan.state_outs(state_out)

    def plan_noise(self, args: Sequence[Any]) -> List[pc.NoiseSlice]:
        """Runs the model once (eagerly) on ``args`` (the inputs but ``noise``)
        and fixes the noise layout."""
        with torch.no_grad():
            _, dist, _ = self._model(args)
        self.noise_plan = self.plan.noise_layout(pc.leaf_distributions(dist, self.num_actions), _noise_kind)
        return self.noise_plan

    def forward(self, *args: Any) -> Tuple[Any, ...]:
        noise = args[-1]
        dist_inputs, dist, state_out = self._model(args[:-1])
        det = tree.flatten(dist.deterministic_sample())
        sampled = []
        for leaf, d, sl in zip(pc.leaf_distributions(dist, self.num_actions), det, self.noise_plan):
            sampled.append(_sample(leaf, d, noise[:, sl.start : sl.start + sl.size]))
        if not any(sl.size for sl in self.noise_plan):
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


def _sample(leaf: Any, det: Any, noise: Any) -> Any:
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
