"""The compiled acting path of ``TorchPolicy`` (``config["torch_compile_acting"]``).

An rlpolicy extension (RLlib 1.11 has no such option). With
``torch_compile_acting="jit"`` the forward pass of ``compute_actions`` -- the
model call (``ModelV2.__call__``: obs restoring, ``forward``), the action
distribution and its deterministic or sampled action with the sample's
log-likelihood, and PPO's value estimate (see :data:`VALUE_FETCH_ATTR`) --
runs as one ``torch.jit.trace`` graph instead of op by op through Python. It
gives the same actions, log-likelihoods, distribution inputs, state-outs and
values as the eager path, for the same seed too: the graph
calls the same ops in the same order, so it draws the same random numbers
from torch's generators (tracing itself runs under ``torch.random.fork_rng``
and leaves them untouched).

A trace is specialised to its inputs' shapes and dtypes (the batch size
included), so :class:`CompiledActing` keeps one graph per (``explore``, the
batch's ``is_training`` flag, input columns, shapes, dtypes) in a small LRU
cache; a new batch size costs one trace.
The graphs share the model's parameters, so weight updates made in place
(``set_weights``, optimizer steps, ``load_state_dict``) reach them;
:meth:`CompiledActing.clear` drops them all, for anything else.

What cannot be traced faithfully goes back to the eager path, logged once per
policy: an exception while tracing, or Python control flow on tensor values
in code outside torch and rlpolicy (a custom model's ``if x.sum() > 0:``,
reported by torch as a ``TracerWarning``; torch's and rlpolicy's own such
conversions are shape checks, safe in a graph kept per shape). Which
policies qualify at all is :func:`unsupported_reason`'s decision.

Why not ``torch.compile``: measured with ``benchmarks/bench_compiled_acting.py``
on CPU, ``torch.compile`` (inductor) of the same graph was 1.5x to 1.7x
slower than the graph run eagerly, at batch 1 and at batch 256, after 3 to
25 s (up to minutes) of compiling per graph on a shared 2-core machine; so
only the ``"jit"`` mode is offered. (torch 2.x marks ``torch.jit.trace``
deprecated in favour of ``torch.compile``/``torch.export``; the traced graphs
run as before, and that notice is not passed on.)
"""

from __future__ import annotations

import collections
import logging
import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tree

from rlpolicy.utils.framework import try_import_torch

torch, nn = try_import_torch()

logger = logging.getLogger(__name__)

#: Compiled graphs kept per policy (least recently used dropped first).
MAX_GRAPHS = 8

#: On CPU, feed-forward (non-recurrent) batches larger than this stay eager:
#: there the matrix products dominate and the graph measured no faster (FC
#: 2x256 at batch 256: 0.98x to 1.16x the eager time), while recurrent models
#: gain at every batch size and feed-forward ones at small batches
#: (``benchmarks/bench_compiled_acting.py``, figures in docs/compiled_acting.md).
CPU_FEEDFORWARD_MAX_BATCH = 16

#: An ``extra_action_out`` (or ``extra_action_out_fn``) that returns exactly
#: ``{column: model.value_function()}`` and reads nothing else may say so with
#: this attribute set to ``column`` (PPO's ``vf_preds_fetches`` does): the
#: graph then computes the value too, and the hook itself is not called.
VALUE_FETCH_ATTR = "compiled_acting_value_fetch"


def unsupported_reason(
    *,
    model: Any,
    exploration: Any,
    action_sampler_fn: Any,
    action_distribution_fn: Any,
    extra_action_out_overridden: bool,
) -> Optional[str]:
    """Why a policy with these parts cannot use the compiled acting path, or None.

    The graph replaces the model call, the distribution and
    ``StochasticSampling``'s action choice; it leaves nothing behind on the
    model (its ``last_output()``, the features ``value_function()`` reads), so
    an ``extra_action_out`` of the policy's own, which may read them, keeps the
    eager path (unless it is marked with :data:`VALUE_FETCH_ATTR`; the caller
    passes False then), as do custom samplers, distribution functions and
    other exploration classes (their Python logic runs per call).
    """
    from rlpolicy.utils.exploration.stochastic_sampling import StochasticSampling

    if action_sampler_fn is not None:
        return "the policy has an action_sampler_fn"
    if action_distribution_fn is not None:
        return "the policy has an action_distribution_fn"
    if extra_action_out_overridden:
        return "the policy overrides extra_action_out (it may read the model's last forward pass)"
    if type(exploration) is not StochasticSampling:
        return f"its exploration is {type(exploration).__name__}, not StochasticSampling"
    if not isinstance(model, nn.Module):
        return f"the model ({type(model).__name__}) is not a torch.nn.Module"
    return None


