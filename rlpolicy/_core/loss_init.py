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
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from rlpolicy.policy.policy import Policy
    from rlpolicy.policy.sample_batch import SampleBatch

logger = logging.getLogger(__name__)

# Columns the sampler needs to assemble episodes; never pruned (RLlib 1.11, plus
# gymnasium's terminateds/truncateds, which RLlib 2.x keeps next to dones).
ALWAYS_KEPT = ("eps_id", "agent_index", "unroll_id", "dones", "terminateds", "truncateds",
               "rewards", "infos")
# Columns never tagged "postprocessing only" (RLlib 1.11 adds obs embeddings).
NEVER_TAGGED = ALWAYS_KEPT + ("obs_embeds",)
SEQ_LENS = "seq_lens"


def default_view_requirements(observation_space: gym.Space, action_space: gym.Space) -> Dict[str, Any]:
    """The view requirements every policy starts from (RLlib 1.11's defaults).

    Columns that turn out to be unused are removed again by the dummy-batch
    loss initialisation.
    """
    from rlpolicy.policy.view_requirement import ViewRequirement as VR

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
# (bounds casting and checks) costs far more than copying a finished one.
_BOX_PROTOTYPES: Dict[tuple, gym.spaces.Box] = {}


def new_box(low: float, high: float, shape: tuple, dtype: Any = np.float32) -> gym.spaces.Box:
    """A new ``gym.spaces.Box(low, high, shape, dtype)``, copied from a cached
    prototype: its arrays are copies and it has a fresh (unseeded) RNG."""
    key = (low, high, tuple(shape), dtype if dtype is np.float32 else np.dtype(dtype).str)
    proto = _BOX_PROTOTYPES.get(key)
    if proto is None:
        proto = gym.spaces.Box(low, high, shape=tuple(shape), dtype=dtype)
        if len(_BOX_PROTOTYPES) < 256:
            _BOX_PROTOTYPES[key] = proto
    # What copy.copy does for a freshly built Box (gymnasium's __setstate__
    # only adds keys missing from legacy pickles), minus its generic machinery.
    state = dict(proto.__dict__)
    for name, value in state.items():
        if isinstance(value, np.ndarray):
            state[name] = value.copy()
    state["_np_random"] = None
    box = object.__new__(type(proto))
    box.__dict__.update(state)
    return box


_Box, _Discrete = gym.spaces.Box, gym.spaces.Discrete


def _dummy_column(view_col: str, view_req: Any, batch_size: int, config: dict) -> Any:
    space = view_req.space
    cls = type(space)
    if ((cls is _Box or (cls is _Discrete and not space.start)) and batch_size > 0
            and type(view_req.shift) is int and view_req.shift_from is None):
        # The common column (what get_dummy_batch_for_space fills with 0.0), directly.
        return np.zeros((batch_size, *space.shape), space.dtype)
    from rlpolicy.utils.spaces.space_utils import get_dummy_batch_for_space

    data_col = view_req.data_col or view_col
    flatten = isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)) and (
        (data_col == "obs" and not config.get("_disable_preprocessor_api", False))
        or (data_col == "actions" and not config.get("_disable_action_flattening", False)))
    if flatten:
        # Observations are flattened by the preprocessor (one-hot discrete parts); RLlib
        # 1.11 counts 1 per Discrete here and breaks every model on such spaces.
        if data_col == "obs":  # the policy's own flat space (as the tf placeholders)
            from rlpolicy._core.obs_prep import prepare_observation_space
            flat = prepare_observation_space(space, config)
            return np.zeros((batch_size, *flat.shape), np.float32)
        # Actions: each leaf's own dummy (inside its space, e.g. Discrete(n, start=s) -> s).
        from rlpolicy.utils.spaces.space_utils import flatten_action_batch
        return flatten_action_batch(get_dummy_batch_for_space(space, batch_size=batch_size),
                                    np.float32)
    if view_req.shift_from is not None or isinstance(view_req.shift, (list, tuple, np.ndarray)):
        time_size = len(getattr(view_req, "shift_arr", view_req.shift))
        return get_dummy_batch_for_space(space, batch_size=batch_size, time_size=time_size)
    if isinstance(space, gym.spaces.Space):
        return get_dummy_batch_for_space(space, batch_size=batch_size, fill_value=0.0)
    # A non-space "space" is a fixed initial value (e.g. a non-zero RNN state).
    return [space for _ in range(batch_size)]


def dummy_batch_from_view_requirements(view_requirements: Dict[str, Any], batch_size: int,
                                       config: dict) -> "SampleBatch":
    """Builds a batch of zeros with one column per view requirement.

    Args:
        view_requirements: Column name -> ViewRequirement.
        batch_size: Number of rows.
        config: Policy config (reads ``_disable_preprocessor_api`` and
            ``_disable_action_flattening``: Dict/Tuple obs/actions are given
            as flat float columns unless these are set).
    """
    from rlpolicy.policy.sample_batch import SampleBatch

    return SampleBatch({col: _dummy_column(col, vr, batch_size, config)
                        for col, vr in view_requirements.items()})


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


