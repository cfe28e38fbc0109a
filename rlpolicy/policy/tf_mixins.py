"""Mixins for TF policies, graph mode (``"tf"``) and eager (``"tf2"``/``"tfe"``).

These are RLlib 1.11's TF policy mixins: ``LearningRateSchedule`` and
``EntropyCoeffSchedule`` (RLlib: ``policy/tf_policy.py``), ``KLCoeffMixin``
and ``ValueNetworkMixin`` (RLlib: ``agents/ppo/ppo_tf_policy.py``) and
``TargetNetworkMixin`` (soft target updates as in RLlib's SAC/DQN TF
policies). Mix them in before the policy base (``build_tf_policy(...,
mixins=[...])``) and call their ``__init__`` from ``before_loss_init`` so the
loss sees their variables.

The scheduled values (``cur_lr``, ``entropy_coeff``, ``kl_coeff``) are
non-trainable float32 TF variables, so a graph built once reads the current
value at every run. In graph mode they live in the policy's own ``tf1.Graph``
under the ``rlpolicy_mixins`` variable scope (tower copies of the policy in the
same graph share them) and are changed by running a prebuilt assign op in the
policy's session; an eager policy (no session) assigns them directly.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from rlpolicy._core.config import check_config_value
from rlpolicy._core.mixin_rules import adapted_kl_coeff, make_entropy_coeff_schedule, make_lr_schedule
from rlpolicy.policy._framework_policy import policy_lock
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.tf_utils import fast_function
from rlpolicy.utils.typing import SessionPolicy, TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()

_SCOPE = "rlpolicy_mixins"


# ------------------------------------------------------------------ scalar variables
_NO_SESSION_YET = object()


def _session_of(policy: object) -> Any:
    """The policy's ``tf1.Session`` in graph mode; None for an eager policy;
    ``_NO_SESSION_YET`` for a graph policy whose session does not exist yet
    (a mixin set up in ``before_init``, as RLlib's R2D2 does)."""
    get_session = getattr(policy, "get_session", None)
    if get_session is None:
        return None
    try:
        return get_session()
    except AttributeError:  # TFPolicy.get_session before DynamicTFPolicy made the session
        return _NO_SESSION_YET


class _ScalarVar:
    """A non-trainable float32 scalar variable plus the means to set it.

    Graph mode: the variable is looked up (or created and initialised) in the
    session's graph under ``rlpolicy_mixins/<name>``, with a placeholder-fed
    assign op built once. Eager: a plain ``tf.Variable``. Made before the
    graph policy has its session (``before_init``): the value waits, and
    ``attr`` of the policy holds the plain float, until
    ``create_pending_variables`` (called by ``DynamicTFPolicy`` once the
    session exists; it finds the record among the policy's attributes, where
    the mixin keeps it) creates the variable and sets ``attr`` to it.
    """

    var: Any  # the tf variable (a plain float while pending)

    def __init__(self, policy: Any, name: str, value: float, attr: Optional[str] = None):
        self.name, self.attr = name, attr
        self.session = _session_of(policy)
        if self.session is _NO_SESSION_YET:
            self.session, self.var, self._pending = None, float(value), True
            return
        self._pending = False
        self._create(value)

    def _create(self, value: float) -> None:
        if self.session is None:
            self.var = tf.Variable(float(value), trainable=False, name=self.name, dtype=tf.float32)
            return
        name = self.name
        with self.session.graph.as_default():
            existing = [v for v in tf1.global_variables() if v.op.name == f"{_SCOPE}/{name}"]
            if existing:  # a tower copy of the policy: share the main policy's variable
                self.var = existing[0]
            else:
                with tf1.variable_scope(_SCOPE, reuse=tf1.AUTO_REUSE):
                    self.var = tf1.get_variable(
                        name, initializer=float(value), trainable=False, dtype=tf.float32
                    )
                self.session.run(self.var.initializer)
            self._placeholder = tf1.placeholder(tf.float32, (), name=f"{name}_value")
            self._assign = self.var.assign(self._placeholder, read_value=False)

    def create_in(self, policy: object, session: Any) -> None:
        """Creates the waiting variable in ``session``'s graph; sets ``policy.<attr>`` to it."""
        if not self._pending:
            return
        self.session, self._pending = session, False
        self._create(self.var)
        if self.attr is not None:
            setattr(policy, self.attr, self.var)

    def set(self, value: float) -> None:
        """Writes ``value`` into the variable."""
        if self._pending:
            self.var = float(value)
        elif self.session is None:
            self.var.assign(float(value))
        else:
            self.session.run(self._assign, feed_dict={self._placeholder: float(value)})

    def get(self) -> float:
        """Reads the variable's current value."""
        if self._pending:
            return float(self.var)
        if self.session is None:
            return float(self.var.numpy())
        return float(self.session.run(self.var))


def create_pending_variables(policy: SessionPolicy) -> None:
    """Creates the variables of mixins set up before ``policy`` had its session.

    ``DynamicTFPolicy`` calls this with the policy's graph and session as
    defaults, right after creating them (before the model and the loss). The
    waiting variables are the ``_ScalarVar`` attributes the mixins keep on the
    policy (``_lr_var``, ``_entropy_coeff_var``, ``_kl_coeff_var``).
    """
    for var in list(vars(policy).values()):
        if isinstance(var, _ScalarVar):
            var.create_in(policy, policy.get_session())


def _set_optimizer_lr(optimizer: Any, value: float) -> None:
    """Sets the learning rate of an eager (Keras) optimizer, variable or not."""
    lr: Any = getattr(optimizer, "learning_rate", None)
    if lr is None:
        lr = getattr(optimizer, "lr", None)
    if hasattr(lr, "assign"):
        lr.assign(value)
    elif hasattr(optimizer, "learning_rate"):
        optimizer.learning_rate = value


# ------------------------------------------------------------------ schedules
@DeveloperAPI
class LearningRateSchedule:
    """Adds a piecewise-linear learning-rate schedule (``cur_lr``, a TF variable).

    The default optimizer of a policy with this mixin is Adam reading
    ``cur_lr`` (graph mode: ``tf1.train.AdamOptimizer(cur_lr)``). On every
    ``on_global_var_update`` the rate at the global timestep is written into
    ``cur_lr`` and, for eager policies, into their optimizers' learning rate.
    """

    @DeveloperAPI
    def __init__(self, lr: float, lr_schedule: Optional[List[List[Union[int, float]]]]):
        """Args:
        lr: The constant rate used when ``lr_schedule`` is None.
        lr_schedule: ``[[timestep, lr], ...]`` endpoints; after the last
            endpoint its value is kept.
        """
        self._lr_schedule = make_lr_schedule(lr_schedule)
        if self._lr_schedule is not None:
            lr = self._lr_schedule.value(0)
        else:  # read only without a schedule: checked here, where it is read
            check_config_value("lr", lr)
        self._lr_var = _ScalarVar(self, "lr", lr, attr="cur_lr")
        self.cur_lr = self._lr_var.var

    @override(Policy)
    def on_global_var_update(self, global_vars: Dict[str, TensorType]) -> None:
        super().on_global_var_update(global_vars)  # type: ignore[misc]  # the policy base, after the mixin in the MRO
        if self._lr_schedule is None:
            return
        value = self._lr_schedule.value(global_vars["timestep"])
        self._lr_var.set(value)
        if self._lr_var.session is None and not self._lr_var._pending:
            for opt in getattr(self, "_optimizers", None) or [getattr(self, "_optimizer", None)]:
                if opt is not None:
                    _set_optimizer_lr(opt, value)

    def optimizer(self) -> Any:
        """Adam with the scheduled rate: a tf1 optimizer in graph mode, a Keras one eagerly."""
        if _session_of(self) is None:
            return get_keras().optimizers.Adam(learning_rate=self._lr_var.get())
        return tf1.train.AdamOptimizer(learning_rate=self.cur_lr)


@DeveloperAPI
class EntropyCoeffSchedule:
    """Adds an entropy-coefficient schedule (``entropy_coeff``, a TF variable).

    ``entropy_coeff_schedule`` is either ``[[timestep, value], ...]`` endpoints
    or (older form) a single timestep by which the coefficient has decayed
    linearly from ``entropy_coeff`` to 0.
    """

    @DeveloperAPI
    def __init__(
        self,
        entropy_coeff: float,
        entropy_coeff_schedule: Optional[Union[int, List[List[Union[int, float]]]]],
    ):
        self._entropy_coeff_schedule = make_entropy_coeff_schedule(entropy_coeff, entropy_coeff_schedule)
        if self._entropy_coeff_schedule is not None:
            entropy_coeff = self._entropy_coeff_schedule.value(0)
        self._entropy_coeff_var = _ScalarVar(self, "entropy_coeff", entropy_coeff, attr="entropy_coeff")
        self.entropy_coeff = self._entropy_coeff_var.var

    @override(Policy)
    def on_global_var_update(self, global_vars: Dict[str, TensorType]) -> None:
        super().on_global_var_update(global_vars)  # type: ignore[misc]  # the policy base, after the mixin in the MRO
        if self._entropy_coeff_schedule is not None:
            self._entropy_coeff_var.set(self._entropy_coeff_schedule.value(global_vars["timestep"]))


# ------------------------------------------------------------------ PPO
@DeveloperAPI
class KLCoeffMixin:
    """Adds PPO's adaptive KL coefficient: ``kl_coeff`` (TF variable read by
    the loss), ``kl_coeff_val`` (its python value) and ``update_kl``.

    The coefficient is part of the policy state (``"current_kl_coeff"``).
    """

    config: TrainerConfigDict  # the host policy's

    @DeveloperAPI
    def __init__(self, config: TrainerConfigDict):
        """Reads ``config["kl_coeff"]`` (start value) and ``config["kl_target"]``."""
        self.kl_coeff_val = float(config["kl_coeff"])
        self.kl_target = config["kl_target"]
        self._kl_coeff_var = _ScalarVar(self, "kl_coeff", self.kl_coeff_val, attr="kl_coeff")
        self.kl_coeff = self._kl_coeff_var.var

    def update_kl(self, sampled_kl: float) -> float:
        """Grows the coefficient by 1.5x if the KL exceeds twice the target,
        halves it if the KL is below half the target; returns the new value."""
        new = adapted_kl_coeff(self.kl_coeff_val, sampled_kl, self.kl_target)
        if new != self.kl_coeff_val:
            self._set_kl_coeff(new)
        return self.kl_coeff_val

    def _set_kl_coeff(self, value: float) -> None:
        self.kl_coeff_val = float(value)
        self._kl_coeff_var.set(self.kl_coeff_val)

    @override(Policy)
    def get_state(self) -> Dict[str, Any]:
        state = super().get_state()  # type: ignore[misc]  # the policy base, after the mixin in the MRO
        state["current_kl_coeff"] = self.kl_coeff_val
        return state

    @override(Policy)
    def set_state(self, state: Dict[str, Any]) -> None:
        """Restores the base state, then the coefficient (``config["kl_coeff"]``
        if the state has none). A bad coefficient, or a state the base refuses,
        changes nothing.

        Raises:
            TypeError: If ``current_kl_coeff`` is not a real number.
        """
        state = dict(state)
        value = state.pop("current_kl_coeff", self.config["kl_coeff"])
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, np.number))
            or not np.isfinite(value)
        ):
            raise TypeError(f"set_state: current_kl_coeff must be a finite number, got {value!r}")
        super().set_state(state)  # type: ignore[misc]  # the policy base, after the mixin in the MRO
        self._set_kl_coeff(float(value))


