"""rlpolicy._core.loss_init: default view requirements, dummy batches, pruning."""

import logging

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy._core import loss_init
from rlpolicy._core.loss_init import AccessRecord, dummy_columns, new_box, prune_view_requirements
from rlpolicy.policy._obs_prep import prepare_observation_space
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.view_requirement import ViewRequirement


def default_view_requirements(obs_space, action_space):
    return loss_init.default_view_requirements(obs_space, action_space, ViewRequirement)


def update_view_requirements_from_init_state(holder):
    # The Policy method, run on a duck-typed holder of the attributes it reads.
    Policy._update_model_view_requirements_from_init_state(holder)


def initialize_loss_from_dummy_batch(policy, *args, **kwargs):
    return policy._run_dummy_loss_init(*args, **kwargs)


OBS = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
ACT = gym.spaces.Discrete(4)


# ------------------------------------------------------------------ defaults
@pytest.mark.parametrize(
    "key, data_col, shift, for_actions",
    [
        ("obs", None, 0, True),
        ("new_obs", "obs", 1, True),
        ("actions", None, 0, False),
        ("prev_actions", "actions", -1, True),
        ("rewards", None, 0, True),
        ("prev_rewards", "rewards", -1, True),
        ("dones", None, 0, True),
        ("terminateds", None, 0, True),
        ("truncateds", None, 0, True),
        ("infos", None, 0, True),
        ("eps_id", None, 0, True),
        ("unroll_id", None, 0, True),
        ("agent_index", None, 0, True),
        ("t", None, 0, True),
    ],
)
def test_default_view_requirements(key, data_col, shift, for_actions):
    vrs = default_view_requirements(OBS, ACT)
    assert len(vrs) == 14
    vr = vrs[key]
    assert (vr.data_col, vr.shift, vr.used_for_compute_actions, vr.used_for_training) == (
        data_col,
        shift,
        for_actions,
        True,
    )


def test_default_view_requirements_spaces():
    vrs = default_view_requirements(OBS, ACT)
    assert vrs["obs"].space == OBS and vrs["new_obs"].space == OBS
    assert vrs["actions"].space == ACT and vrs["prev_actions"].space == ACT


# ------------------------------------------------------------------ dummy batches
def _col(vr, n=5, config=None):
    config = config or {}
    return dummy_columns({"x": vr}, n, config, flat_obs_space=lambda s: prepare_observation_space(s, config))[
        "x"
    ]


DICT_SPACE = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(0, 1, (2, 3))})


@pytest.mark.parametrize(
    "vr, shape, dtype",
    [
        (ViewRequirement(space=OBS), (5, 3), np.float32),
        (ViewRequirement(space=ACT), (5,), np.int64),
        # Dict obs are given flat, as the preprocessor writes them: 3 one-hot slots for the
        # Discrete + 2*3 for the Box = 9 (RLlib 1.11 counts 1 per Discrete: 7, and breaks).
        (ViewRequirement(data_col="obs", space=DICT_SPACE), (5, 9), np.float32),
        (ViewRequirement(data_col="actions", space=gym.spaces.Tuple([ACT, OBS])), (5, 4), np.float32),
        (ViewRequirement(data_col="obs", shift=[-2, -1, 0], space=OBS), (5, 3, 3), np.float32),
        (ViewRequirement(data_col="obs", shift="-4:-1", space=OBS), (5, 4, 3), np.float32),
    ],
)
def test_dummy_batch_column_shapes(vr, shape, dtype):
    col = _col(vr)
    assert col.shape == shape and col.dtype == dtype
    assert not np.any(col)