def prune_view_requirements(view_requirements: Dict[str, Any], record: AccessRecord, *,
                            protected: Set[str], has_loss: bool, keep_all: bool = False) -> List[str]:
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

    Returns:
        The names of the deleted columns.
    """
    from rlpolicy.policy.view_requirement import ViewRequirement

    all_accessed = record.all_accessed
    for key in sorted(all_accessed):
        if key not in view_requirements and key != SEQ_LENS:
            view_requirements[key] = ViewRequirement(used_for_compute_actions=False)
    if has_loss:
        for key in record.postprocess_accessed:
            if (key not in record.train_accessed and key in view_requirements
                    and key not in protected and key not in NEVER_TAGGED):
                view_requirements[key].used_for_training = False
    removed: List[str] = []
    if not has_loss:  # RLlib 1.11 tags and removes only when the policy has a loss
        return removed
    for key in list(view_requirements):
        if key in all_accessed or key in ALWAYS_KEPT or key in protected:
            continue
        if key in record.postprocess_deleted:
            logger.warning("SampleBatch column %r was deleted by hand in postprocessing; rlpolicy "
                           "removes unused columns itself, so drop the `del` from your "
                           "postprocessing function", key)
        elif not keep_all:
            del view_requirements[key]
            removed.append(key)
    return removed


def _lazy(policy: "Policy", batch: "SampleBatch") -> "SampleBatch":
    fn = getattr(policy, "_lazy_tensor_dict", None)
    return fn(batch) if callable(fn) else batch


def _probe_compute_actions(policy: "Policy", batch_size: int) -> tuple:
    """Step 1: act on a dummy batch; mark which columns acting needs."""
    from rlpolicy.policy.view_requirement import ViewRequirement

    vrs = policy.view_requirements
    dummy = policy._get_dummy_batch_from_view_requirements(batch_size)
    _lazy(policy, dummy)
    _, state_outs, extra_outs = policy.compute_actions_from_input_dict(dummy, explore=False)
    for key, vr in vrs.items():
        if key not in dummy.accessed_keys:
            vr.used_for_compute_actions = False
    for key, value in (extra_outs or {}).items():
        if key in vrs:
            continue
        shape = getattr(value, "shape", None)
        space = (new_box(-1.0, 1.0, tuple(shape[1:]), _numpy_dtype(value.dtype))
                 if shape is not None else None)
        vrs[key] = ViewRequirement(space=space, used_for_compute_actions=False)
    for key in dummy.accessed_keys:
        if key not in vrs:
            vrs[key] = ViewRequirement(space=new_box(float("-inf"), float("inf"), ()))
        vrs[key].used_for_compute_actions = True
    return state_outs, set(dummy.accessed_keys)


def _numpy_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype for a numpy or torch dtype (``torch.float32`` -> float32)."""
    if isinstance(dtype, np.dtype):
        return dtype
    return np.dtype(str(dtype).split(".")[-1])