@DeveloperAPI
class ValueNetworkMixin:
    """Adds ``self._value(**input_dict) -> float``: the model's value estimate
    for a single observation (GAE bootstrapping).

    Without ``use_gae`` (or ``vtrace``) in the config it always returns 0.0.
    Accepts RLlib's TF signature ``(obs_space, action_space, config)`` and the
    torch one ``(config)``.
    """

    model: Any  # the host policy's ModelV2

    @DeveloperAPI
    def __init__(self, *args: Any, config: Optional[TrainerConfigDict] = None):
        config = _config_arg(args, config, "ValueNetworkMixin")
        if not (config.get("use_gae") or config.get("vtrace")):
            self._value = _zero_value
            return
        session = _session_of(self)
        if session is None:
            self._value = self._eager_value
        else:
            from rlpolicy.utils.tf_utils import make_tf_callable

            self._value_graph_fn = make_tf_callable(session)(self._value_op)
            self._value = self._graph_value

    def _graph_value(self, **input_dict: Any) -> float:
        return float(self._value_graph_fn(**input_dict))

    def _value_op(self, **input_dict: Any) -> TensorType:
        self.model(SampleBatch(input_dict))
        # [0]: the value of the single observation.
        return self.model.value_function()[0]

    def _eager_value(self, **input_dict: Any) -> float:
        tensors = {k: tf.convert_to_tensor(v) for k, v in input_dict.items()}
        # The model's value output is shared state: no action computation in between.
        with policy_lock(self):
            return float(self._value_op(**tensors).numpy())