def test_dummy_batch_plain_columns_are_fresh_zeros_of_the_space_dtype():
    img = gym.spaces.Box(0, 255, (2, 2), np.uint8)
    col = _col(ViewRequirement(space=img))
    assert col.shape == (5, 2, 2) and col.dtype == np.uint8 and not np.any(col)
    shifted = _col(ViewRequirement(space=gym.spaces.Discrete(3, start=2)))
    np.testing.assert_array_equal(shifted, np.full(5, 2))  # inside the space
    vr = ViewRequirement(space=OBS)
    a, b = _col(vr), _col(vr)
    a[0, 0] = 1.0
    assert not np.any(b) and not np.shares_memory(a, b)


def test_dummy_batch_keeps_dict_obs_nested_without_preprocessor_api():
    col = _col(ViewRequirement(data_col="obs", space=DICT_SPACE), config={"_disable_preprocessor_api": True})
    assert col["a"].shape == (5,) and col["b"].shape == (5, 2, 3)


def test_dummy_batch_repeats_non_space_initial_values():
    init = np.array([0.5, 0.5])
    col = _col(ViewRequirement(space=init), n=4)
    np.testing.assert_array_equal(col, np.tile(init, (4, 1)))


# ------------------------------------------------------------------ pruning rule
def _vrs(*keys):
    return {k: ViewRequirement() for k in keys}


def test_prune_deletes_unread_columns_but_keeps_sampler_columns():
    vrs = _vrs("obs", "t", "new_obs", "eps_id", "agent_index", "unroll_id", "dones", "rewards", "infos")
    record = AccessRecord(train_accessed={"obs"})
    removed = prune_view_requirements(vrs, record, protected=set(), has_loss=True)
    assert sorted(removed) == ["new_obs", "t"]
    assert sorted(vrs) == sorted(["obs", "eps_id", "agent_index", "unroll_id", "dones", "rewards", "infos"])


def test_prune_tags_postprocessing_only_columns_not_for_training():
    vrs = _vrs("obs", "vf_preds", "rewards", "model_col")
    record = AccessRecord(postprocess_accessed={"vf_preds", "rewards", "model_col"}, train_accessed={"obs"})
    prune_view_requirements(vrs, record, protected={"model_col"}, has_loss=True)
    assert vrs["vf_preds"].used_for_training is False
    # Sampler columns and the model's own columns are never tagged.
    assert vrs["rewards"].used_for_training is True and vrs["model_col"].used_for_training is True
    assert vrs["obs"].used_for_training is True


def test_prune_without_loss_tags_nothing():
    vrs = _vrs("vf_preds")
    prune_view_requirements(
        vrs, AccessRecord(postprocess_accessed={"vf_preds"}), protected=set(), has_loss=False
    )
    assert vrs["vf_preds"].used_for_training is True


def test_prune_adds_requirements_for_new_columns_except_seq_lens():
    vrs = _vrs("obs")
    record = AccessRecord(postprocess_added={"advantages"}, train_accessed={"obs", "seq_lens", "advantages"})
    prune_view_requirements(vrs, record, protected=set(), has_loss=True)
    assert sorted(vrs) == ["advantages", "obs"]
    assert vrs["advantages"].used_for_compute_actions is False


def test_prune_keeps_protected_columns():
    vrs = _vrs("obs", "prev_actions")
    prune_view_requirements(vrs, AccessRecord(), protected={"prev_actions"}, has_loss=True)
    assert sorted(vrs) == ["prev_actions"]


def test_prune_keeps_everything_when_output_is_written(caplog):
    vrs = _vrs("t", "new_obs")
    assert prune_view_requirements(vrs, AccessRecord(), protected=set(), has_loss=True, keep_all=True) == []
    assert sorted(vrs) == ["new_obs", "t"]


def test_prune_warns_about_columns_deleted_by_hand(caplog):
    vrs = _vrs("t")
    with caplog.at_level(logging.WARNING):
        removed = prune_view_requirements(
            vrs, AccessRecord(postprocess_deleted={"t"}), protected=set(), has_loss=True
        )
    assert removed == [] and "t" in vrs
    assert "deleted by hand" in caplog.text


