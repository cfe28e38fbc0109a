"""Helpers for users' own test suites (RLlib 1.11's ``ray.rllib.utils.test_utils``).

``check`` compares nested structures of numbers and tensors,
``framework_iterator`` loops a test body over the installed frameworks,
``check_compute_single_action`` exercises a policy's single-action API,
``check_learning_achieved`` and ``check_train_results`` check results.

Differences from RLlib 1.11 (see ``docs/porting.md``, "Testing your port"):
graph-mode ``"tf"`` iterations run inside a fresh ``tf1.Graph`` (and
session) instead of switching the whole process out of eager mode;
``check_compute_single_action`` also accepts a ``Policy`` and then checks
its actions against the action space the way 1.11 checks a Trainer's;
``check_learning_achieved`` takes result dicts as well as tune results and
never counts a NaN reward as reached. No framework is imported by this
module itself: ``check`` only looks for tensors of frameworks that are
already imported.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import random
import sys
import time
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union, cast

import numpy as np
import tree

from rlpolicy.utils.framework import try_import_jax, try_import_tf, try_import_torch
from rlpolicy.utils.typing import PartialTrainerConfigDict

logger = logging.getLogger(__name__)

_KNOWN_FRAMEWORKS = ("tf2", "tf", "tfe", "torch", "jax", None)


# ----------------------------------------------------------------------------------------
# framework_iterator
# ----------------------------------------------------------------------------------------


def framework_iterator(
    config: Optional[PartialTrainerConfigDict] = None,
    frameworks: Sequence[str] = ("tf2", "tf", "tfe", "torch"),
    session: bool = False,
    with_eager_tracing: bool = False,
    time_iterations: Optional[dict] = None,
) -> Iterator[Union[Optional[str], Tuple[Optional[str], Optional[Any]]]]:  # (a tf1.Session)
    """Loops a test body over the frameworks given, in the context each needs.

    For every framework in ``frameworks`` that is installed (others are
    skipped with a warning), ``config["framework"]`` is set and the body runs:

    * ``"tf"``: inside a fresh ``tf1.Graph`` made the default graph (so
      ``tf.executing_eagerly()`` is False in the body) and, with
      ``session=True``, a ``tf1.Session`` on that graph entered as the
      default session, its graph seeded with 42. Unlike RLlib 1.11 the
      process is never switched out of eager mode: after the body, eager
      execution is as it was before.
    * ``"tf2"`` / ``"tfe"``: inside TF's eager mode (``tfe`` is 1.11's name
      for eager TF; when both are asked for, only ``"tf2"`` runs on TF 2).
      With ``with_eager_tracing=True`` the body runs twice, first with
      ``config["eager_tracing"] = True``, then with False (1.11's order);
      afterwards ``eager_tracing`` is left False.
    * ``"torch"`` (and ``"jax"``, ``None``): no context.

    Other config keys (``num_gpus``, ``_fake_gpus``, ...) are not touched. As
    in RLlib 1.11, ``config["framework"]`` keeps the last framework's value
    after the loop.

    Args:
        config: A config dict to alter in place for each iteration.
        frameworks: The frameworks to loop through (or one as a string);
            allowed: "tf2", "tf", "tfe", "torch", "jax" and None.
        session: For "tf": enter a ``tf1.Session`` and yield ``(fw, sess)``;
            every iteration then yields a tuple (``sess`` None if not "tf").
        with_eager_tracing: For "tf2"/"tfe": run with and without tracing.
        time_iterations: If given, the seconds each iteration took are
            written into it, keyed by framework (``"tf2+tracing"`` for the
            traced tf2 run).

    Yields:
        The framework string, or ``(framework, session_or_None)`` if
        ``session`` is True.

    Raises:
        ValueError: For a framework name not in the allowed list.
    """
    config = config if config is not None else {}
    for fw in _frameworks_to_run(frameworks):
        if not _framework_available(fw):
            continue
        config["framework"] = fw
        tracings = [True, False] if fw in ("tf2", "tfe") and with_eager_tracing else [None]
        with contextlib.ExitStack() as stack:
            sess = _enter_framework_context(stack, fw, session)
            for tracing in tracings:
                if tracing is not None:
                    config["eager_tracing"] = tracing
                key = fw + ("+tracing" if tracing else "") if fw else str(fw)
                logger.info(
                    "framework_iterator: framework=%s%s",
                    fw,
                    "" if tracing is None else f" (eager_tracing={tracing})",
                )
                started = time.time()
                yield (fw, sess) if session else fw
                if time_iterations is not None:
                    time_iterations[key] = time.time() - started
                if tracing is not None:
                    config["eager_tracing"] = False


def _frameworks_to_run(frameworks: Union[str, None, Sequence[Optional[str]]]) -> List[Optional[str]]:
    """The list of frameworks to loop over, validated, with tf2/tfe de-duplicated."""
    fws = [frameworks] if isinstance(frameworks, str) or frameworks is None else list(frameworks)
    bad = [fw for fw in fws if fw not in _KNOWN_FRAMEWORKS]
    if bad:
        raise ValueError(
            f"framework_iterator: unknown framework(s) {bad}; allowed: "
            f"{', '.join(map(repr, _KNOWN_FRAMEWORKS))}"
        )
    if "tf2" in fws and "tfe" in fws:
        _, _, tfv = try_import_tf()
        # 1.11: both name eager TF; keep the one this TF version calls it by.
        fws.remove("tfe" if tfv == 2 else "tf2")
    return fws


def _framework_available(fw: Optional[str]) -> bool:
    """Whether ``fw`` can run here; logs a warning (as 1.11 does) when it cannot."""
    if fw is None:
        return True
    if fw == "torch":
        ok, why = try_import_torch()[0] is not None, "torch not installed"
    elif fw == "jax":
        ok, why = try_import_jax()[0] is not None, "jax/flax not installed"
    else:
        _, tf, tfv = try_import_tf()
        ok, why = tf is not None, "tensorflow not installed"
        if ok and fw == "tf2" and tfv != 2:
            ok, why = False, "tf version is < 2.0"
        if ok and fw in ("tf2", "tfe") and _eager_mode() is None:
            ok, why = False, "could not import TF's `eager_mode`"
    if not ok:
        logger.warning("framework_iterator skipping %s (%s)!", fw, why)
    return ok


def _eager_mode() -> Any:
    """TF's ``eager_mode`` context manager factory, or None."""
    from rlpolicy.utils.tf_modes import eager_mode

    return eager_mode()


def _enter_framework_context(
    stack: contextlib.ExitStack, fw: Optional[str], session: bool
) -> Optional[Any]:  # (a tf1.Session)
    """Enters what ``fw`` runs in (graph/session or eager mode) on ``stack``;
    returns the session (``"tf"`` with ``session=True``) or None."""
    if fw in ("tf2", "tfe"):
        stack.enter_context(_eager_mode()())
        return None
    if fw != "tf":
        return None
    tf1, _, _ = try_import_tf()
    graph = tf1.Graph()
    stack.enter_context(graph.as_default())
    if not session:
        return None
    sess = stack.enter_context(tf1.Session(graph=graph))
    tf1.set_random_seed(42)
    return sess


# ----------------------------------------------------------------------------------------
# check
# ----------------------------------------------------------------------------------------


def check(
    x: Any,
    y: Any,
    decimals: int = 5,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    false: bool = False,
) -> None:
    """Asserts that two (nested) structures are (almost) equal, or differ.

    Dicts must have the same keys, lists/tuples the same length; leaves are
    compared by kind: bools by truth value, None/str/int exactly, string
    arrays element-wise, everything else numerically. Numeric leaves may be
    numpy arrays, numbers, torch tensors, TF eager tensors or TF variables
    (a graph tensor ``x`` is evaluated in the default session, if it runs
    the tensor's graph, else in a new one).

    Args:
        x: The value to check (may hold tensors).
        y: The expected value (must not hold TF graph tensors).
        decimals: Numbers must agree to this many digits after the point
            (``np.testing.assert_almost_equal``); unused if ``atol`` or
            ``rtol`` is given.
        atol: Absolute tolerance (``np.testing.assert_allclose``; default 0
            when only ``rtol`` is given).
        rtol: Relative tolerance (default 1e-7 when only ``atol`` is given).
        false: Assert that ``x`` and ``y`` are NOT equal instead.

    Raises:
        AssertionError: If the check fails; the message names where (e.g.
            ``x['a'][1]``).
        ValueError: If ``y`` holds a TF graph tensor.
    """
    _check(x, y, "", _Tolerance(decimals, atol, rtol), false)


class _Tolerance(NamedTuple):
    decimals: int
    atol: Optional[float]
    rtol: Optional[float]


def _check(x: Any, y: Any, path: str, tol: _Tolerance, false: bool) -> None:
    if isinstance(x, dict):
        _check_dict(x, y, path, tol, false)
    elif isinstance(x, (tuple, list)):
        _check_sequence(x, y, path, tol, false)
    elif isinstance(x, (bool, np.bool_)):
        same = bool(x) is bool(y)
        _assert(same != false, path, x, y, false)
    elif x is None or y is None or isinstance(x, str) or (isinstance(x, int) and _is_scalar_like(y)):
        _assert((x == y) != false, path, x, y, false)
    elif hasattr(x, "dtype") and getattr(x.dtype, "kind", None) in ("O", "U", "S"):
        _compare_arrays(lambda: np.testing.assert_array_equal(x, y), path, x, y, false)
    else:
        _check_numeric(x, y, path, tol, false)


def _is_scalar_like(y: Any) -> bool:
    """Whether ``y`` is a Python scalar (an int ``x`` is then compared exactly, as in 1.11)."""
    return isinstance(y, (int, float, complex, str, bytes))


def _check_dict(x: dict, y: Any, path: str, tol: _Tolerance, false: bool) -> None:
    if not isinstance(y, dict):
        raise AssertionError(f"check: x{path} is a dict but y{path} is a {type(y).__name__} ({y!r})")
    missing = [k for k in x if k not in y]
    if missing:
        raise AssertionError(f"check: y{path} lacks x{path}'s key(s) {missing}; y{path}={y!r}")
    extra = [k for k in y if k not in x]
    if extra:
        raise AssertionError(f"check: y{path} has key(s) {extra} that x{path} lacks; y{path}={y!r}")
    for key, value in x.items():
        _check(value, y[key], f"{path}[{key!r}]", tol, false)


def _check_sequence(x: Sequence, y: Any, path: str, tol: _Tolerance, false: bool) -> None:
    if not isinstance(y, (tuple, list)):
        raise AssertionError(
            f"check: x{path} is a {type(x).__name__} but y{path} is a "
            f"{type(y).__name__} ({y!r}); both must be lists/tuples"
        )
    if len(x) != len(y):
        raise AssertionError(f"check: x{path} has length {len(x)} but y{path} has length {len(y)}")
    for i, (xi, yi) in enumerate(zip(x, y)):
        _check(xi, yi, f"{path}[{i}]", tol, false)


def _assert(ok: bool, path: str, x: Any, y: Any, false: bool) -> None:
    if not ok:
        relation = "is the same as" if false else "is not the same as"
        raise AssertionError(f"check: x{path} ({x!r}) {relation} y{path} ({y!r})")


def _compare_arrays(compare: Any, path: str, x: Any, y: Any, false: bool) -> None:
    """Runs a numpy ``assert_*`` and turns its outcome into the check's outcome."""
    try:
        compare()
    except AssertionError as e:
        if not false:
            raise AssertionError(f"check: x{path} and y{path} differ:{e}") from None
    else:
        if false:
            raise AssertionError(f"check: x{path} ({x!r}) is the same as y{path} ({y!r})")


def _check_numeric(x: Any, y: Any, path: str, tol: _Tolerance, false: bool) -> None:
    x, y = _to_numpy(x, "x", path), _to_numpy(y, "y", path)
    if tol.atol is None and tol.rtol is None:
        compare = lambda: np.testing.assert_almost_equal(x, y, decimal=tol.decimals)  # noqa: E731
    else:
        atol = 0.0 if tol.atol is None else tol.atol
        rtol = 1e-7 if tol.rtol is None else tol.rtol
        compare = lambda: np.testing.assert_allclose(x, y, atol=atol, rtol=rtol)  # noqa: E731
    _compare_arrays(compare, path, x, y, false)


def _to_numpy(v: Any, role: str, path: str) -> Any:
    """A torch/TF tensor or TF variable as numpy; anything else unchanged."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    tf = sys.modules.get("tensorflow")
    if tf is None or not (tf.is_tensor(v) or isinstance(v, tf.Variable)):
        return v
    if not hasattr(v, "graph"):  # Eager tensors and variables have no graph.
        return v.numpy()
    if role == "y":
        raise ValueError(
            f"check: y{path} (the expected value) must not be a TF graph tensor ({v!r}); use a numpy array"
        )
    return _run_in_session(v)


def _run_in_session(t: Any) -> np.ndarray:
    """Evaluates a graph tensor in the default session if it runs ``t``'s graph,
    else in a new session on that graph (RLlib 1.11 always uses a new one)."""
    tf1 = sys.modules["tensorflow"].compat.v1
    sess = tf1.get_default_session()
    if sess is not None and sess.graph is t.graph:
        return sess.run(t)
    with tf1.Session(graph=t.graph) as new_sess:
        return new_sess.run(t)


# ----------------------------------------------------------------------------------------
# check_compute_single_action
# ----------------------------------------------------------------------------------------

# 1.11's loop: clipping is only varied when not unsquashing (unsquashing clips too).
_UNSQUASH_CLIP_SETTINGS = [(True, False)] + [(u, c) for u in (False, None) for c in (True, False, None)]


class _SingleInputs(NamedTuple):
    """One call's unbatched inputs."""

    obs: Any
    state_in: Optional[List[Any]]
    prev_action: Any
    prev_reward: Optional[float]


def check_compute_single_action(
    trainer: Any, include_state: bool = False, include_prev_action_reward: bool = False
) -> None:
    """Calls ``compute_single_action`` with many argument combinations and checks the results.

    ``trainer`` may be a Policy, or a trainer-like object holding one: with
    ``get_policy(policy_id)`` (and a ``workers.local_worker().policy_map``,
    whose first policy is used) or a ``policy`` attribute. A trainer-like
    object that has its own ``compute_single_action`` is exercised too,
    called as RLlib 1.11 calls a Trainer's (``full_fetch``, ``policy_id``,
    ``unsquash_action``, ``clip_action``).

    For each of explore True/False, the policy's ``compute_single_action`` is
    called with a sampled observation (Box observations clipped to [-1, 1]),
    with the model's initial state (``include_state``) and a sampled previous
    action and reward of 1.0 (``include_prev_action_reward``); the state
    outputs must have the state inputs' shapes. With explore False,
    ``compute_actions_from_input_dict`` on the batched inputs must give the
    same outputs as ``compute_single_action(input_dict=...)``. Then, for each
    unsquash/clip setting (None meaning ``config["normalize_actions"]`` /
    ``config["clip_actions"]``), the action, unsquashed or clipped as a
    Trainer would, must lie in the action space (for a Box space only if it
    was unsquashed or clipped), and a still-normalized Box action
    (``normalize_actions`` on, not unsquashed) must not exceed 3 in size.

    Args:
        trainer: The Policy or trainer-like object to test.
        include_state: Pass the model's initial state.
        include_prev_action_reward: Pass a previous action and reward.

    Raises:
        ValueError: If an action is outside the action space (or too large
            for a normalized action), or ``trainer`` holds no policy.
        AssertionError: If outputs do not match (shapes, input-dict path).
    """
    pol, pid, owner = _resolve_policy(trainer)
    sample = lambda space: _sample_inputs(
        pol,
        space,
        include_state,  # noqa: E731
        include_prev_action_reward,
    )
    targets = [(pol, pol.observation_space)]
    if owner is not None:
        targets.append((owner, _owner_obs_space(owner, pol, pid)))
    for what, obs_space in targets:
        for explore in (True, False):
            for full_fetch in (False, True) if what is owner else (False,):
                timestep = random.randint(0, 100000)
                if what is pol:
                    _check_input_dict_path(pol, sample(obs_space), explore, timestep)
                for unsquash, clip in _UNSQUASH_CLIP_SETTINGS:
                    _check_single_call(
                        what,
                        pol,
                        pid,
                        sample(obs_space),
                        explore=explore,
                        timestep=timestep,
                        full_fetch=full_fetch,
                        unsquash=unsquash,
                        clip=clip,
                    )


def _resolve_policy(trainer: Any) -> Tuple[Any, str, Any]:
    """(policy, policy id, trainer-like owner or None) for ``trainer``."""
    from rlpolicy.policy.policy import Policy
    from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID

    if isinstance(trainer, Policy):
        return trainer, DEFAULT_POLICY_ID, None
    pid = DEFAULT_POLICY_ID
    try:
        pid = next(iter(trainer.workers.local_worker().policy_map))
    except (AttributeError, StopIteration, TypeError):
        pass
    pol = trainer.get_policy(pid) if callable(getattr(trainer, "get_policy", None)) else None
    if pol is None:
        pol = getattr(trainer, "policy", None)
    if pol is None:
        raise ValueError(
            f"check_compute_single_action: {type(trainer).__name__} is not a Policy "
            "and has neither `get_policy()` nor a `policy` attribute"
        )
    owner = trainer if callable(getattr(trainer, "compute_single_action", None)) else None
    return pol, pid, owner


def _owner_obs_space(owner: Any, pol: Any, pid: str) -> Any:
    """The env's observation space as the trainer sees it (before preprocessing)."""
    space = pol.observation_space
    workers = getattr(owner, "workers", None) or getattr(owner, "_workers", None)
    local = getattr(workers, "local_worker", None)
    if callable(local) and callable(getattr(local(), "for_policy", None)):
        space = local().for_policy(lambda p: p.observation_space, policy_id=pid)
    return getattr(space, "original_space", space)


def _sample_inputs(
    pol: Any, obs_space: Any, include_state: bool, include_prev_action_reward: bool
) -> _SingleInputs:
    import gymnasium as gym

    obs = obs_space.sample()
    if isinstance(obs_space, gym.spaces.Box):
        obs = np.clip(obs, -1.0, 1.0)
    state_in = None
    if include_state:
        # 1.11 reads the model's; a plain Policy without a model has its own.
        holder = getattr(pol, "model", None) or pol
        state_in = list(holder.get_initial_state())
        if not state_in:
            vrs = getattr(holder, "view_requirements", None) or pol.view_requirements
            i = 0
            while f"state_in_{i}" in vrs:
                state_in.append(vrs[f"state_in_{i}"].space.sample())
                i += 1
    if include_prev_action_reward:
        return _SingleInputs(obs, state_in, pol.action_space.sample(), 1.0)
    return _SingleInputs(obs, state_in, None, None)


def _input_dict(inputs: _SingleInputs) -> Dict[str, Any]:
    from rlpolicy.policy.sample_batch import SampleBatch

    d = {SampleBatch.OBS: inputs.obs}
    if inputs.prev_action is not None:
        d[SampleBatch.PREV_ACTIONS] = inputs.prev_action
        d[SampleBatch.PREV_REWARDS] = inputs.prev_reward
    for i, s in enumerate(inputs.state_in or []):
        d[f"state_in_{i}"] = s
    return d


def _check_input_dict_path(pol: Any, inputs: _SingleInputs, explore: bool, timestep: int) -> None:
    """``compute_actions_from_input_dict`` on a batch of one must equal
    ``compute_single_action(input_dict=...)`` when not exploring."""
    from rlpolicy.policy.sample_batch import SampleBatch

    input_dict = _input_dict(inputs)
    batched = SampleBatch(tree.map_structure(lambda s: np.expand_dims(s, 0), input_dict))
    out = pol.compute_actions_from_input_dict(input_dict=batched, explore=explore, timestep=timestep)
    if isinstance(out[0], list):  # ES/ARS return action batches as lists (1.11).
        out = (np.array(out[0]), out[1], out[2])
    first = tree.map_structure(_first_row, out)
    if not _accepts_keyword(pol.compute_single_action, "input_dict"):
        return
    single = pol.compute_single_action(input_dict=input_dict, explore=explore, timestep=timestep)
    if not explore and not pol.config.get("noisy"):
        check(first, single)
    _check_state_shapes(inputs.state_in, single[1])


def _first_row(v: Any) -> Any:
    return v[0] if np.ndim(v) > 0 else v


def _accepts_keyword(fn: Any, name: str) -> bool:
    params = inspect.signature(fn).parameters.values()
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _check_single_call(
    what: Any,
    pol: Any,
    pid: str,
    inputs: _SingleInputs,
    *,
    explore: bool,
    timestep: int,
    full_fetch: bool,
    unsquash: Optional[bool],
    clip: Optional[bool],
) -> None:
    """One ``compute_single_action`` call on the policy or its owner, and its checks."""
    args = dict(
        prev_action=inputs.prev_action, prev_reward=inputs.prev_reward, explore=explore, timestep=timestep
    )
    unsquash_ = pol.config.get("normalize_actions", False) if unsquash is None else unsquash
    clip_ = pol.config.get("clip_actions", False) if clip is None else clip
    if what is pol:
        action, state_out, extra = pol.compute_single_action(inputs.obs, inputs.state_in, **args)
        if not isinstance(extra, dict):
            raise AssertionError(
                f"check_compute_single_action: {type(pol).__name__}."
                f"compute_single_action returned extra fetches of type "
                f"{type(extra).__name__}, expected a dict"
            )
        action = _postprocess_like_trainer(action, pol, unsquash_, clip_)
    else:
        out = what.compute_single_action(
            inputs.obs,
            inputs.state_in,
            full_fetch=full_fetch,
            policy_id=pid,
            unsquash_action=unsquash,
            clip_action=clip,
            **args,
        )
        action, state_out = (out[0], out[1]) if inputs.state_in or full_fetch else (out, None)
    if state_out:
        _check_state_shapes(inputs.state_in, state_out)
    _check_action_in_space(action, pol, unsquash_, clip_, what)


def _postprocess_like_trainer(action: Any, pol: Any, unsquash: bool, clip: bool) -> Any:
    """What RLlib 1.11's ``Trainer.compute_single_action`` does to the policy's action."""
    from rlpolicy.utils.spaces.space_utils import clip_action, unsquash_action

    if unsquash:
        return unsquash_action(action, pol.action_space_struct)
    if clip:
        return clip_action(action, pol.action_space_struct)
    return action


def _check_state_shapes(state_in: Optional[List[Any]], state_out: List[Any]) -> None:
    for i, (si, so) in enumerate(zip(state_in or [], state_out or [])):
        if tuple(np.shape(si)) != tuple(np.shape(so)):
            raise AssertionError(
                f"check_compute_single_action: state_out_{i} has shape "
                f"{tuple(np.shape(so))} but state_in_{i} has {tuple(np.shape(si))}"
            )


def _check_action_in_space(action: Any, pol: Any, unsquash: bool, clip: bool, what: Any) -> None:
    import gymnasium as gym

    space = pol.action_space
    is_box = isinstance(space, gym.spaces.Box)
    if (clip or unsquash or not is_box) and not space.contains(_as_space_value(action, space)):
        raise ValueError(
            f"check_compute_single_action: action {action!r} of {type(what).__name__} "
            f"is not in the action space {space} (unsquash={unsquash}, clip={clip})"
        )
    if is_box and not unsquash and pol.config.get("normalize_actions") and np.any(np.abs(action) > 3.0):
        raise ValueError(
            f"check_compute_single_action: action {action!r} of {type(what).__name__} "
            "should be in normalized space (normalize_actions=True, not "
            "unsquashed) but is larger than 3 in size"
        )


def _as_space_value(action: Any, space: Any) -> Any:
    """Casts a float Box action to the space's dtype (``contains`` checks the dtype)."""
    import gymnasium as gym

    if (
        isinstance(space, gym.spaces.Box)
        and isinstance(action, np.ndarray)
        and np.can_cast(action.dtype, space.dtype, casting="same_kind")
    ):
        return action.astype(space.dtype, copy=False)
    return action


# ----------------------------------------------------------------------------------------
# check_learning_achieved / check_train_results
# ----------------------------------------------------------------------------------------


def check_learning_achieved(tune_results: Any, min_reward: float, evaluation: bool = False) -> None:
    """Raises unless the best ``episode_reward_mean`` reaches ``min_reward``.

    Takes the last result of each trial of a ``tune.run`` result (an object
    with ``trials``, each with ``last_result``), or result dicts: one dict,
    or a list of them (any element may also be a trial with
    ``last_result``, an object with ``metrics``, or an object with an
    ``episode_reward_mean`` attribute), and compares the best reward found
    with ``min_reward``. NaN rewards (no episode finished) never count.

    Args:
        tune_results: The results to check.
        min_reward: The reward at least one result must reach.
        evaluation: Read ``result["evaluation"]["episode_reward_mean"]``.

    Raises:
        ValueError: "`stop-reward` of <min_reward> not reached!", or if
            there are no results.
        KeyError: If a result lacks the reward key.
    """
    results = _last_results(tune_results)
    if not results:
        raise ValueError("check_learning_achieved: no results to check")
    rewards = [_reward_of(r, i, evaluation) for i, r in enumerate(results)]
    rewards = [r for r in rewards if not math.isnan(r)]
    if not rewards or max(rewards) < min_reward:
        raise ValueError(f"`stop-reward` of {min_reward} not reached!")
    print("ok")


def _last_results(tune_results: Any) -> List[Any]:
    trials = getattr(tune_results, "trials", None)
    if trials is not None:
        return [t.last_result for t in trials]
    items = tune_results if isinstance(tune_results, (list, tuple)) else [tune_results]
    out = []
    for item in items:
        if hasattr(item, "last_result"):
            out.append(item.last_result)
        elif not isinstance(item, Mapping) and isinstance(getattr(item, "metrics", None), Mapping):
            out.append(item.metrics)
        else:
            out.append(item)
    return out


def _reward_of(result: Any, index: int, evaluation: bool) -> float:
    key, where = "episode_reward_mean", "result"
    if evaluation:
        result, where = _field(result, "evaluation"), "result['evaluation']"
    value = _field(result, key)
    if value is None:
        raise KeyError(f"check_learning_achieved: result {index} has no {where}[{key!r}]")
    return float(value)


def _field(obj: Any, key: str) -> Any:
    """``obj[key]`` of a mapping, else the attribute; None if missing."""
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def check_train_results(train_results: Dict[str, Any]) -> Dict[str, Any]:
    """Checks the learner-info layout of a train results dict; returns it.

    ``train_results["info"]["learner"]`` must map policy ids to dicts with a
    ``"learner_stats"`` dict (the layout ``LearnerInfoBuilder.finalize()``
    gives); ``min_*``/``max_*`` stats must be scalars. With a ``"config"``
    entry, a single-agent config (``multiagent.policies`` empty or only the
    default policy) needs ``"default_policy"`` there (or an empty learner
    info), and a per-row ``td_error`` must have ``train_batch_size`` rows
    (R2D2: ``train_batch_size / (max_seq_len + burn_in)``).

    Not checked, unlike RLlib 1.11 (rlpolicy has no Trainer to produce
    them): the Trainer-level keys (``episode_reward_mean``, ``timers``,
    ``perf``, ...) and ``info["num_steps_trained"]``.

    Args:
        train_results: ``{"info": {"learner": {policy_id: {...}}}, ...}``.

    Returns:
        ``train_results``.

    Raises:
        AssertionError: Naming the missing key or bad value.
    """
    from rlpolicy.utils.metrics.learner_info import LEARNER_INFO

    info = train_results.get("info") if isinstance(train_results, Mapping) else None
    _require(
        isinstance(info, Mapping),
        f"check_train_results: no 'info' dict in `train_results` ({train_results})!",
    )
    info = cast(Mapping, info)  # (checked just above)
    _require(
        LEARNER_INFO in info, f"check_train_results: '{LEARNER_INFO}' not in train_results['info'] ({info})!"
    )
    learner_info = info[LEARNER_INFO]
    config = train_results.get("config")
    if config is not None:
        _check_default_policy_present(config, learner_info)
    for pid, policy_stats in learner_info.items():
        if pid != "batch_count":
            _check_policy_stats(pid, policy_stats, config)
    return train_results


def _check_default_policy_present(config: Mapping, learner_info: Mapping) -> None:
    from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID

    policies = (config.get("multiagent") or {}).get("policies") or {DEFAULT_POLICY_ID}
    is_multi_agent = len(policies) > 1 or DEFAULT_POLICY_ID not in policies
    if not is_multi_agent:
        _require(
            len(learner_info) == 0 or DEFAULT_POLICY_ID in learner_info,
            f"check_train_results: '{DEFAULT_POLICY_ID}' not found in "
            f"train_results['info']['learner'] ({learner_info})!",
        )


def _check_policy_stats(pid: str, policy_stats: Any, config: Optional[Mapping]) -> None:
    from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY

    where = f"train_results['info']['learner'][{pid!r}]"
    _require(
        isinstance(policy_stats, Mapping) and LEARNER_STATS_KEY in policy_stats,
        f"check_train_results: '{LEARNER_STATS_KEY}' not in {where} ({policy_stats})!",
    )
    if "td_error" in policy_stats and config is not None and "train_batch_size" in config:
        configured_b = config["train_batch_size"]
        actual_b = np.shape(policy_stats["td_error"])[0]
        if (configured_b - actual_b) / actual_b > 0.1:  # R2D2: one td-error per sequence.
            seq = config["model"]["max_seq_len"] + config.get("burn_in", 0)
            _require(
                configured_b / seq == actual_b,
                f"check_train_results: {where}['td_error'] has {actual_b} rows, expected "
                f"train_batch_size={configured_b} (or {configured_b / seq} sequences)",
            )
    for key, value in policy_stats[LEARNER_STATS_KEY].items():
        if key.startswith(("min_", "max_")):
            _require(
                np.isscalar(value),
                f"check_train_results: {where}['{LEARNER_STATS_KEY}'][{key!r}] is not a scalar ({value})!",
            )


def _require(ok: bool, message: str) -> None:
    """An assertion that survives ``python -O`` (1.11 uses ``assert`` here)."""
    if not ok:
        raise AssertionError(message)


__all__ = [
    "check",
    "check_compute_single_action",
    "check_learning_achieved",
    "check_train_results",
    "framework_iterator",
]
