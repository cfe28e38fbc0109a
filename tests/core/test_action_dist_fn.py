"""rlpolicy._core.action_dist_fn: which of RLlib's two action_distribution_fn signatures."""

import functools

import pytest

from rlpolicy._core.action_dist_fn import resolve_action_distribution_fn


class Batch(dict):
    """A stand-in input dict (what the call reads: ``[]`` and ``in``)."""


INPUT = Batch(obs="OBS", prev_actions="PA", prev_rewards="PR")


def call(fn, **kw):
    args = dict(state_batches=["S"], seq_lens="L", explore=True, timestep=7, is_training=False)
    args.update(kw)
    return resolve_action_distribution_fn(fn)("POLICY", "MODEL", INPUT, **args)


# ------------------------------------------------------------------ 1.x functions, as written
def simple_q_style(policy, q_model, obs_batch, *, explore=True, is_training=True, **kwargs):
    return ("old", obs_batch, explore, is_training, sorted(kwargs))


def sac_tf_style(policy, model, obs_batch, *, explore=True, **kwargs):
    return ("old", obs_batch, explore, sorted(kwargs))


def ddpg_no_kwargs(policy, model, obs_batch, *, explore=True, is_training=False):
    return ("old", obs_batch, explore, is_training)


def graph_style_old(
    policy,
    model,
    obs_batch,
    *,
    state_batches=None,
    seq_lens=None,
    prev_action_batch=None,
    prev_reward_batch=None,
    explore=None,
    is_training=None,
):
    return ("old", obs_batch, state_batches, seq_lens, prev_action_batch, prev_reward_batch)


def dqn_style(policy, model, input_dict, *, explore=True, is_training=False, **kwargs):
    return ("new", input_dict, explore, is_training, sorted(kwargs))


def r2d2_style(
    policy, model, *, input_dict, state_batches=None, seq_lens=None, explore=True, is_training=False
):
    return ("new", input_dict, state_batches, seq_lens)


def test_old_signature_gets_obs_positionally_and_only_what_it_takes():
    assert call(simple_q_style) == ("old", "OBS", True, False, ["seq_lens", "state_batches", "timestep"])
    assert call(sac_tf_style, explore=False) == (
        "old",
        "OBS",
        False,
        ["is_training", "seq_lens", "state_batches", "timestep"],
    )
    # No **kwargs: keywords it does not declare are not passed (no TypeError).
    assert call(ddpg_no_kwargs) == ("old", "OBS", True, False)
    # prev_action_batch / prev_reward_batch come from the columns, when declared.
    assert call(graph_style_old) == ("old", "OBS", ["S"], "L", "PA", "PR")


def test_new_signature_gets_input_dict():
    out = call(dqn_style)
    assert out[0] == "new" and out[1] is INPUT and out[2:4] == (True, False)
    assert out[4] == ["seq_lens", "state_batches", "timestep"]
    assert call(r2d2_style) == ("new", INPUT, ["S"], "L")  # keyword-only input_dict (R2D2)


def test_timestep_none_is_not_passed():
    seen = {}

    def fn(policy, model, input_dict, **kwargs):
        seen.update(kwargs)
        return None

    call(fn, timestep=None)
    assert "timestep" not in seen and seen["explore"] is True


def test_partials_lambdas_and_callables():
    bound = functools.partial(simple_q_style)
    assert call(bound)[0] == "old"
    assert call(lambda policy, model, obs, **kw: ("old", obs))[1] == "OBS"
    assert call(lambda *args, **kw: ("args", args, sorted(kw)))[1] == ("POLICY", "MODEL", "OBS")

    class Callable:
        def __call__(self, policy, model, input_dict, **kw):
            return ("new", input_dict)

    assert call(Callable()) == ("new", INPUT)
    # Only **kwargs after (policy, model): RLlib 1.11's first try, the newer call.
    assert call(lambda policy, model, **kw: sorted(kw))[:1] == ["explore"]


def test_user_type_error_inside_the_function_is_not_a_signature_mismatch():
    calls = []

    def old_style(policy, model, obs_batch, *, explore=True, **kwargs):
        calls.append(obs_batch)
        # A message RLlib 1.11's retry heuristic would take for a signature mismatch.
        raise TypeError("helper() missing 1 required positional argument: 'x'")

    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        call(old_style)
    assert calls == ["OBS"]  # called once, with the old signature; no retry

    def new_style(policy, model, input_dict, **kwargs):
        calls.append(input_dict)
        raise TypeError("got an unexpected keyword argument 'y'")

    with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
        call(new_style)
    assert calls == ["OBS", INPUT]


def test_a_function_fitting_neither_signature_is_refused_by_name():
    def two_args(policy, model):
        return None

    with pytest.raises(TypeError, match=r"two_args\(policy, model\) takes neither `input_dict`"):
        resolve_action_distribution_fn(two_args)


def test_resolution_depends_only_on_the_function():
    assert resolve_action_distribution_fn(dqn_style) == resolve_action_distribution_fn(dqn_style)