def _zero_value(*args: Any, **kwargs: Any) -> float:
    return 0.0


def _config_arg(args: Tuple[Any, ...], config: Optional[dict], who: str) -> dict:
    if config is None and args:
        config = args[-1]
    if not isinstance(config, dict) or len(args) not in (0, 1, 3):
        raise TypeError(
            f"{who}.__init__ takes (config) or (obs_space, action_space, config); "
            f"got {len(args)} positional argument(s), config={type(config).__name__}"
        )
    return config


# ------------------------------------------------------------------ target network
@DeveloperAPI
class TargetNetworkMixin:
    """Adds ``update_target(tau)``: soft-copies ``self.model`` into
    ``self.target_model`` (``target = tau * model + (1 - tau) * target``).

    Needs ``policy.target_model`` (built in ``make_model``). The constructor
    does a hard (tau=1) sync. ``variables()`` includes the target's
    variables, so weights and checkpoints carry the target network.
    """

    config: TrainerConfigDict  # the host policy's

    @DeveloperAPI
    def __init__(self, *args: Any, **kwargs: Any):
        self.update_target(tau=1.0)

    def update_target(self, tau: Optional[float] = None) -> None:
        """Moves the target towards the model; ``tau`` defaults to
        ``config["tau"]`` (1.0 if unset).

        Raises:
            ValueError: Without ``target_model``, or when its variables do not
                pair up with the model's.
        """
        tau = float(tau or self.config.get("tau", 1.0))
        pairs = _model_target_pairs(self)
        session = _session_of(self)
        if session is None:
            # One traced function for all pairs: eagerly, ~4 ops per variable pair
            # cost more in Python dispatch than the arithmetic (SAC's update ran at
            # ~20% of a learn step). Rebuilt if the variables are ever replaced.
            key = tuple(id(v) for pair in pairs for v in pair)
            cached = getattr(self, "_eager_target_update", None)
            if cached is None or cached[0] != key:
                cached = (key, fast_function(_polyak_fn(pairs)))
                self._eager_target_update = cached
            cached[1](tf.constant(tau, tf.float32))
            return
        if getattr(self, "_target_update", None) is None:
            _initialize_pairs(session, pairs)
            with session.graph.as_default():
                tau_ph = tf1.placeholder(tf.float32, (), name="target_tau")
                op = tf.group(*[t.assign(tau_ph * v + (1.0 - tau_ph) * t) for v, t in pairs])
            self._target_update = (tau_ph, op)
        tau_ph, op = self._target_update
        session.run(op, feed_dict={tau_ph: tau})

    def variables(self) -> List[TensorType]:
        """The policy's variables plus the target model's."""
        own = list(super().variables())  # type: ignore[misc]  # the policy base, after the mixin in the MRO
        known = {id(v) for v in own}
        target = getattr(self, "target_model", None)
        extra = [v for v in (target.variables() if target is not None else []) if id(v) not in known]
        return own + extra


