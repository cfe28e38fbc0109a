"""Running a model's ``SlimFC`` stacks as plain functional calls.

Calling an ``nn.Module`` costs far more than the linear algebra of a small
layer: ``__call__`` looks for hooks, ``nn.Sequential`` iterates its children,
every activation is a module of its own. For a batch of one observation that
machinery takes longer than the maths. A :class:`FunctionalPlan` records,
once, which ``F.linear`` / activation calls a set of ``SlimFC`` stacks boils
down to, and replays them directly -- but only while doing so computes exactly
what calling the modules would: the same modules in the same places, of the
same classes (a parametrization changes the class), with no hooks anywhere and
no JIT tracing going on (:meth:`FunctionalPlan.usable`, checked on every call).
Parameters are read from the modules' ``_parameters`` on every call, so
swapped or moved parameters (``.to()``, ``torch.func.functional_call``) are
seen.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Dict, Optional, Sequence, Tuple

from rlpolicy.utils.framework import try_import_torch

torch, nn = try_import_torch()
if torch is not None:
    from torch.nn.modules import module as _torch_module

    _linear = torch.nn.functional.linear
    _tracing_state = torch._C._get_tracing_state

Step = Tuple[Dict[str, Any], Any]  # (a Linear's _parameters, activation function or None)


class FunctionalPlan:
    """Named chains of ``SlimFC`` layers, replayed as functional calls.

    Args:
        owner: The module whose ``_modules`` hold the chains' containers; its
            layout is part of what :meth:`usable` checks (its own hooks are
            not: ``ModelV2.__call__`` never runs them).
        chains: Chain name -> ``(containers, layers)``: the ``nn.Sequential``
            containers the layers sit in (checked for swaps) and the ``SlimFC``
            layers in call order.

    A plan whose layers cannot all run functionally (another layer type, an
    in-place activation, ...) is never usable; see :func:`build_plan`.
    """

    def __init__(self, owner: Any, chains: Dict[str, Tuple[Sequence[Any], Sequence[Any]]]):
        from rlpolicy.models.torch.misc import SlimFC

        self.chains: Dict[str, Tuple[Step, ...]] = {}
        # (The owner itself is not kept -- its children dict is -- so the plan
        # it stores does not form a reference cycle with it.)
        modules: list = []
        containers = [owner]
        for name, (seqs, layers) in chains.items():
            steps = []
            for fc in layers:
                plan = fc.__dict__.get("_fast_plan") if type(fc) is SlimFC else None
                if plan is None:
                    raise ValueError(f"layer {fc!r} cannot run as a functional call")
                seq, mods, linear, act_fn = plan
                steps.append((linear._parameters, act_fn))
                modules += [fc, seq, *mods]
                containers += [fc, seq]
            modules += list(seqs)
            containers += list(seqs)
            self.chains[name] = tuple(steps)
        self._modules = tuple(modules)
        self._types = tuple(map(type, modules))
        self._hook_dicts = tuple(
            chain.from_iterable(
                (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, m._backward_pre_hooks)
                for m in modules
            )
        )
        # The children dicts, and copies of them to compare with (dict equality
        # compares the child modules by identity first).
        self._containers = tuple(m._modules for m in containers)
        self._layout = tuple(dict(d) for d in self._containers)

    def usable(self) -> bool:
        """Whether replaying the calls computes exactly what the modules would."""
        if any(self._hook_dicts) or _tracing_state():
            return False
        g = _torch_module
        if (
            g._global_forward_hooks
            or g._global_forward_pre_hooks
            or g._global_backward_hooks
            or g._global_backward_pre_hooks
        ):
            return False
        return tuple(map(type, self._modules)) == self._types and self._containers == self._layout

    def run(self, name: str, x: Any) -> Any:
        """Applies chain ``name`` to ``x`` (call :meth:`usable` first)."""
        for params, act_fn in self.chains[name]:
            x = _linear(x, params["weight"], params["bias"])
            if act_fn is not None:
                x = act_fn(x)
        return x

    def run2(self, first: str, second: str, x: Any) -> Tuple[Any, Any]:
        """``(run(first, x), run(second, that))``: two chains back to back."""
        for params, act_fn in self.chains[first]:
            x = _linear(x, params["weight"], params["bias"])
            if act_fn is not None:
                x = act_fn(x)
        y = x
        for params, act_fn in self.chains[second]:
            y = _linear(y, params["weight"], params["bias"])
            if act_fn is not None:
                y = act_fn(y)
        return x, y


def build_plan(
    owner: Any, chains: Dict[str, Tuple[Sequence[Any], Sequence[Any]]]
) -> Optional[FunctionalPlan]:
    """A :class:`FunctionalPlan`, or None if some layer cannot run functionally."""
    try:
        return FunctionalPlan(owner, chains)
    except ValueError:
        return None