def _cut_states_to_sequences(batch: "SampleBatch", batch_size: int) -> np.ndarray:
    # RNN policies: B=4 sequences of batch_size // 4 steps, one state per sequence.
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
    given, else ``policy_cls.loss`` if the class overrides ``Policy.loss``, else
    None (the policy cannot learn)."""
    from rlpolicy.policy.policy import Policy

    if loss is not None:
        return loss
    return policy_cls.loss if policy_cls.loss is not Policy.loss else None


def _call_loss(policy: "Policy", train_batch: "SampleBatch") -> bool:
    loss_fn = resolve_loss(type(policy), getattr(policy, "_loss", None))
    if loss_fn is None:
        return False
    loss_fn(policy, getattr(policy, "model", None), policy.dist_class, train_batch)
    return True


def _run_postprocess_and_loss(policy: "Policy", batch_size: int, state_outs: list,
                              stats_fn: Optional[Callable]) -> tuple:
    """Step 2: postprocess a fresh dummy batch, then run loss and stats on it."""
    dummy = policy._get_dummy_batch_from_view_requirements(batch_size)
    dummy.set_get_interceptor(None)
    policy._dummy_batch = dummy
    exploration = getattr(policy, "exploration", None)
    if exploration is not None:
        exploration.postprocess_trajectory(policy, dummy)
    post = policy.postprocess_trajectory(dummy)
    seq_lens = _cut_states_to_sequences(post, batch_size) if state_outs else None
    post_record = (set(dummy.accessed_keys), set(dummy.added_keys), set(dummy.deleted_keys))
    train_batch = _lazy(policy, post)
    # The train batch is usually the very object postprocessing returned, so
    # its access log restarts here: what the loss reads is told apart from
    # what only postprocessing read. (RLlib 1.11's torch path shares one log,
    # which makes its "postprocessing only" tagging a no-op there.)
    train_batch.accessed_keys = set()
    train_batch.set_training(True)
    if seq_lens is not None:
        train_batch[SEQ_LENS] = seq_lens
    train_batch.count = dummy.count
    has_loss = _call_loss(policy, train_batch)
    if stats_fn is not None:
        stats_fn(policy, train_batch)
    return post_record, train_batch, has_loss


def initialize_loss_from_dummy_batch(policy: "Policy", auto_remove_unneeded_view_reqs: bool = True,
                                     stats_fn: Optional[Callable] = None) -> AccessRecord:
    """Runs ``policy`` once on dummy data and prunes its view requirements.

    Implements ``Policy._initialize_loss_from_dummy_batch``; see the module
    docstring. The batch size is ``max(4 * batch_divisibility_req, 32)``.

    Returns:
        The access record of the run.
    """
    policy._no_tracing = True  # eager tracing would hide column accesses
    try:
        batch_size = max(getattr(policy, "batch_divisibility_req", 1) * 4, 32)
        state_outs, compute_keys = _probe_compute_actions(policy, batch_size)
        post_record, train_batch, has_loss = _run_postprocess_and_loss(policy, batch_size, state_outs, stats_fn)
    finally:
        policy._no_tracing = False
    accessed, added, deleted = post_record
    record = AccessRecord(compute_accessed=compute_keys, postprocess_accessed=accessed,
                          postprocess_added=added, postprocess_deleted=deleted,
                          train_accessed=set(train_batch.accessed_keys))
    if has_loss:  # what learn_on_batch checks a train batch against
        policy._loss_columns = sorted(k for k in record.train_accessed if k != SEQ_LENS)
    if auto_remove_unneeded_view_reqs:
        model = getattr(policy, "model", None)
        # A policy without a model (a plain Policy subclass) protects what its
        # action computation read, as a model's own view requirements would be.
        protected = (set(getattr(model, "view_requirements", {}) or {}) if model is not None
                     else set(compute_keys))
        prune_view_requirements(policy.view_requirements, record, protected=protected,
                                has_loss=has_loss, keep_all=policy.config.get("output") is not None)
    return record


def update_view_requirements_from_init_state(policy: "Policy") -> None:
    """Adds ``state_in_i``/``state_out_i`` requirements from the initial RNN state.

    Implements ``Policy._update_model_view_requirements_from_init_state``: the
    model's (or, without a model, the policy's) ``get_initial_state()`` gives
    one entry per state tensor; existing user-provided entries are kept.
    """
    from rlpolicy.policy.view_requirement import ViewRequirement

    policy._model_init_state_automatically_added = True
    model = getattr(policy, "model", None)
    obj = model or policy
    if model is not None and not hasattr(model, "view_requirements"):
        model.view_requirements = {"obs": ViewRequirement(space=policy.observation_space)}
    init_state = _initial_state_of(policy, obj, model)
    targets = [obj.view_requirements]
    if hasattr(policy, "view_requirements") and policy.view_requirements is not obj.view_requirements:
        targets.append(policy.view_requirements)
    max_seq_len = (policy.config.get("model") or {}).get("max_seq_len", 1)
    for i, state in enumerate(init_state):
        space = _state_space(state)
        for vrs in targets:
            vrs.setdefault(f"state_in_{i}", ViewRequirement(
                f"state_out_{i}", shift=-1, used_for_compute_actions=True,
                batch_repeat_value=max_seq_len, space=space))
            vrs.setdefault(f"state_out_{i}", ViewRequirement(space=space, used_for_training=True))


def _initial_state_of(policy: "Policy", obj: Any, model: Any) -> list:
    if callable(getattr(obj, "get_initial_state", None)):
        return list(obj.get_initial_state())
    vrs = obj.view_requirements
    if _is_keras_model(model) and "state_in_0" not in vrs:
        obj.get_initial_state = lambda: [np.zeros_like(vr.space.sample())
                                         for k, vr in model.view_requirements.items()
                                         if k.startswith("state_in_")]
    else:
        obj.get_initial_state = lambda: []
        if "state_in_0" in vrs:
            policy.is_recurrent = lambda: True
    return []


def _is_keras_model(model: Any) -> bool:
    return model is not None and any(
        c.__name__ == "Model" and "keras" in c.__module__ for c in type(model).__mro__)


def _state_space(state: Any) -> Any:
    # An all-zero initial state is described by a Box (zeros are the default
    # fill); any other value is used as-is as the initial value.
    if hasattr(state, "shape") and hasattr(state, "dtype"):
        if bool((state == 0.0).all()):
            return gym.spaces.Box(-1.0, 1.0, shape=tuple(state.shape))
    return state