def _initialize_pairs(session: Any, pairs: List[Tuple[Any, Any]]) -> None:
    """Graph mode: gives the not yet initialised model/target variables their
    initial values, so the mixin works from ``before_loss_init`` too (the
    policy later initialises only variables that still have no value)."""
    variables = [v for pair in pairs for v in pair]
    with session.graph.as_default():
        flags = session.run([tf1.is_variable_initialized(v) for v in variables])
        todo = [v for v, ok in zip(variables, flags) if not ok]
        if todo:
            session.run(tf1.variables_initializer(todo))


def _polyak_fn(pairs: List[Tuple[Any, Any]]) -> Any:
    """``update(tau)``: ``target = tau * var + (1 - tau) * target`` for every pair."""

    def update(tau: Any) -> None:
        for var, target in pairs:
            target.assign(tau * var + (1.0 - tau) * target)

    return update


def _model_target_pairs(policy: Any) -> List[Tuple[Any, Any]]:
    who = type(policy).__name__
    target = getattr(policy, "target_model", None)
    if target is None:
        raise ValueError(
            f"{who}.update_target(): the policy has no target_model; set policy.target_model in make_model"
        )
    model_vars, target_vars = policy.model.variables(), target.variables()
    if len(model_vars) != len(target_vars):
        raise ValueError(
            f"{who}.update_target(): model has {len(model_vars)} variables but "
            f"target_model has {len(target_vars)}; they must have the same layout"
        )
    for v, t in zip(model_vars, target_vars):
        if v.shape.as_list() != t.shape.as_list():
            raise ValueError(
                f"{who}.update_target(): variable {v.name} has shape "
                f"{tuple(v.shape.as_list())} but target {t.name} has "
                f"{tuple(t.shape.as_list())}"
            )
    return list(zip(model_vars, target_vars))


__all__ = [
    "LearningRateSchedule",
    "EntropyCoeffSchedule",
    "KLCoeffMixin",
    "ValueNetworkMixin",
    "TargetNetworkMixin",
]