# ------------------------------------------------------------------ initial RNN state
class _FakeModel:
    def __init__(self, init_state):
        self.view_requirements = {"obs": ViewRequirement(space=OBS)}
        self._init = init_state

    def get_initial_state(self):
        return self._init


class _Holder:
    _initial_state_for_view_requirements = Policy._initial_state_for_view_requirements

    def __init__(self, model, max_seq_len=7):
        self.model = model
        self.observation_space = OBS
        self.config = {"model": {"max_seq_len": max_seq_len}}
        self.view_requirements = {"state_in_1": ViewRequirement("custom")}


def test_update_view_requirements_from_init_state():
    nonzero = np.array([1.0, 2.0])
    holder = _Holder(_FakeModel([np.zeros(4, np.float32), nonzero]))
    update_view_requirements_from_init_state(holder)
    mvr = holder.model.view_requirements
    assert holder._model_init_state_automatically_added is True
    s0 = mvr["state_in_0"]
    assert (s0.data_col, s0.shift, s0.batch_repeat_value, s0.used_for_compute_actions) == (
        "state_out_0",
        -1,
        7,
        True,
    )
    assert isinstance(s0.space, gym.spaces.Box) and s0.space.shape == (4,)
    assert mvr["state_in_1"].space is nonzero  # a non-zero initial value is kept as the value
    assert mvr["state_out_0"].used_for_training is True
    # The policy dict gets the entries too, but a user-provided one is kept.
    assert holder.view_requirements["state_in_1"].data_col == "custom"
    assert holder.view_requirements["state_in_0"].data_col == "state_out_0"


def test_update_view_requirements_without_initial_state_method():
    class Bare:
        view_requirements = {"state_in_0": ViewRequirement()}

    holder = _Holder(Bare())
    update_view_requirements_from_init_state(holder)
    assert holder.model.get_initial_state() == []
    assert holder.is_recurrent() is True  # has a state_in_0 requirement


# ------------------------------------------------------------------ whole dummy run
class _Recorder(Policy):
    """Reads obs to act; postprocessing reads rewards and adds 'adv'; loss reads obs, actions, adv."""

    def __init__(self, obs_space, action_space, config, *, recurrent=False, div=1, use_loss=True):
        super().__init__(obs_space, action_space, config)
        self.recurrent, self.batch_divisibility_req = recurrent, div
        self.seen = {}
        if use_loss:
            self._loss = self._my_loss
        if recurrent:
            self.view_requirements["state_in_0"] = ViewRequirement("state_out_0", shift=-1, space=OBS)
            self.view_requirements["state_out_0"] = ViewRequirement(space=OBS)

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        self.seen["explore"] = explore
        obs = input_dict["obs"]
        states = [input_dict["state_in_0"]] if self.recurrent else []
        return np.zeros(len(obs), np.int64), states, {"vf": np.zeros(len(obs), np.float32)}

    def compute_actions(self, *args, **kwargs):
        raise AssertionError("not used")

    def postprocess_trajectory(self, batch, other_agent_batches=None, episode=None):
        batch["adv"] = batch["rewards"] * 2
        return batch

    @staticmethod
    def _my_loss(policy, model, dist_class, train_batch):
        policy.seen["train"] = train_batch
        return train_batch["obs"].sum() + train_batch["actions"].sum() + train_batch["adv"].sum()


def test_dummy_run_prunes_and_tags():
    p = _Recorder(OBS, ACT, {})
    stats = []
    record = initialize_loss_from_dummy_batch(p, True, stats_fn=lambda pol, b: stats.append(len(b)))
    assert record.compute_accessed == {"obs"}
    assert record.train_accessed == {"obs", "actions", "adv"}
    assert stats == [32] and p.seen["explore"] is False
    vrs = p.view_requirements
    assert sorted(vrs) == sorted(
        [
            "obs",
            "actions",
            "adv",
            "rewards",
            "dones",
            "terminateds",
            "truncateds",
            "infos",
            "eps_id",
            "unroll_id",
            "agent_index",
        ]
    )
    assert vrs["obs"].used_for_compute_actions is True
    assert vrs["actions"].used_for_compute_actions is False
    assert p.seen["train"].is_training is True


