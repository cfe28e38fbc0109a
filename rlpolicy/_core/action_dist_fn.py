"""How to call a policy's ``action_distribution_fn``: resolved once, from its signature.

RLlib 1.x has two signatures for ``action_distribution_fn``:

* the newer one, ``fn(policy, model, input_dict, *, state_batches, seq_lens,
  explore, timestep, is_training, ...)`` (DQN, SAC torch, R2D2);
* the older one, ``fn(policy, model, obs_batch, *, state_batches, seq_lens,
  prev_action_batch, prev_reward_batch, explore, is_training, ...)``
  (SimpleQ, DDPG/TD3, SAC tf, CQL).

RLlib 1.11 calls the newer signature and, on a ``TypeError`` whose message
mentions a positional or unexpected keyword argument, calls again with the
older one. That retry also swallows a ``TypeError`` raised *inside* the
function and runs the function twice. Here the signature decides instead:
:func:`resolve_action_distribution_fn` inspects the function once and returns
a :class:`DistFnCall` that calls it the right way in every framework, and a
``TypeError`` the function raises reaches the caller unchanged.

Framework-neutral: the caller passes its tensors; nothing here imports a
framework or touches the policy beyond passing it through.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, FrozenSet, NamedTuple, Optional, Tuple

OBS, PREV_ACTIONS, PREV_REWARDS = "obs", "prev_actions", "prev_rewards"

#: Keywords of the newer signature (besides ``input_dict``), as RLlib 1.11 passes them.
NEW_STYLE_KEYWORDS = ("state_batches", "seq_lens", "explore", "timestep", "is_training")
#: Keywords of the older signature (besides the positional ``obs_batch``).
OLD_STYLE_KEYWORDS = (
    "state_batches",
    "seq_lens",
    "prev_action_batch",
    "prev_reward_batch",
    "explore",
    "timestep",
    "is_training",
)

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class DistFnCall(NamedTuple):
    """How to call one ``action_distribution_fn``.

    Attributes:
        fn: The function.
        old_style: True for ``fn(policy, model, obs_batch, ...)``; False for
            ``fn(policy, model, input_dict=..., ...)``.
        accepted: The keyword names ``fn`` takes, or None if it takes any
            (``**kwargs``); keywords it does not take are not passed.
        named: The keyword names ``fn`` declares (whether or not it also
            takes ``**kwargs``).
    """

    fn: Callable
    old_style: bool
    accepted: Optional[FrozenSet[str]]
    named: FrozenSet[str] = frozenset()

    def __call__(
        self,
        policy: Any,
        model: Any,
        input_dict: Any,
        *,
        state_batches: Any = None,
        seq_lens: Any = None,
        explore: Any = None,
        timestep: Any = None,
        is_training: Any = False,
    ) -> Tuple[Any, Any, Any]:
        """Calls ``fn``; returns what it returns (``(dist_inputs, dist_class, state_outs)``).

        Args:
            policy: The policy (passed through).
            model: Its model (passed through).
            input_dict: The input dict (a SampleBatch of tensors or
                placeholders); an old-style function gets its ``obs`` column
                positionally, and ``prev_action_batch``/``prev_reward_batch``
                (the ``prev_actions``/``prev_rewards`` columns, None if
                absent) if it declares them.
            state_batches, seq_lens, explore, timestep, is_training: Passed
                as keywords, each only if ``fn`` takes it. ``timestep`` is
                not passed when it is None.
        """
        values: Dict[str, Any] = {
            "state_batches": state_batches,
            "seq_lens": seq_lens,
            "explore": explore,
            "is_training": is_training,
        }
        if timestep is not None:
            values["timestep"] = timestep
        if self.old_style:
            kwargs = self._keep(values)
            # Only to a function that names them: reading the columns marks them as
            # acting inputs, which a function swallowing them in **kwargs does not need.
            for name, col in (("prev_action_batch", PREV_ACTIONS), ("prev_reward_batch", PREV_REWARDS)):
                if name in self.named:
                    kwargs[name] = _get(input_dict, col)
            return self.fn(policy, model, input_dict[OBS], **kwargs)
        return self.fn(policy, model, input_dict=input_dict, **self._keep(values))

    def _keep(self, values: Dict[str, Any]) -> Dict[str, Any]:
        if self.accepted is None:
            return values
        return {k: v for k, v in values.items() if k in self.accepted}


def _get(input_dict: Any, key: str) -> Any:
    # A SampleBatch's `in` is the stored keys; .get would count a read of a missing column.
    try:
        return input_dict[key] if key in input_dict else None
    except (KeyError, TypeError):
        return None


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _classify(fn: Callable) -> DistFnCall:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no introspectable signature: RLlib's newer call
        return DistFnCall(fn, False, None)
    names = {p.name for p in params if p.kind is not p.VAR_POSITIONAL and p.kind is not p.VAR_KEYWORD}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    accepted = (
        None
        if var_kw
        else frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    )
    positional = [p for p in params if p.kind in _POSITIONAL]
    named = frozenset(names)
    if "input_dict" in names and (len(positional) < 3 or positional[2].name == "input_dict"):
        return DistFnCall(fn, False, accepted, named)
    if len(positional) >= 3 or var_pos:
        return DistFnCall(fn, True, accepted, named)
    if var_kw:
        return DistFnCall(fn, False, accepted, named)
    raise TypeError(
        f"action_distribution_fn {_fn_name(fn)}{inspect.signature(fn)} takes "
        "neither `input_dict` (fn(policy, model, input_dict, *, state_batches, "
        "seq_lens, explore, timestep, is_training)) nor a third positional argument "
        "(the older fn(policy, model, obs_batch, *, ...))"
    )


def resolve_action_distribution_fn(fn: Callable) -> DistFnCall:
    """Returns how to call ``fn`` (the policy keeps the result while its function stays).

    The newer signature is recognised by a parameter named ``input_dict``
    (positional third or keyword-only, as R2D2's); the older one by a third
    positional parameter of any other name (``obs_batch``, ``obs``) or
    ``*args``. A function taking only ``**kwargs`` after ``(policy, model)``
    gets the newer call, as RLlib 1.11 tries it first.

    Raises:
        TypeError: If ``fn`` fits neither signature (naming it and both forms).
    """
    return _classify(fn)


__all__ = ["DistFnCall", "NEW_STYLE_KEYWORDS", "OLD_STYLE_KEYWORDS", "resolve_action_distribution_fn"]
