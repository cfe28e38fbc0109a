"""rlpolicy.agents.callbacks: hook signatures, legacy dict interface, MultiCallbacks forwarding."""

import inspect

import pytest

from rlpolicy.agents.callbacks import DefaultCallbacks, MultiCallbacks

HOOK_KWARGS = {
    "on_sub_environment_created": dict(worker="w", sub_environment="env", env_context={}),
    "on_trainer_init": dict(trainer="t"),
    "on_episode_start": dict(worker="w", base_env="be", policies={}, episode="ep", env_index=0),
    "on_episode_step": dict(worker="w", base_env="be", policies={}, episode="ep", env_index=0),
    "on_episode_end": dict(worker="w", base_env="be", policies={}, episode="ep", env_index=0),
    "on_postprocess_trajectory": dict(
        worker="w",
        episode="ep",
        agent_id="a0",
        policy_id="p",
        policies={},
        postprocessed_batch="post",
        original_batches={"a0": "pre"},
    ),
    "on_sample_end": dict(worker="w", samples="s"),
    "on_learn_on_batch": dict(policy="p", train_batch="tb", result={}),
    "on_train_result": dict(trainer="t", result={}),
}


def test_hooks_are_keyword_only_noops():
    cb = DefaultCallbacks()
    for name, kwargs in HOOK_KWARGS.items():
        params = inspect.signature(getattr(DefaultCallbacks, name)).parameters
        named = [p for p in params.values() if p.name not in ("self", "kwargs")]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in named), name
        assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), name
        assert getattr(cb, name)(**kwargs, future_arg=1) is None
        with pytest.raises(TypeError):
            getattr(cb, name)(*kwargs.values())


def test_rllib_signatures():
    sig = inspect.signature(DefaultCallbacks.on_episode_start)
    assert list(sig.parameters) == [
        "self",
        "worker",
        "base_env",
        "policies",
        "episode",
        "env_index",
        "kwargs",
    ]
    assert sig.parameters["env_index"].default is None
    assert inspect.signature(DefaultCallbacks.on_episode_step).parameters["policies"].default is None
    assert list(inspect.signature(DefaultCallbacks.on_postprocess_trajectory).parameters) == [
        "self",
        "worker",
        "episode",
        "agent_id",
        "policy_id",
        "policies",
        "postprocessed_batch",
        "original_batches",
        "kwargs",
    ]


def test_legacy_callbacks_dict():
    seen = {}
    legacy = {
        "on_episode_start": lambda info: seen.setdefault("start", info),
        "on_postprocess_traj": lambda info: seen.setdefault("traj", info),
        "on_train_result": lambda info: seen.setdefault("train", info),
    }
    with pytest.warns(DeprecationWarning):
        cb = DefaultCallbacks(legacy_callbacks_dict=legacy)
    cb.on_episode_start(**HOOK_KWARGS["on_episode_start"])
    cb.on_postprocess_trajectory(**HOOK_KWARGS["on_postprocess_trajectory"])
    cb.on_train_result(**HOOK_KWARGS["on_train_result"])
    assert seen["start"] == {"env": "be", "policy": {}, "episode": "ep"}
    assert seen["traj"]["pre_batch"] == "pre" and seen["traj"]["post_batch"] == "post"
    assert seen["train"]["trainer"] == "t"


def test_legacy_unknown_hook_raises():
    with pytest.raises(ValueError, match="on_episode_begin"):
        DefaultCallbacks(legacy_callbacks_dict={"on_episode_begin": print})


class _Recorder(DefaultCallbacks):
    log = []

    def __init__(self):
        super().__init__()
        self.tag = type(self).__name__

    def __getattribute__(self, name):
        if name in HOOK_KWARGS:

            def record(**kwargs):
                type(self).log.append((object.__getattribute__(self, "tag"), name, kwargs))

            return record
        return object.__getattribute__(self, name)


class _A(_Recorder):
    pass


class _B(_Recorder):
    pass


def test_multi_callbacks_forwards_every_hook_in_order():
    _Recorder.log = []
    multi = MultiCallbacks([_A, _B])
    instance = multi()  # what RLlib does with config["callbacks"]
    assert instance is multi and isinstance(instance, DefaultCallbacks)
    for name, kwargs in HOOK_KWARGS.items():
        _Recorder.log.clear()
        getattr(instance, name)(**kwargs, extra=5)
        assert [(tag, hook) for tag, hook, _ in _Recorder.log] == [("_A", name), ("_B", name)]
        assert all(kw == {**kwargs, "extra": 5} for _, _, kw in _Recorder.log)


def test_multi_callbacks_fresh_instances_per_call_and_state():
    class Counter(DefaultCallbacks):
        def __init__(self):
            super().__init__()
            self.n = 0

        def on_sample_end(self, *, worker, samples, **kwargs):
            self.n += 1

    multi = MultiCallbacks([Counter, Counter])()
    multi.on_sample_end(worker=None, samples=None)
    assert [c.n for c in multi._callback_list] == [1, 1]
    multi()
    assert [c.n for c in multi._callback_list] == [0, 0]
    # Before being called there is nothing to forward to.
    MultiCallbacks([Counter]).on_sample_end(worker=None, samples=None)
    assert inspect.signature(multi.on_episode_end).parameters["env_index"].default is None


def test_multi_callbacks_rejects_non_callables():
    with pytest.raises(TypeError, match="callback_class_list"):
        MultiCallbacks([DefaultCallbacks, "not-a-class"])


def test_default_callbacks_keeps_its_rllib_path():
    """DefaultCallbacks is defined at the policy layer (rlpolicy.policy._callbacks, so
    that policies need not import agents/) and is the same class at RLlib's path, which
    it names as its module: reprs, tracebacks and pickles show that path."""
    import pickle

    import gymnasium as gym
    import numpy as np

    import rlpolicy.agents.callbacks as public
    from rlpolicy.policy import _callbacks as home
    from rlpolicy.policy.policy import Policy

    assert public.DefaultCallbacks is home.DefaultCallbacks
    assert DefaultCallbacks.__module__ == "rlpolicy.agents.callbacks"
    assert repr(DefaultCallbacks) == "<class 'rlpolicy.agents.callbacks.DefaultCallbacks'>"
    assert pickle.loads(pickle.dumps(DefaultCallbacks)) is DefaultCallbacks
    assert b"rlpolicy.agents.callbacks" in pickle.dumps(DefaultCallbacks, protocol=0)
    assert issubclass(MultiCallbacks, DefaultCallbacks)

    class Constant(Policy):
        def compute_actions(self, obs_batch, *args, **kwargs):
            return np.zeros(len(obs_batch), np.int64), [], {}

    # A policy whose config names no callbacks makes a DefaultCallbacks (the public class).
    policy = Constant(gym.spaces.Box(-1.0, 1.0, (2,)), gym.spaces.Discrete(2), {})
    assert type(policy.callbacks) is public.DefaultCallbacks
