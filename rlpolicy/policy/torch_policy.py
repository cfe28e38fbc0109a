"""PyTorch policy (RLlib 1.11's ``ray.rllib.policy.torch_policy``).

``TorchPolicy`` runs a ``TorchModelV2`` for action computation and learning.
Its construction, acting (forward pass, sampling, exploration, log-likelihoods),
learning and state steps are its own methods, here. With more than one device
(real GPUs or ``_fake_gpus``) it keeps one model copy ("tower") per device: the
device plan comes from ``rlpolicy._core.devices``, the per-device batch splits
and loaded buffers from ``rlpolicy._core.tower_buffers``. The torch helpers it
calls take data, never the policy (``rlpolicy.policy._torch``): tower mechanics
(weight sync, threaded per-tower gradients, mean reduction) in ``towers``, fast
torch <-> numpy conversions in ``convert``, the default Adam and optimizer
state in ``optimizers``, TorchScript/ONNX export in ``export``.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type, Union

import gymnasium as gym
import numpy as np

from rlpolicy._core.config import read_checked
from rlpolicy._core.devices import DevicePlan, detect_ray_context, plan_devices
from rlpolicy._core.framework_check import require_framework
from rlpolicy._core.loss_init import resolve_loss
from rlpolicy._core.tower_buffers import (
    minibatch_rows,
    plan_exact_chunks,
    split_batch_for_devices,
)
from rlpolicy.models._weight_conversion import adapt_weights, weights_layout
from rlpolicy.policy._framework_policy import FrameworkPolicy, as_sample_batch, with_lock
from rlpolicy.policy._torch import compiled_acting
from rlpolicy.policy._torch import export as torch_export
from rlpolicy.policy._torch.convert import (
    action_outputs_to_numpy,
    load_state_dict_fast,
    tensor_interceptor,
    to_numpy_fast,
    weights_snapshot,
)
from rlpolicy.policy._torch.optimizers import (
    check_optimizer_states,
    default_adam,
    load_optimizer_states,
    optimizer_param_groups,
    optimizer_states,
)
from rlpolicy.policy._torch.towers import (
    TowerGrads,
    TowerRunner,
    compute_tower_grads,
    gather_tower_stats,
    make_towers,
    run_exact_tower_step,
    run_tower_step,
)
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.rnn_sequencing import pad_batch_to_sequences_of_same_size
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.torch_utils import (
    apply_grad_clipping,
    convert_to_non_torch_type,
    convert_to_torch_tensor,
)
from rlpolicy.utils.typing import (
    ModelGradients,
    ModelWeights,
    TensorStructType,
    TensorType,
    TrainerConfigDict,
)

torch, nn = try_import_torch()

logger = logging.getLogger(__name__)


class DirectStepOptimizer:
    """Marker passed to ``apply_gradients``: step the optimizers on the grads
    already stored in the parameters (RLlib's ``_directStepOptimizerSingleton``)."""

    _instance: Optional["DirectStepOptimizer"] = None

    def __new__(cls):
        if DirectStepOptimizer._instance is None:
            DirectStepOptimizer._instance = super().__new__(cls)
        return DirectStepOptimizer._instance

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(DirectStepOptimizer)

    def __repr__(self) -> str:
        return "DirectStepOptimizer"


_directStepOptimizerSingleton = DirectStepOptimizer()


# ``torch_policy.with_lock`` is RLlib 1.11's name for the policy-lock decorator; it is
# the one lock idiom of all policies (``rlpolicy.policy._framework_policy.with_lock``),
# imported above.


@DeveloperAPI
class TorchPolicy(FrameworkPolicy):
    """A ``Policy`` whose model and loss are written in PyTorch.

    The public acting, learning, buffer and state methods are the
    ``FrameworkPolicy``'s (``rlpolicy.policy._framework_policy``); this class
    supplies their torch steps (``_compute_actions_step``, ``_learn_step``,
    ``_device_slices``, ``_learn_on_device_batches``, the optimizer state).

    Attributes:
        model: The main model (tower 0), living on ``self.device``.
        model_gpu_towers: One model per entry of ``self.devices``; tower 0 is
            ``self.model``.
        target_models: Per tower, its target model (only if the policy has a
            ``target_model`` when this constructor runs).
        devices: The torch devices of the towers.
        device: The main device (``devices[0]``).
        dist_class: The action-distribution class.
        multi_gpu_param_groups: Per optimizer, the indices (into
            ``list(self.model.parameters())``) of the parameters it updates.
    """

    @DeveloperAPI
    def __init__(
        self,
        observation_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        config: TrainerConfigDict,
        *,
        model: Optional[Any] = None,
        loss: Optional[Callable[..., Union[TensorType, List[TensorType]]]] = None,
        action_distribution_class: Optional[Type] = None,
        action_sampler_fn: Optional[Callable[..., tuple]] = None,
        action_distribution_fn: Optional[Callable[..., Tuple[TensorType, Type, List[TensorType]]]] = None,
        max_seq_len: int = 20,
        get_batch_divisibility_req: Optional[Callable[[Policy], int]] = None,
    ):
        """Initializes a TorchPolicy.

        Args:
            observation_space: Observation space of the policy.
            action_space: Action space of the policy.
            config: The policy's config dict (missing keys are completed from
                the common config by ``Policy.__init__``).
            model: The torch model (a ``TorchModelV2``). None builds the
                catalog's default model for the spaces and ``config["model"]``.
            loss: ``(policy, model, dist_class, train_batch) -> loss or list of
                losses`` (one per optimizer). If None, an overridden
                ``self.loss`` is used; otherwise the policy cannot learn.
            action_distribution_class: The torch action-distribution class;
                None takes the catalog's default for the action space.
            action_sampler_fn: Takes over the whole action computation:
                ``(policy, model, input_dict, state_batches, explore=,
                timestep=) -> (actions, logp[, dist_inputs], state_out)``.
                Mutually exclusive with ``action_distribution_fn``.
            action_distribution_fn: Replaces only the model forward pass:
                ``(policy, model, input_dict=, state_batches=, seq_lens=,
                explore=, timestep=, is_training=) -> (dist_inputs,
                dist_class, state_out)``; sampling and exploration stay.
            max_seq_len: Maximum sequence length for recurrent training.
            get_batch_divisibility_req: ``policy -> int`` (or an int): train
                batches are padded to a multiple of it.
        """
        require_framework("torch", type(self).__name__)
        # RLlib 1.11 tags the caller's dict as a torch config; rlpolicy tags the
        # policy's own copy (made by Policy.__init__) and leaves the caller's alone.
        super().__init__(observation_space, action_space, config)
        self.framework = self.config["framework"] = "torch"
        model, action_distribution_class = self._default_model_and_dist(
            observation_space, action_space, self.config, model, action_distribution_class
        )
        self._device_plan = self._plan_devices(self.config)
        self._place_model_towers(model)
        self._lock = threading.RLock()  # (with_lock would make it on first use)
        self._state_inputs = self.model.get_initial_state()
        self._is_recurrent = len(self._state_inputs) > 0
        self._update_model_view_requirements_from_init_state()
        self.view_requirements.update(self.model.view_requirements)
        self.exploration = self._create_exploration()
        self.unwrapped_model = model  # RLlib: for DistributedDataParallel wrappers.
        self._loss: Any = resolve_loss(type(self), loss)  # (None: cannot learn)
        self._optimizers = force_list(self.optimizer())
        self.multi_gpu_param_groups: List[Set[int]] = optimizer_param_groups(self.model, self._optimizers)
        # config["num_multi_gpu_tower_stacks"] was validated by Policy.__init__.
        self._init_tower_buffers(len(self.devices), exact_supported=True)
        self.dist_class = action_distribution_class
        self.action_sampler_fn = action_sampler_fn
        self.action_distribution_fn = action_distribution_fn
        self.distributed_world_size = None  # torch.distributed all-reduce: not supported.
        self.max_seq_len = max_seq_len
        self.batch_divisibility_req = (
            get_batch_divisibility_req(self)
            if callable(get_batch_divisibility_req)
            else (get_batch_divisibility_req or 1)
        )
        self._tower_runner = TowerRunner(self.devices)
        self._interceptors: Dict[Any, Callable] = {}
        self._buffer_params: Optional[List[Any]] = None  # list(model.parameters()) at loading
        self._step_params: Optional[List[Any]] = None
        self._checked_dist_class: Any = None
        # config["torch_compile_acting"]: the acting graphs, made on first use (or False).
        self._compiled_acting: Any = None

    # ------------------------------------------------------------------ construction steps

    @staticmethod
    def _default_model_and_dist(
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Dict[str, Any],
        model: Any,
        dist_class: Optional[Type],
    ) -> Tuple[Any, Type]:
        """``(model, dist_class)``: the catalog's default torch model and/or
        distribution for the spaces and ``config["model"]`` where not given."""
        if model is not None and dist_class is not None:
            return model, dist_class
        from rlpolicy.models.catalog import ModelCatalog

        default_dist, logit_dim = ModelCatalog.get_action_dist(
            action_space, config["model"], framework="torch"
        )
        if model is None:
            model = ModelCatalog.get_model_v2(
                obs_space=observation_space,
                action_space=action_space,
                num_outputs=logit_dim,
                model_config=config["model"],
                framework="torch",
            )
        return model, dist_class or default_dist

    @staticmethod
    def _plan_devices(config: Dict[str, Any]) -> DevicePlan:
        """The device plan for ``config`` given the CUDA devices torch sees (logged)."""
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        ray_mode, ray_gpu_ids = detect_ray_context()
        plan = plan_devices(config, visible, ray_mode=ray_mode, ray_gpu_ids=ray_gpu_ids)
        worker = config.get("worker_index", 0) or "local"
        where = (
            f"{plan.num_gpus} fake-GPUs"
            if plan.fake
            else (f"{plan.num_towers} GPU(s)" if plan.on_gpu else "CPU")
        )
        logger.info("TorchPolicy (worker=%s) running on %s.", worker, where)
        return plan

    def _place_model_towers(self, model: Any) -> None:
        """Sets ``devices``, ``device``, ``model_gpu_towers``, ``model`` and (with
        a ``target_model``) ``target_models``, as RLlib 1.11 lays them out."""
        plan = self._device_plan
        self.devices = [torch.device(d) for d in plan.devices]
        self.device = self.devices[0]
        self.model_gpu_towers, targets = make_towers(
            model, self.devices, plan.on_gpu, getattr(self, "target_model", None)
        )
        if hasattr(self, "target_model"):
            self.target_models = targets
        self.model = self.model_gpu_towers[0]

    # ------------------------------------------------------------------ action computation

    def _compute_actions_step(
        self,
        input_dict: Any,
        state_batches: List[Any],
        explore: Any,
        timestep: Any,
        episodes: Optional[List[Any]],
    ) -> Tuple[TensorStructType, List[TensorType], Dict[str, TensorType]]:
        """The torch step of ``compute_actions``/``compute_actions_from_input_dict``
        (``FrameworkPolicy``; it holds the lock and resolved explore/timestep).

        The input dict becomes a SampleBatch handing out tensors on
        ``self.device`` (its ``is_training`` flag as the caller set it), its
        ``state_in_<i>`` columns the state tensors; ``seq_lens`` is all ones.
        """
        with torch.no_grad():
            input_dict = self._lazy_tensor_dict(input_dict)
            if state_batches:
                state_batches = [input_dict[f"state_in_{i}"] for i in range(len(state_batches))]
                n = len(state_batches[0])
            else:
                obs = input_dict[SampleBatch.CUR_OBS]
                n = obs.shape[0] if type(obs) is torch.Tensor and obs.dim() > 0 else len(obs)
            seq_lens = torch.ones(n, dtype=torch.int32, device=self.device)
            return self._compute_action_helper(input_dict, state_batches, seq_lens, explore, timestep)

    def _compute_action_helper(
        self,
        input_dict: SampleBatch,
        state_batches: List[TensorType],
        seq_lens: Any,
        explore: bool,
        timestep: int,
    ):
        """Forward pass, sampling and exploration (RLlib 1.11's name; the caller
        holds the lock, has autograd off and has resolved explore/timestep).

        Returns:
            ``(actions, state_outs, extra_fetches)`` as numpy structures.
        """
        self._is_recurrent = bool(state_batches)
        model = self.model
        if model is not None and model.training:
            set_train_mode(model, False)
        graphs = self._compiled_acting
        if graphs is None or (
            graphs is not False and (graphs.model is not model or graphs.dist_class is not self.dist_class)
        ):
            # First call (config["torch_compile_acting"] decides), or a new model or
            # distribution class since the graphs were made.
            graphs = self._compiled_acting = self._make_compiled_acting()
        graph_fetches: Optional[Dict[str, Any]] = None
        if self.action_sampler_fn:
            action_dist = dist_inputs = None
            outs = self.action_sampler_fn(
                self, model, input_dict, state_batches, explore=explore, timestep=timestep
            )
            if len(outs) == 4:
                actions, logp, dist_inputs, state_out = outs
            else:
                actions, logp, state_out = outs
        else:
            exploration = self.exploration
            before = exploration.before_compute_actions
            if getattr(before, "__func__", None) is not Exploration.before_compute_actions:
                before(explore=explore, timestep=timestep)  # (the base hook does nothing)
            compiled = (
                None
                if graphs is False
                else self._run_compiled_acting(graphs, input_dict, state_batches, seq_lens, explore, timestep)
            )
            if compiled is not None:
                # The graph chose the action; the exploration keeps its bookkeeping.
                actions, logp, dist_inputs, state_out, value = compiled
                if value is not None:  # (the value fetch the hook would have made)
                    graph_fetches = {graphs.value_column: value}
                action_dist = None
                actions, logp = exploration.get_exploration_action(
                    action_distribution=compiled_acting.GraphSample(actions, logp),
                    timestep=timestep,
                    explore=explore,
                )
            else:
                dist_inputs, dist_class, state_out = self._compute_dist_inputs(
                    input_dict, state_batches, seq_lens, explore, timestep
                )
                action_dist = dist_class(dist_inputs, model)
                actions, logp = exploration.get_exploration_action(
                    action_distribution=action_dist, timestep=timestep, explore=explore
                )
        input_dict[SampleBatch.ACTIONS] = actions
        if graph_fetches is None:
            extra_fetches = self.extra_action_out(input_dict, state_batches, model, action_dist)
        else:
            extra_fetches = graph_fetches
        if dist_inputs is not None:
            extra_fetches[SampleBatch.ACTION_DIST_INPUTS] = dist_inputs
        if logp is not None:
            extra_fetches[SampleBatch.ACTION_PROB] = torch.exp(
                logp if logp.dtype == torch.float32 else logp.float()
            )
            extra_fetches[SampleBatch.ACTION_LOGP] = logp
        obs = input_dict[SampleBatch.CUR_OBS]
        self.global_timestep += obs.shape[0] if type(obs) is torch.Tensor and obs.dim() > 0 else len(obs)
        return action_outputs_to_numpy(actions, state_out, extra_fetches)

    def _run_compiled_acting(
        self,
        graphs: Any,
        input_dict: Any,
        state_batches: List[Any],
        seq_lens: Any,
        explore: Any,
        timestep: Any,
    ) -> Optional[Tuple[Any, ...]]:
        """``(actions, logp, dist_inputs, state_outs)`` from the compiled acting
        graphs (``config["torch_compile_acting"]``, see
        ``rlpolicy.policy._torch.compiled_acting``), or None for the eager path:
        exploration's random phase, or inputs the graphs cannot take."""
        explore = bool(explore)
        if explore and int(timestep) < self.exploration.random_timesteps:
            return None  # (StochasticSampling's uniform random actions: eager)
        # The model's input columns that the batch has (its state-ins are `state_batches`).
        wanted = self.model.view_requirements
        columns = {
            k: input_dict[k]
            for k in input_dict.keys()
            if k in wanted
            and k != SampleBatch.INFOS
            and k != SampleBatch.SEQ_LENS
            and not k.startswith("state_in_")
        }
        return graphs.run(
            columns, state_batches, seq_lens, explore, bool(getattr(input_dict, "is_training", False))
        )

    def _make_compiled_acting(self) -> Any:
        """The policy's ``CompiledActing``, or False: the option off, or a policy
        it does not fit (logged once)."""
        mode = read_checked(self.config, "torch_compile_acting")
        if not mode:
            return False
        hook = self._extra_action_out_impl()
        value_column = getattr(hook, compiled_acting.VALUE_FETCH_ATTR, None)
        reason = compiled_acting.unsupported_reason(
            model=self.model,
            exploration=self.exploration,
            action_sampler_fn=self.action_sampler_fn,
            action_distribution_fn=self.action_distribution_fn,
            extra_action_out_overridden=(hook is not TorchPolicy.extra_action_out and value_column is None),
        )
        if reason is not None:
            logger.warning(
                "%s: torch_compile_acting=%r is not used (%s); compute_actions stays on the eager path.",
                type(self).__name__,
                mode,
                reason,
            )
            return False
        _check_dist_class(self.dist_class)
        # (on CPU, large feed-forward batches stay eager: the graphs measured no faster)
        limit = compiled_acting.CPU_FEEDFORWARD_MAX_BATCH if self.device.type == "cpu" else None
        return compiled_acting.CompiledActing(
            self.model,
            self.dist_class,
            self.devices,
            name=type(self).__name__,
            value_column=value_column,
            feedforward_max_batch=limit,
        )

    def _extra_action_out_impl(self) -> Callable:
        """The ``extra_action_out`` that runs (a ``build_policy_class`` class
        overrides this with its ``extra_action_out_fn`` or what its wrapper
        falls through to)."""
        return type(self).extra_action_out

    def _compute_dist_inputs(
        self,
        input_dict: Any,
        state_batches: List[Any],
        seq_lens: Any,
        explore: Optional[bool],
        timestep: Optional[int],
        is_training: bool = False,
    ) -> Tuple[Any, Any, List[Any]]:
        """Distribution inputs, class and state-outs of ``self.model`` (or of the
        ``action_distribution_fn``), checking the class once per class."""
        if not self.action_distribution_fn:
            inputs, state_out = self.model(input_dict, state_batches, seq_lens)
            dist_class = self.dist_class
        else:
            # Which of RLlib's two signatures: decided from the function's signature.
            call = self._dist_fn_call(self.action_distribution_fn)
            inputs, dist_class, state_out = call(
                self,
                self.model,
                input_dict,
                state_batches=state_batches,
                seq_lens=seq_lens,
                explore=explore,
                timestep=timestep,
                is_training=is_training,
            )
        if dist_class is not self._checked_dist_class:
            _check_dist_class(dist_class)
            self._checked_dist_class = dist_class
        return inputs, dist_class, state_out

    def _log_likelihoods_step(
        self,
        actions: Any,
        obs_batch: Any,
        state_batches: Optional[List[TensorType]],
        prev_action_batch: Any,
        prev_reward_batch: Any,
        actions_normalized: bool,
    ) -> TensorType:
        """The torch step of ``compute_log_likelihoods`` (``FrameworkPolicy``;
        it holds the lock and flattened ``obs_batch``): the log-probabilities,
        as a torch tensor, of ``actions`` under the distribution for the inputs."""
        if self.action_sampler_fn and self.action_distribution_fn is None:
            raise ValueError(
                "Cannot compute log-prob/likelihood w/o an "
                "`action_distribution_fn` and a provided `action_sampler_fn`!"
            )
        if not actions_normalized and self.config["normalize_actions"]:
            # Normalize on the numpy side (before the tensors are made).
            from rlpolicy.utils.spaces.space_utils import normalize_action

            actions = normalize_action(
                to_numpy_fast(actions) if torch.is_tensor(actions) else np.asarray(actions),
                self.action_space_struct,
            )
        with torch.no_grad():
            input_dict = self._lazy_tensor_dict(
                {SampleBatch.CUR_OBS: obs_batch, SampleBatch.ACTIONS: actions}
            )
            if prev_action_batch is not None:
                input_dict[SampleBatch.PREV_ACTIONS] = prev_action_batch
            if prev_reward_batch is not None:
                input_dict[SampleBatch.PREV_REWARDS] = prev_reward_batch
            seq_lens = torch.ones(len(obs_batch), dtype=torch.int32)
            state_batches = [convert_to_torch_tensor(s, self.device) for s in (state_batches or [])]
            self.exploration.before_compute_actions(explore=False)
            inputs, dist_class, _ = self._compute_dist_inputs(
                input_dict, state_batches, seq_lens, explore=False, timestep=None
            )
            action_dist = dist_class(inputs, self.model)
            return action_dist.logp(input_dict[SampleBatch.ACTIONS])

    # ------------------------------------------------------------------ learning

    def _learn_step(self, batch: SampleBatch) -> Dict[str, TensorType]:
        """The torch step of ``learn_on_batch`` (``FrameworkPolicy``; the batch is
        checked and flattened, the model in training mode): ``compute_gradients``
        then one optimizer step on those gradients. With several towers the batch is split
        across them as in ``load_batch_into_buffer`` (see ``compute_gradients``).

        Returns:
            The extra fetches with the learner stats and the model's metrics.
        """
        _, fetches = self.compute_gradients(batch)
        self.apply_gradients(_directStepOptimizerSingleton)
        if self.model is not None:
            fetches["model"] = self.model.metrics()
        return fetches

    @with_lock
    @override(Policy)
    def compute_gradients(
        self, postprocessed_batch: SampleBatch
    ) -> Tuple[ModelGradients, Dict[str, TensorType]]:
        """Computes the gradients of the loss(es) on ``postprocessed_batch``.

        One device: the batch is padded (in place) and the gradients computed
        on ``self.model``, ``extra_grad_process`` running after each
        optimizer's backward pass. Several towers (RLlib 1.11 only allows one
        here): the batch is split like ``load_batch_into_buffer`` does (rows
        beyond an equal share per tower are dropped), every tower computes its
        gradients in parallel, and the average, post-processed once per
        optimizer by ``extra_grad_process``, is left in ``self.model``'s
        ``.grad`` and returned. A dict is taken as a SampleBatch.

        Returns:
            ``(grads, fetches)``: one gradient (or None) per model parameter,
            and the extra fetches with the learner stats.
        """
        self._check_can_learn("compute_gradients")
        batch = self.obs_flattener.input_dict(as_sample_batch(postprocessed_batch))
        batch.set_training(True)
        if len(self.devices) == 1:
            if not batch.zero_padded:
                self._pad(batch)
            self._lazy_tensor_dict(batch, device=self.devices[0])
            ((all_grads, grad_info, _),) = self._tower_runner.run(self._tower_grads, [(self.model, batch)])
            grad_info["allreduce_latency"] /= len(self._optimizers)
        else:
            slices = split_batch_for_devices(batch, len(self.devices), self._pad)
            all_grads, grad_info, _ = self._multi_tower_grads(self._place_on_devices(slices))
            self._lazy_tensor_dict(batch)
        grad_info.update(self.extra_grad_info(batch))
        fetches = self.extra_compute_grad_fetches()
        return all_grads, dict(fetches, **{LEARNER_STATS_KEY: grad_info})

    @override(Policy)
    def apply_gradients(self, gradients: Union[ModelGradients, DirectStepOptimizer]) -> None:
        if isinstance(gradients, DirectStepOptimizer):
            for opt in self._optimizers:
                opt.step()
            return
        params = list(self.model.parameters())
        if len(gradients) != len(params):
            raise ValueError(
                f"apply_gradients got {len(gradients)} gradients for the model's "
                f"{len(params)} parameters; pass one (or None) per parameter"
            )
        for g, p in zip(gradients, params):
            if g is not None:
                p.grad = (g if torch.is_tensor(g) else torch.from_numpy(np.asarray(g))).to(self.device)
        # RLlib 1.11 supports one optimizer here; each optimizer steps its own params.
        for opt in self._optimizers:
            opt.step()

    @override(FrameworkPolicy)
    def _check_can_learn(self, what: str) -> None:
        if self._loss is None:
            raise ValueError(
                f"{type(self).__name__} has no loss ({what} needs one): pass "
                "`loss` to TorchPolicy.__init__ or override `loss()`"
            )

    @override(FrameworkPolicy)
    def _train_batch(self, batch: Any, what: str) -> SampleBatch:
        # As RLlib 1.11: the model is in training mode before the learn callback runs.
        batch = super()._train_batch(batch, what)
        if self.model is not None and not self.model.training:
            set_train_mode(self.model, True)
        return batch

    def _pad(self, batch: SampleBatch) -> None:
        pad_batch_to_sequences_of_same_size(
            batch=batch,
            max_seq_len=self.max_seq_len,
            shuffle=False,
            batch_divisibility_req=self.batch_divisibility_req,
            view_requirements=self.view_requirements,
        )

    def _tower_losses(self, model: Any, batch: SampleBatch) -> List[TensorType]:
        """The loss term(s) of one tower, after the model's ``custom_loss``."""
        return force_list(
            model.custom_loss(force_list(self._loss(self, model, self.dist_class, batch)), batch)
        )

    def _tower_grads(self, model: Any, batch: SampleBatch) -> TowerGrads:
        """Single-device gradients, post-processed after each backward pass."""
        params = self._step_params if model is self.model else None
        return compute_tower_grads(
            self._tower_losses,
            model,
            batch,
            self._optimizers,
            self.multi_gpu_param_groups,
            self.extra_grad_process,
            params,
        )

    def _multi_tower_grads(self, device_batches: List[SampleBatch]) -> TowerGrads:
        """Averaged gradients of all towers, installed in ``self.model``."""
        return run_tower_step(
            self._tower_runner,
            self._tower_losses,
            self.model_gpu_towers,
            device_batches,
            self._optimizers,
            self.multi_gpu_param_groups,
            self.extra_grad_process,
            self.device,
        )

    def _place_on_devices(self, slices: List[SampleBatch]) -> List[SampleBatch]:
        """Moves slice ``i`` onto ``self.devices[i]`` (in place) and returns the slices."""
        return [s.to_device(d) for s, d in zip(slices, self.devices)]

    # ------------------------------------------------------------------ multi-tower buffers

    @property
    def _single_cpu(self) -> bool:
        return len(self.devices) == 1 and self.devices[0].type == "cpu"

    def _device_slices(self, batch: SampleBatch) -> List[Any]:
        """The torch step of ``load_batch_into_buffer`` (``FrameworkPolicy``): the
        prepared batch padded and handing out tensors, one slice per tower
        (equal shares, the rest dropped), each on its tower's device.

        With ``config["_deterministic_towers"]``: the fixed chunk plan
        (``plan_exact_chunks``), every chunk padded on its own and placed on
        its tower's device."""
        if self._exact_chunks:
            plan = plan_exact_chunks(
                batch, minibatch_rows(self.config), self._exact_chunks, len(self.devices)
            )
            return [
                share.map_batches(functools.partial(self._pad_and_place, device=d))
                for share, d in zip(plan, self.devices)
            ]
        if self._single_cpu:
            self._pad(batch)
            self._lazy_tensor_dict(batch)
            self._buffer_params = list(self.model.parameters())
            return [batch]
        slices = split_batch_for_devices(batch, len(self.devices), self._pad)
        return self._place_on_devices(slices)

    def _learn_on_device_batches(self, batches: List[Any], buffer_index: int) -> Dict[str, TensorType]:
        """The torch step of ``learn_on_loaded_batch`` (``FrameworkPolicy``; it
        holds the lock): one SGD step on one minibatch per tower.

        One CPU device: ``learn_on_batch`` on the minibatch (RLlib 1.11's
        shortcut), reusing the parameter list gathered at loading. Several
        towers: their averaged gradients, one optimizer step, and per-tower
        ``extra_grad_info`` as ``tower_<i>`` learner stats.

        With ``config["_deterministic_towers"]`` (``batches`` are each tower's
        chunks), on any number of towers, one CPU included: the chunk
        gradients reduced in chunk order (``run_exact_tower_step``), one
        optimizer step; ``tower_<i>`` holds ``extra_grad_info`` of tower i's
        first chunk.
        """
        if self._exact_chunks:
            self._check_can_learn("learn_on_loaded_batch")
            run_exact_tower_step(
                self._tower_runner,
                self._tower_losses,
                self.model_gpu_towers,
                batches,
                self._optimizers,
                self.multi_gpu_param_groups,
                self.extra_grad_process,
                self.device,
            )
            self.apply_gradients(_directStepOptimizerSingleton)
            fetches = {
                f"tower_{i}": {LEARNER_STATS_KEY: self.extra_grad_info(chunks[0].batch)}
                for i, chunks in enumerate(batches)
            }
            fetches.update(self.extra_compute_grad_fetches())
            return fetches
        if self._single_cpu:
            # The parameter list is gathered once per loaded buffer, not per minibatch.
            self._step_params = self._buffer_params
            try:
                return self.learn_on_batch(batches[0])
            finally:
                self._step_params = None
        self._check_can_learn("learn_on_loaded_batch")
        self._multi_tower_grads(batches)
        self.apply_gradients(_directStepOptimizerSingleton)
        fetches = {f"tower_{i}": {LEARNER_STATS_KEY: self.extra_grad_info(b)} for i, b in enumerate(batches)}
        fetches.update(self.extra_compute_grad_fetches())
        return fetches

    def _pad_and_place(self, batch: SampleBatch, device: Any) -> SampleBatch:
        """``batch`` padded (in place) and moved onto ``device``."""
        self._pad(batch)
        return batch.to_device(device)

    @DeveloperAPI
    def get_tower_stats(self, stats_name: str) -> List[TensorStructType]:
        """Returns one entry per tower that stored ``stats_name`` in its
        ``tower_stats`` (typically from the loss), moved to ``self.device``.

        Raises:
            AssertionError: If no tower has ``stats_name`` (as RLlib 1.11).
        """
        return gather_tower_stats(self.model_gpu_towers, stats_name, self.device)

    # ------------------------------------------------------------------ weights and state

    @with_lock
    @override(Policy)
    def get_weights(self) -> ModelWeights:
        return weights_snapshot(self.model)  # (numpy copies: a snapshot)

    @with_lock  # no forward pass sees half-replaced weights
    @override(Policy)
    def set_weights(self, weights: ModelWeights) -> None:
        """Loads a ``get_weights`` dict (strict: the same keys and shapes).

        A catalog model's TF graph ``get_weights()`` or eager
        ``get_weights(as_dict=True)`` dict is taken too: it is converted to
        this model's keys and layout first (``rlpolicy.models.convert_weights``).
        """
        if isinstance(weights, dict) and weights and weights_layout(weights) in ("tf", "tf2"):
            own = self.get_weights()
            if set(weights) != set(own):
                weights = adapt_weights(weights, own, "torch")
        load_state_dict_fast(self.model, weights, self.device)

    @override(Policy)
    def is_recurrent(self) -> bool:
        return self._is_recurrent

    @override(Policy)
    def num_state_tensors(self) -> int:
        return len(self.model.get_initial_state())

    @override(Policy)
    def get_initial_state(self) -> List[TensorType]:
        return [
            s.detach().cpu().numpy() if torch.is_tensor(s) else np.asarray(s)
            for s in self.model.get_initial_state()
        ]

    def _optimizer_state(self) -> List[Dict[str, Any]]:
        """The torch step of ``get_state``: numpy copies of each optimizer's state dict."""
        return optimizer_states(self._optimizers)

    def _check_optimizer_state(self, values: Any) -> Any:
        """The torch step of ``set_state``: checks ``state["_optimizer_variables"]``
        against the optimizers (count, groups, parameters per group); None or
        empty: nothing to assign."""
        if not values:
            return None
        check_optimizer_states(self._optimizers, values)
        return values

    def _set_optimizer_state(self, checked: Any) -> None:
        """Loads the checked optimizer states (onto ``self.device``)."""
        load_optimizer_states(self._optimizers, checked, self.device)

    # ------------------------------------------------------------------ overridable hooks

    @DeveloperAPI
    def extra_grad_process(self, optimizer: Any, loss: TensorType) -> Dict[str, TensorType]:
        """Post-processes the gradients of ``optimizer``'s parameters before its step.

        Called once per optimizer/loss pair, always on the main model
        (``self.model``, whose parameters the optimizers hold). One device:
        right after that optimizer's ``backward()``, with its loss. Several
        towers: after every tower's raw gradients are averaged into
        ``self.model``'s ``.grad``, with ``loss`` the mean (detached) of the
        towers' losses for that optimizer; RLlib 1.11 called it per tower on
        each tower's own gradients, so clipping there was not the
        single-device clipping. This default clips the gradients by global
        norm when ``config["grad_clip"]`` is set (RLlib 1.11's base returns
        ``{}``; its algorithms add ``apply_grad_clipping`` themselves).

        Returns:
            Info on the processing (e.g. ``{"grad_gnorm": ...}``).
        """
        if self.config.get("grad_clip"):
            return apply_grad_clipping(self, optimizer, loss)
        return {}

    @DeveloperAPI
    def extra_compute_grad_fetches(self) -> Dict[str, Any]:
        """Extra values returned by ``compute_gradients`` (default: empty learner stats)."""
        return {LEARNER_STATS_KEY: {}}

    @DeveloperAPI
    def extra_action_out(
        self, input_dict: Dict[str, TensorType], state_batches: List[TensorType], model: Any, action_dist: Any
    ) -> Dict[str, TensorType]:
        """Extra per-action outputs (the third return value of compute_actions).

        Args:
            input_dict: The model input tensors (with the sampled "actions").
            state_batches: The state-in tensors.
            model: The model.
            action_dist: The action distribution (None with an action_sampler_fn).
        """
        return {}

    @DeveloperAPI
    def extra_grad_info(self, train_batch: SampleBatch) -> Dict[str, TensorType]:
        """Extra learner stats for ``train_batch`` (default: none)."""
        return {}

    @DeveloperAPI
    def optimizer(self) -> Any:
        """The optimizer(s): by default Adam over the model at ``config["lr"]``
        (torch's fused kernel where available, see ``default_adam``), passed
        through the exploration's ``get_exploration_optimizer``."""
        params = list(self.model.parameters())
        if hasattr(self, "config"):
            optimizers = [default_adam(params, lr=read_checked(self.config, "lr"))]
        else:
            optimizers = [default_adam(params)]
        if getattr(self, "exploration", None):
            optimizers = self.exploration.get_exploration_optimizer(optimizers)
        return optimizers

    def _no_grad_context(self):
        return torch.no_grad()

    def _convert_to_non_torch_type(self, data: TensorStructType) -> TensorStructType:
        return convert_to_non_torch_type(data)

    def _convert_to_numpy(self, data: TensorStructType) -> TensorStructType:
        """``convert_to_numpy`` of a structure (RLlib 1.11's built torch policies have it;
        CQL's ``compute_gradients_fn`` calls it on its stats)."""
        from rlpolicy.utils.numpy import convert_to_numpy

        return convert_to_numpy(data)

    def _lazy_tensor_dict(
        self, postprocessed_batch: Union[SampleBatch, dict], device: Any = None
    ) -> SampleBatch:
        """Makes ``postprocessed_batch`` hand out torch tensors on ``device``."""
        if not isinstance(postprocessed_batch, SampleBatch):
            postprocessed_batch = SampleBatch(postprocessed_batch)
        device = torch.device(device) if device is not None else self.device
        fn = self._interceptors.get(device)
        if fn is None:
            fn = self._interceptors[device] = functools.partial(tensor_interceptor, device=device)
            fn.idempotent = True  # type: ignore[attr-defined]  # (its tensors come back unchanged)
        postprocessed_batch.set_get_interceptor(fn)
        return postprocessed_batch

    # ------------------------------------------------------------------ export

    @with_lock
    @override(Policy)
    def export_model(self, export_dir: str, onnx: Optional[int] = None, pipeline: bool = False) -> None:
        """Exports the model for serving: TorchScript ``model.pt``, or with
        ``onnx`` (an opset version) ``model.onnx``, traced on the dummy batch's
        model inputs (see ``rlpolicy.policy._torch.export``).

        With ``pipeline=True``, the whole action pipeline instead (observation
        preprocessing, the model, deterministic and noise-sampled actions,
        unsquashing to the action space): ``pipeline.pt`` / ``pipeline.onnx``
        and ``pipeline.json``, checked against ``compute_actions(explore=False)``
        before they are written (``rlpolicy.policy._torch.pipeline_export``,
        docs/export_pipeline.md)."""
        if pipeline:
            self._export_pipeline(export_dir, onnx)
            return
        dummy = getattr(self, "_dummy_batch", None)
        if dummy is None:
            dummy = self._get_dummy_batch_from_view_requirements(1)
        inputs, state_ins, seq_lens = torch_export.select_export_inputs(self.model.view_requirements, dummy)
        os.makedirs(export_dir, exist_ok=True)
        if onnx:
            torch_export.export_onnx(
                self.model,
                inputs,
                state_ins,
                seq_lens,
                os.path.join(export_dir, "model.onnx"),
                onnx,
                device=self.device,
            )
        else:
            torch_export.export_torchscript(
                self.model,
                inputs,
                state_ins,
                seq_lens,
                os.path.join(export_dir, "model.pt"),
                device=self.device,
            )

    def _export_pipeline(self, export_dir: str, onnx: Optional[int]) -> None:
        """``export_model(..., pipeline=True)``; the checks' ``compute_actions``
        calls leave ``global_timestep`` as it was."""
        from rlpolicy.policy._torch.pipeline_export import export_pipeline

        self._export_action_pipeline(
            export_pipeline,
            export_dir,
            onnx,
            self.action_sampler_fn,
            self.action_distribution_fn,
            device=self.device,
        )

    @override(Policy)
    def import_model_from_h5(self, import_file: str) -> None:
        return self.model.import_from_h5(import_file)


def set_train_mode(module: Any, mode: bool) -> None:
    """``module.train(mode)`` without ``nn.Module.train``'s per-module ``__setattr__`` and
    ``children()`` walk (~10x less per switch; acting and learning switch every turn of an
    off-policy loop). A module whose class overrides ``train`` gets its own call."""
    if type(module).train is not _MODULE_TRAIN:
        module.train(mode)
        return
    module.__dict__["training"] = mode
    for child in module._modules.values():
        if child is not None:
            set_train_mode(child, mode)


_MODULE_TRAIN = getattr(nn.Module, "train", None)  # (None without torch)


def _check_dist_class(dist_class: Any) -> None:
    """Raises ValueError unless ``dist_class`` is a TorchDistributionWrapper
    subclass (or a ``functools.partial`` of one), as RLlib 1.11 requires."""
    from rlpolicy.models.torch.torch_action_dist import TorchDistributionWrapper

    if isinstance(dist_class, functools.partial) or (
        isinstance(dist_class, type) and issubclass(dist_class, TorchDistributionWrapper)
    ):
        return
    raise ValueError(
        f"`dist_class` ({getattr(dist_class, '__name__', dist_class)}) not a "
        "TorchDistributionWrapper subclass! Make sure your `action_distribution_fn` or "
        "`make_model_and_action_dist` return a correct distribution class."
    )


# Further names RLlib 1.11 defines or imports in this module (1.x client code imports
# them from here); resolved on first access, see rlpolicy/utils/_lazy.py.
from rlpolicy.utils._lazy import lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES: Dict[str, Any] = {
    "LearningRateSchedule": "rlpolicy.policy.torch_mixins:LearningRateSchedule",
    "EntropyCoeffSchedule": "rlpolicy.policy.torch_mixins:EntropyCoeffSchedule",
    "ModelCatalog": "rlpolicy.models.catalog:ModelCatalog",
    "ModelV2": "rlpolicy.models.modelv2:ModelV2",
    "TorchDistributionWrapper": "rlpolicy.models.torch.torch_action_dist:TorchDistributionWrapper",
    "TorchModelV2": "rlpolicy.models.torch.torch_modelv2:TorchModelV2",
    "NullContextManager": "rlpolicy.utils:NullContextManager",
    "convert_to_numpy": "rlpolicy.utils.numpy:convert_to_numpy",
    "PiecewiseSchedule": "rlpolicy.utils.schedules:PiecewiseSchedule",
    "normalize_action": "rlpolicy.utils.spaces.space_utils:normalize_action",
    "GradInfoDict": "rlpolicy.utils.typing:GradInfoDict",
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
