"""Dummy-batch loss initialisation and view-requirement pruning (framework-neutral).

RLlib 1.11 runs every new policy once through ``compute_actions_from_input_dict``,
``postprocess_trajectory`` and the loss on a batch of zeros built from the
policy's view requirements. ``SampleBatch`` records which columns each step
read, added or deleted; from that record the policy learns which columns it
needs for acting, which only for postprocessing, and which not at all, and
prunes its view requirements so samplers collect no dead data.

The record and the pruning rule are kept apart (:class:`AccessRecord`,
:func:`prune_view_requirements`) so the rule can be tested without a policy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, MutableMapping, Optional, Set

import gymnasium as gym
import numpy as np

logger = logging.getLogger(__name__)

# Columns the sampler needs to assemble episodes; never pruned (RLlib 1.11, plus
# gymnasium's terminateds/truncateds, which RLlib 2.x keeps next to dones).
ALWAYS_KEPT = ("eps_id", "agent_index", "unroll_id", "dones", "terminateds", "truncateds", "rewards", "infos")
# Columns never tagged "postprocessing only" (RLlib 1.11 adds obs embeddings).
NEVER_TAGGED = ALWAYS_KEPT + ("obs_embeds",)
SEQ_LENS = "seq_lens"


def default_view_requirements(
    observation_space: gym.Space, action_space: gym.Space, VR: Callable[..., Any]
) -> Dict[str, Any]:
    """The view requirements every policy starts from (RLlib 1.11's defaults).

    ``VR`` makes one requirement (``ViewRequirement``'s signature). Columns
    that turn out to be unused are removed again by the dummy-batch loss
    initialisation.
    """

    def scalar() -> gym.spaces.Box:  # what a ViewRequirement without a space gets
        return new_box(float("-inf"), float("inf"), ())

    return {
        "obs": VR(space=observation_space),
        "new_obs": VR(data_col="obs", shift=1, space=observation_space),
        "actions": VR(space=action_space, used_for_compute_actions=False),
        "prev_actions": VR(data_col="actions", shift=-1, space=action_space),
        "rewards": VR(space=scalar()),
        "prev_rewards": VR(data_col="rewards", shift=-1, space=scalar()),
        "dones": VR(space=scalar()),
        # gymnasium's split of dones (dones = terminateds | truncateds), as RLlib 2.x
        # losses read them (DQN, SAC: no bootstrapping only after a real termination).
        "terminateds": VR(space=scalar()),
        "truncateds": VR(space=scalar()),
        "infos": VR(space=scalar()),
        "eps_id": VR(space=scalar()),
        "unroll_id": VR(space=scalar()),
        "agent_index": VR(space=scalar()),
        "t": VR(space=scalar()),
    }


# Pristine Boxes by (low, high, shape, dtype): constructing a gymnasium Box
# (bounds casting and checks) costs far more than copying a finished one. Each
# entry keeps the prototype's class, its non-array state and its array items.
_BOX_PROTOTYPES: Dict[tuple, tuple] = {}


def new_box(low: float, high: float, shape: tuple, dtype: Any = np.float32) -> gym.spaces.Box:
    """A new ``gym.spaces.Box(low, high, shape, dtype)``, copied from a cached
    prototype: its arrays are copies and it has a fresh (unseeded) RNG."""
    shape = shape if type(shape) is tuple else tuple(shape)
    key = (low, high, shape, dtype if dtype is np.float32 else np.dtype(dtype).str)
    entry = _BOX_PROTOTYPES.get(key)
    if entry is None:
        proto = gym.spaces.Box(low, high, shape=shape, dtype=dtype)
        # What copy.copy does for a freshly built Box (gymnasium's __setstate__
        # only adds keys missing from legacy pickles), minus its generic machinery.
        state = dict(proto.__dict__)
        state["_np_random"] = None
        arrays = tuple((k, v) for k, v in proto.__dict__.items() if isinstance(v, np.ndarray))
        entry = (type(proto), state, arrays)
        if len(_BOX_PROTOTYPES) < 256:
            _BOX_PROTOTYPES[key] = entry
    cls, state, arrays = entry
    box = object.__new__(cls)
    d = box.__dict__
    d.update(state)  # (the prototype's arrays, replaced by copies in place: same key order)
    for name, value in arrays:
        d[name] = value.copy()
    return box


_Box, _Discrete = gym.spaces.Box, gym.spaces.Discrete


def _dummy_column(
    view_col: str,
    view_req: Any,
    batch_size: int,
    config: Mapping[str, Any],
    flat_obs_space: Callable[[gym.Space], gym.Space],
) -> Any:
    space = view_req.space
    cls = type(space)
    if (
        (cls is _Box or (cls is _Discrete and not space.start))
        and batch_size > 0
        and type(view_req.shift) is int
        and view_req.shift_from is None
    ):
        # The common column (what get_dummy_batch_for_space fills with 0.0), directly.
        return np.zeros((batch_size, *space.shape), space.dtype)
    from rlpolicy.utils.spaces.space_utils import get_dummy_batch_for_space

    data_col = view_req.data_col or view_col
    flatten = isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)) and (
        (data_col == "obs" and not config.get("_disable_preprocessor_api", False))
        or (data_col == "actions" and not config.get("_disable_action_flattening", False))
    )
    if flatten:
        # Observations are flattened by the preprocessor (one-hot discrete parts); RLlib
        # 1.11 counts 1 per Discrete here and breaks every model on such spaces.
        if data_col == "obs":  # the policy's own flat space (as the tf placeholders)
            flat = flat_obs_space(space)
            return np.zeros((batch_size, *(flat.shape or ())), np.float32)
        # Actions: each leaf's own dummy (inside its space, e.g. Discrete(n, start=s) -> s).
        from rlpolicy.utils.spaces.space_utils import flatten_action_batch

        return flatten_action_batch(get_dummy_batch_for_space(space, batch_size=batch_size), np.float32)
    if view_req.shift_from is not None or isinstance(view_req.shift, (list, tuple, np.ndarray)):
        time_size = len(getattr(view_req, "shift_arr", view_req.shift))
        return get_dummy_batch_for_space(space, batch_size=batch_size, time_size=time_size)
    if isinstance(space, gym.spaces.Space):
        return get_dummy_batch_for_space(space, batch_size=batch_size, fill_value=0.0)
    # A non-space "space" is a fixed initial value (e.g. a non-zero RNN state).
    return [space for _ in range(batch_size)]


def dummy_columns(
    view_requirements: Mapping[str, Any],
    batch_size: int,
    config: Mapping[str, Any],
    *,
    flat_obs_space: Callable[[gym.Space], gym.Space],
) -> Dict[str, Any]:
    """A batch of zeros with one column per view requirement (a plain dict).

    Args:
        view_requirements: Column name -> ViewRequirement.
        batch_size: Number of rows.
        config: Policy config (reads ``_disable_preprocessor_api`` and
            ``_disable_action_flattening``: Dict/Tuple obs/actions are given
            as flat float columns unless these are set).
        flat_obs_space: The flat (preprocessed) Box of a raw Dict/Tuple observation
            space, as the policy's own observation space is built.
    """
    return {
        col: _dummy_column(col, vr, batch_size, config, flat_obs_space)
        for col, vr in view_requirements.items()
    }


@dataclass
class AccessRecord:
    """Which columns each step of the dummy run touched."""

    compute_accessed: Set[str] = field(default_factory=set)
    postprocess_accessed: Set[str] = field(default_factory=set)
    postprocess_added: Set[str] = field(default_factory=set)
    postprocess_deleted: Set[str] = field(default_factory=set)
    train_accessed: Set[str] = field(default_factory=set)

    @property
    def all_accessed(self) -> Set[str]:
        """Columns needed after acting: read by postprocessing or loss, or added."""
        return self.train_accessed | self.postprocess_accessed | self.postprocess_added


def prune_view_requirements(
    view_requirements: Dict[str, Any],
    record: AccessRecord,
    *,
    protected: Set[str],
    has_loss: bool,
    keep_all: bool = False,
    new_requirement: Optional[Callable[..., Any]] = None,
) -> List[str]:
    """Applies RLlib 1.11's pruning rule to ``view_requirements`` in place.

    1. Columns read after acting but missing from the dict get a requirement
       (``used_for_compute_actions=False``).
    2. With a loss: columns read by postprocessing but not by the loss are
       tagged ``used_for_training=False`` (except sampler columns and
       ``protected`` ones).
    3. With a loss: columns nobody read are deleted, except sampler columns, ``protected``
       ones (the model's own view requirements), and columns the
       postprocessing deleted by hand (warned about). Nothing is deleted when
       ``keep_all`` (RLlib: ``config["output"]`` is set, data goes to disk).

    ``new_requirement`` makes the entries of rule 1 (``ViewRequirement``'s
    signature); by default the class of the dict's existing entries.

    Returns:
        The names of the deleted columns.
    """
    ViewRequirement = new_requirement or _requirement_class(view_requirements)
    all_accessed = record.all_accessed
    for key in sorted(all_accessed):
        if key not in view_requirements and key != SEQ_LENS:
            view_requirements[key] = ViewRequirement(used_for_compute_actions=False)
    if has_loss:
        for key in record.postprocess_accessed:
            if (
                key not in record.train_accessed
                and key in view_requirements
                and key not in protected
                and key not in NEVER_TAGGED
            ):
                view_requirements[key].used_for_training = False
    removed: List[str] = []
    if not has_loss:  # RLlib 1.11 tags and removes only when the policy has a loss
        return removed
    for key in list(view_requirements):
        if key in all_accessed or key in ALWAYS_KEPT or key in protected:
            continue
        if key in record.postprocess_deleted:
            logger.warning(
                "SampleBatch column %r was deleted by hand in postprocessing; rlpolicy "
                "removes unused columns itself, so drop the `del` from your "
                "postprocessing function",
                key,
            )
        elif not keep_all:
            del view_requirements[key]
            removed.append(key)
    return removed


def _requirement_class(view_requirements: Mapping[str, Any]) -> Callable[..., Any]:
    for vr in view_requirements.values():
        return type(vr)
    raise ValueError("prune_view_requirements: pass new_requirement= for an empty view-requirements dict")


def numpy_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype for a numpy or torch dtype (``torch.float32`` -> float32)."""
    if isinstance(dtype, np.dtype):
        return dtype
    return np.dtype(str(dtype).split(".")[-1])


def cut_states_to_sequences(batch: MutableMapping[str, Any], batch_size: int) -> np.ndarray:
    """Cuts a dummy train batch's RNN states to B=4 sequences of ``batch_size // 4``
    steps (one state per sequence) and sets its ``seq_lens``; returns them."""
    num_seqs = 4
    i = 0
    while f"state_in_{i}" in batch:
        batch[f"state_in_{i}"] = batch[f"state_in_{i}"][:num_seqs]
        if f"state_out_{i}" in batch:
            batch[f"state_out_{i}"] = batch[f"state_out_{i}"][:num_seqs]
        i += 1
    seq_lens = np.full(num_seqs, batch_size // num_seqs, dtype=np.int32)
    batch[SEQ_LENS] = seq_lens
    return seq_lens


def resolve_loss(policy_cls: type, loss: Optional[Callable] = None) -> Optional[Callable]:
    """The loss callable ``(policy, model, dist_class, train_batch)``: ``loss`` if
    given, else ``policy_cls.loss`` if the class overrides the base class's
    ``loss`` (the first class of its hierarchy to define one: ``Policy``), else
    None (the policy cannot learn)."""
    if loss is not None:
        return loss
    # The definitions along the MRO: the first one is what the class uses, the last
    # one the base class's.
    definitions = [vars(c)["loss"] for c in policy_cls.__mro__ if "loss" in vars(c)]
    if len(definitions) < 2 or definitions[0] is definitions[-1]:
        return None
    return getattr(policy_cls, "loss", None)


def state_view_requirements(
    init_state: List[Any], max_seq_len: int, VR: Callable[..., Any]
) -> Dict[str, Any]:
    """The ``state_in_i`` / ``state_out_i`` requirements for an initial RNN state
    (one entry per state tensor; ``VR`` makes one requirement)."""
    out: Dict[str, Any] = {}
    for i, state in enumerate(init_state):
        space = state_space(state)
        out[f"state_in_{i}"] = VR(
            f"state_out_{i}",
            shift=-1,
            used_for_compute_actions=True,
            batch_repeat_value=max_seq_len,
            space=space,
        )
        out[f"state_out_{i}"] = VR(space=space, used_for_training=True)
    return out


def is_keras_model(model: Any) -> bool:
    """Whether ``model`` is a Keras model (checked by class name; no TF import)."""
    return model is not None and any(
        c.__name__ == "Model" and "keras" in c.__module__ for c in type(model).__mro__
    )


def state_space(state: Any) -> Any:
    """An all-zero initial state is described by a Box (zeros are the default
    fill); any other value is used as-is as the initial value."""
    if hasattr(state, "shape") and hasattr(state, "dtype"):
        if bool((state == 0.0).all()):
            return gym.spaces.Box(-1.0, 1.0, shape=tuple(state.shape))
    return state
