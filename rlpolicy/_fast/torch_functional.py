"""Entry ``torch_functional_linear``: ``SlimFC`` stacks run as plain functional calls.

Calling an ``nn.Module`` costs far more than the linear algebra of a small
layer: ``__call__`` looks for hooks, ``nn.Sequential`` iterates its children,
every activation is a module of its own. For a batch of one observation that
machinery takes longer than the maths. :func:`linear_plan` records, per
``SlimFC``, the ``F.linear`` / activation call it boils down to, and a
:class:`FunctionalPlan` does the same for a model's chains of them; both are
replayed directly, but only while doing so computes exactly what calling the
modules would: the same modules in the same places, of the same classes (a
parametrization changes the class), with no hooks anywhere (per module and
torch's global ones) and no JIT tracing going on (checked on every call).
Parameters are read from the modules' ``_parameters`` on every call, so
swapped or moved parameters (``.to()``, ``torch.func.functional_call``) are
seen. Measured win: ``compute_actions`` at batch 1 of the shared bench's
2x256 PPO policy about 1.4x; nothing at batch 256.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Dict, Optional, Sequence, Tuple

from rlpolicy._fast import register, untested_version

try:
    import torch
    from torch.nn.modules import module as _torch_module
except ImportError:  # (no torch: the entry stays off)
    torch = None  # type: ignore[assignment]

TESTED = ((1, 13), (2, 14))  # torch versions [from, below) the internals were checked on


def _guard() -> Optional[str]:
    if torch is None:
        return "torch is not installed"
    untested = untested_version("torch", torch.__version__, TESTED)
    if untested:
        return untested
    names = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks")
    missing = [n for n in names + ("_global_backward_pre_hooks",) if not hasattr(_torch_module, n)]
    if missing or not hasattr(torch._C, "_get_tracing_state"):
        return f"torch internals missing: {missing or ['torch._C._get_tracing_state']}"
    return None


FUNCTIONAL = register(
    "torch_functional_linear",
    "torch 1.13 to 2.13: nn.Module's _parameters/_modules and hook dicts, torch.nn.modules.module's "
    "global hook dicts, torch._C._get_tracing_state",
    _guard,
)

if torch is not None:
    _Linear = torch.nn.Linear
    _linear = torch.nn.functional.linear
    _tracing_state = torch._C._get_tracing_state
    # Activation modules (exact types, default arguments) and their functional twins.
    # The shortcut applies them to the linear layer's fresh output, which nothing else
    # sees, so tanh/sigmoid/relu run in place there (the same values, one allocation
    # less per layer; their backward only needs the result). SiLU's backward needs
    # its input, so it stays out of place.
    _FUNCTIONAL_ACTIVATIONS = {
        torch.nn.Tanh: torch.tanh_,
        torch.nn.Sigmoid: torch.sigmoid_,
        torch.nn.ReLU: torch.relu_,
        torch.nn.SiLU: torch.nn.functional.silu,
    }

Step = Tuple[Dict[str, Any], Any]  # (a Linear's _parameters, activation function or None)


def linear_plan(seq: Any) -> Optional[tuple]:
    """``(seq, modules, linear, act_fn)`` when ``seq`` (an ``nn.Sequential``) is
    ``Linear [-> activation]`` that can run as plain functional calls, else None."""
    if torch is None:
        return None
    mods = tuple(seq._modules.values())
    if not mods or type(mods[0]) is not _Linear or len(mods) > 2:
        return None
    act_fn = None
    if len(mods) == 2:
        act = mods[1]
        act_fn = _FUNCTIONAL_ACTIVATIONS.get(type(act))
        if act_fn is None or getattr(act, "inplace", False):
            return None
    return seq, mods, mods[0], act_fn


def run_linear_plan(plan: Optional[tuple], seq: Any, x: Any) -> Any:
    """``seq(x)``, as the functional calls of ``plan`` (see :func:`linear_plan`) where exact."""
    if plan is not None and plan[0] is seq and FUNCTIONAL.active and _plan_usable(plan):
        params = plan[2]._parameters
        out = _linear(x, params["weight"], params["bias"])
        act_fn = plan[3]
        return out if act_fn is None else act_fn(out)
    return seq(x)


def _plan_usable(plan: tuple) -> bool:
    seq, mods = plan[0], plan[1]
    if tuple(seq._modules.values()) != mods or type(mods[0]) is not _Linear:
        return False  # modules swapped, or e.g. a parametrization was registered
    for m in (seq, *mods):
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return False
    return not _global_hooks_or_tracing()


def _global_hooks_or_tracing() -> bool:
    g = _torch_module
    return bool(
        g._global_forward_hooks
        or g._global_forward_pre_hooks
        or g._global_backward_hooks
        or g._global_backward_pre_hooks
        or _tracing_state()
    )


class FunctionalPlan:
    """Named chains of ``SlimFC`` layers, replayed as functional calls.

    Args:
        owner: The module whose ``_modules`` hold the chains' containers; its
            layout is part of what :meth:`usable` checks (its own hooks are
            not: ``ModelV2.__call__`` never runs them).
        chains: Chain name -> ``(containers, layers)``: the ``nn.Sequential``
            containers the layers sit in (checked for swaps) and the ``SlimFC``
            layers in call order.
        layer_class: ``SlimFC`` (exactly this class; its instances keep their
            :func:`linear_plan` as ``_fast_plan``).

    A plan whose layers cannot all run functionally (another layer type, an
    in-place activation, ...) is never usable; see :func:`build_plan`.
    """

    def __init__(self, owner: Any, chains: Dict[str, Tuple[Sequence[Any], Sequence[Any]]], layer_class: type):
        self.chains: Dict[str, Tuple[Step, ...]] = {}
        # (The owner itself is not kept -- its children dict is -- so the plan
        # it stores does not form a reference cycle with it.)
        modules: list = []
        containers = [owner]
        for name, (seqs, layers) in chains.items():
            steps = []
            for fc in layers:
                plan = fc.__dict__.get("_fast_plan") if type(fc) is layer_class else None
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
        if not FUNCTIONAL.active or any(self._hook_dicts) or _global_hooks_or_tracing():
            return False
        return tuple(map(type, self._modules)) == self._types and self._containers == self._layout

    def run(self, name: str, x: Any) -> Any:
        """Applies chain ``name`` to ``x`` (call :meth:`usable` first)."""
        for params, act_fn in self.chains[name]:
            x = _linear(x, params["weight"], params["bias"])
            if act_fn is not None:
                x = act_fn(x)
        return x


def build_plan(
    owner: Any, chains: Dict[str, Tuple[Sequence[Any], Sequence[Any]]], layer_class: type
) -> Optional[FunctionalPlan]:
    """A :class:`FunctionalPlan`, or None if some layer cannot run functionally."""
    try:
        return FunctionalPlan(owner, chains, layer_class)
    except ValueError:
        return None