class GraphSample:
    """The action distribution as the exploration sees it on the compiled path:
    the action (and its log-likelihood) the graph already computed."""

    __slots__ = ("actions", "logp")

    def __init__(self, actions: Any, logp: Any):
        self.actions = actions
        self.logp = logp

    def sample(self) -> Any:
        """The graph's sampled action."""
        return self.actions

    def sampled_action_logp(self) -> Any:
        """The graph's log-likelihood of its sampled action."""
        return self.logp

    def deterministic_sample(self) -> Any:
        """The graph's deterministic action."""
        return self.actions


class _ActingGraph(nn.Module if nn is not None else object):  # type: ignore[misc]
    """What one trace records: model call, distribution, action (and logp).

    ``forward(*inputs)`` takes the input columns (``keys``), the state tensors
    and ``seq_lens`` and returns one flat tuple: the action leaves, the logp
    (explore only), the distribution inputs, the state-outs and (with
    ``with_value``) ``model.value_function()``. The action structure and the
    number of state-outs are kept from the tracing run.
    """

    def __init__(
        self,
        model: Any,
        dist_class: Any,
        explore: bool,
        keys: Sequence[str],
        num_states: int,
        is_training: bool = False,
        with_value: bool = False,
    ):
        super().__init__()
        self.model = model
        self.__dict__["_layout"] = (
            dist_class,
            bool(explore),
            tuple(keys),
            num_states,
            bool(is_training),
            bool(with_value),
        )
        self.__dict__["structure"] = None  # (action structure, number of state-outs)

    def forward(self, *inputs: Any) -> Tuple[Any, ...]:
        from rlpolicy.policy.sample_batch import SampleBatch

        dist_class, explore, keys, num_states, is_training, with_value = self.__dict__["_layout"]
        columns = SampleBatch(dict(zip(keys, inputs[: len(keys)])), _is_training=is_training)
        states = list(inputs[len(keys) : len(keys) + num_states])
        dist_inputs, state_out = self.model(columns, states, inputs[-1])
        dist = dist_class(dist_inputs, self.model)
        if explore:
            actions = dist.sample()
            logp: Tuple[Any, ...] = (dist.sampled_action_logp(),)
        else:
            actions, logp = dist.deterministic_sample(), ()
        state_out = list(state_out)
        self.__dict__["structure"] = (actions, len(state_out))
        value = (self.model.value_function(),) if with_value else ()
        return tuple(tree.flatten(actions)) + logp + (dist_inputs,) + tuple(state_out) + value


class TraceRejected(Exception):
    """The trace would not reproduce the eager computation (the message says why)."""


def _is_trusted_source(filename: str) -> bool:
    """Whether ``filename`` is torch's or rlpolicy's own code, where a tensor
    turned into a Python bool while tracing is a shape check (``x.shape[1:] ==
    expected``, torch's RNN argument checks): fine in a graph kept per shape."""
    import rlpolicy

    path = os.path.realpath(filename)
    roots = (os.path.dirname(str(m.__file__)) for m in (torch, rlpolicy))
    return any(path.startswith(os.path.realpath(r) + os.sep) for r in roots)