def test_dummy_run_batch_size_follows_divisibility_requirement():
    p = _Recorder(OBS, ACT, {}, div=10)
    initialize_loss_from_dummy_batch(p)
    assert p.seen["train"].count == 40


def test_dummy_run_recurrent_cuts_states_to_sequences():
    p = _Recorder(OBS, ACT, {}, recurrent=True)
    initialize_loss_from_dummy_batch(p)
    train = p.seen["train"]
    np.testing.assert_array_equal(train["seq_lens"], [8, 8, 8, 8])
    assert train["state_in_0"].shape == (4, 3)
    assert "state_in_0" in p.view_requirements


def test_dummy_run_without_auto_remove_keeps_all_columns():
    p = _Recorder(OBS, ACT, {})
    initialize_loss_from_dummy_batch(p, auto_remove_unneeded_view_reqs=False)
    assert "t" in p.view_requirements and "new_obs" in p.view_requirements


def test_dummy_run_keeps_columns_when_output_is_set():
    p = _Recorder(OBS, ACT, {"output": "/tmp/out"})
    initialize_loss_from_dummy_batch(p)
    assert "t" in p.view_requirements


def test_dummy_run_extra_outputs_get_box_requirements():
    p = _Recorder(OBS, ACT, {}, use_loss=False)
    initialize_loss_from_dummy_batch(p, auto_remove_unneeded_view_reqs=False)
    vr = p.view_requirements["vf"]
    assert vr.used_for_compute_actions is False and vr.space.shape == () and vr.space.dtype == np.float32


def test_dummy_run_resets_no_tracing_flag_on_error():
    p = _Recorder(OBS, ACT, {})
    p._loss = lambda *a: (_ for _ in ()).throw(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        initialize_loss_from_dummy_batch(p)
    assert p._no_tracing is False


def test_dummy_batch_is_a_samplebatch():
    p = _Recorder(OBS, ACT, {})
    assert isinstance(p._get_dummy_batch_from_view_requirements(3), SampleBatch)


@pytest.mark.parametrize(
    "low, high, shape, dtype",
    [
        (float("-inf"), float("inf"), (), np.float32),
        (-1.0, 1.0, (3, 2), np.float32),
        (-1.0, 1.0, (4,), np.dtype("int64")),
        (0.0, 5.0, (2,), np.float64),
    ],
)
def test_new_box_equals_a_freshly_built_box(low, high, shape, dtype):
    expected = gym.spaces.Box(low, high, shape=shape, dtype=dtype)
    first, second = new_box(low, high, shape, dtype), new_box(low, high, shape, dtype)
    for box in (first, second):
        assert type(box) is gym.spaces.Box and box == expected and box.dtype == expected.dtype
        assert box.shape == expected.shape and repr(box) == repr(expected)
        assert np.array_equal(box.bounded_below, expected.bounded_below)
    # Copies share no arrays and no RNG.
    assert first.low is not second.low and first.high is not second.high
    first.seed(0)
    assert second._np_random is None
    first.low[...] = 0
    assert np.array_equal(second.low, expected.low)


def test_new_box_state_matches_a_fresh_box_in_order_and_survives_pickling():
    import pickle

    expected = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    box = new_box(-1.0, 1.0, [2])  # (a list shape is accepted, as by gym's Box)
    assert list(vars(box)) == list(vars(expected))
    for key, value in vars(expected).items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(vars(box)[key], value) and vars(box)[key].dtype == value.dtype
        elif key != "_np_random":
            assert vars(box)[key] == value
    restored = pickle.loads(pickle.dumps(box))
    assert restored == expected and restored.contains(np.array([0.5, -0.5], np.float32))