def _trace(graph: _ActingGraph, inputs: Tuple[Any, ...], devices: List[Any]) -> Any:
    """``torch.jit.trace`` of ``graph`` on ``inputs``, leaving torch's random
    generators as they were.

    Raises:
        TraceRejected: Python control flow on tensor values in code other than
            torch's or rlpolicy's (a custom model's) was recorded as a constant.
    """
    cuda = [d for d in devices if getattr(d, "type", None) == "cuda"]
    with warnings.catch_warnings(record=True) as caught, torch.random.fork_rng(devices=cuda, enabled=True):
        warnings.simplefilter("always", torch.jit.TracerWarning)
        traced = torch.jit.trace(graph, inputs, check_trace=False)
    for w in caught:
        if issubclass(w.category, DeprecationWarning) and "torch.jit.trace" in str(w.message):
            continue  # (torch 2.x's notice; the traced graphs run as before)
        if not issubclass(w.category, torch.jit.TracerWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        text = str(w.message)
        if "Python boolean" in text and not _is_trusted_source(w.filename):
            raise TraceRejected(f"a tensor decides Python control flow at {w.filename}:{w.lineno}")
    return traced


class CompiledActing:
    """One policy's compiled acting graphs, by explore flag and input signature.

    Args:
        model: The model (``self.model`` of the policy, an ``nn.Module``).
        dist_class: The action distribution class.
        devices: The policy's devices (their random generators are kept
            unchanged while tracing).
        name: How log lines name the policy.
        value_column: With a column name, the graphs also compute
            ``model.value_function()`` (see :data:`VALUE_FETCH_ATTR`).
        feedforward_max_batch: Calls without state inputs and with more rows
            than this take the eager path (None: no limit); see
            :data:`CPU_FEEDFORWARD_MAX_BATCH`.
    """

    def __init__(
        self,
        model: Any,
        dist_class: Any,
        devices: List[Any],
        name: str = "policy",
        value_column: Optional[str] = None,
        feedforward_max_batch: Optional[int] = None,
    ):
        self.model = model
        self.dist_class = dist_class
        self.value_column = value_column
        self.feedforward_max_batch = feedforward_max_batch
        self.devices = list(devices)
        self.name = name
        self.graphs: "collections.OrderedDict[Any, Tuple[Any, Any, int, int]]" = collections.OrderedDict()
        self.disabled: Optional[str] = None  # why tracing was given up (eager from then on)
        self.num_traces = 0
        self.evicted = False  # (whether the cache has dropped a graph yet; logged once)

    def clear(self) -> None:
        """Drops every compiled graph (the next calls trace anew)."""
        self.graphs.clear()

    def run(
        self,
        columns: Dict[str, Any],
        states: List[Any],
        seq_lens: Any,
        explore: bool,
        is_training: bool = False,
    ) -> Optional[Tuple[Any, Any, Any, List[Any], Any]]:
        """The graph's ``(actions, logp, dist_inputs, state_outs, value)`` for these
        inputs (``value``: ``model.value_function()`` with a ``value_column``,
        else None).

        Args:
            columns: The model input columns (name -> tensor), e.g. ``obs``.
            states: The state-in tensors.
            seq_lens: The int32 sequence lengths.
            explore: Sample (True; logp is the sample's) or take the
                deterministic action (False; logp is None).
            is_training: The input batch's ``is_training`` flag, as the model
                sees it.

        Returns:
            None where this signature cannot be compiled or the batch is
            left to the eager path (``feedforward_max_batch``; the caller then
            takes the eager path); after a failed trace always None.
        """
        if self.disabled is not None:
            return None
        limit = self.feedforward_max_batch
        if limit is not None and not states and seq_lens.shape[0] > limit:
            return None  # (a large feed-forward batch: the eager path is as fast)
        keys = tuple(sorted(columns)) if len(columns) > 1 else tuple(columns)
        inputs = tuple(columns[k] for k in keys) + tuple(states) + (seq_lens,)
        layout = []
        for t in inputs:
            if type(t) is not torch.Tensor:
                return None  # (a non-tensor column: this call stays eager)
            layout.append((t.shape, t.dtype, t.device))
        signature = (explore, is_training, keys, len(states), tuple(layout))
        entry = self.graphs.get(signature)
        if entry is None:
            entry = self._compile(signature, keys, len(states), inputs, explore, is_training)
            if entry is None:
                return None
        else:
            self.graphs.move_to_end(signature)
        call, structure, num_leaves, num_state_outs = entry
        flat = call(*inputs)
        actions = flat[0] if structure is None else tree.unflatten_as(structure, list(flat[:num_leaves]))
        logp = flat[num_leaves] if explore else None
        rest = flat[num_leaves + (1 if explore else 0) :]
        value = rest[1 + num_state_outs] if self.value_column is not None else None
        return actions, logp, rest[0], list(rest[1 : 1 + num_state_outs]), value

    def _compile(
        self,
        signature: Any,
        keys: Tuple[str, ...],
        num_states: int,
        inputs: Tuple[Any, ...],
        explore: bool,
        is_training: bool,
    ) -> Optional[Tuple[Any, Any, int, int]]:
        graph = _ActingGraph(
            self.model,
            self.dist_class,
            explore,
            keys,
            num_states,
            is_training,
            with_value=self.value_column is not None,
        )
        try:
            traced = _trace(graph, inputs, self.devices)
        except Exception as e:  # anything the tracer cannot record: stay eager
            self.disabled = f"{type(e).__name__}: {e}"
            logger.warning(
                "%s: torch_compile_acting='jit' cannot trace the acting step "
                "(%s); compute_actions stays on the eager path.",
                self.name,
                self.disabled,
            )
            return None
        actions, num_state_outs = graph.__dict__["structure"]
        # (the script method itself: the same call without nn.Module's hook dispatch)
        structure = None if type(actions) is torch.Tensor else tree.map_structure(lambda _: None, actions)
        entry = (traced.forward, structure, len(tree.flatten(actions)), num_state_outs)
        self.graphs[signature] = entry
        self.num_traces += 1
        if len(self.graphs) > MAX_GRAPHS:
            self.graphs.popitem(last=False)
            if not self.evicted:
                self.evicted = True
                logger.info(
                    "%s: more than %d acting signatures (batch sizes, explore "
                    "flags); the least recently used graph is dropped and will be "
                    "traced again when it comes back.",
                    self.name,
                    MAX_GRAPHS,
                )
        logger.debug("%s: traced the acting step for %s (graph %d).", self.name, signature, self.num_traces)
        return entry


__all__ = [
    "CPU_FEEDFORWARD_MAX_BATCH",
    "CompiledActing",
    "GraphSample",
    "MAX_GRAPHS",
    "TraceRejected",
    "VALUE_FETCH_ATTR",
    "unsupported_reason",
]
