"""Policies on attention nets, as a 1.x algorithm module builds them: a PG-style loss with
``build_policy_class`` (torch) / ``build_tf_policy`` (tf, tf2, tf2 traced), the model from
``use_attention=True`` or a ``GTrXLNet`` custom model, sampled by a RolloutWorker on
CartPole and trained with ``learn_on_batch``.

Checked from the batches by hand: every row's ``state_in_0`` is the previous
``memory_inference`` ``state_out_0`` of its episode (zeros before the start),
``prev_actions``/``prev_rewards`` the previous n actions/rewards, the sampler fed exactly
those views (recomputing the logits from the batch rows reproduces them), and the train
batch the loss sees holds one memory window per ``max_seq_len`` sequence, equal to the
``state_out_0`` of the steps before the sequence start.
"""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.evaluation.postprocessing import compute_advantages
from rlpolicy.policy.sample_batch import SampleBatch

MEMORY, MAX_SEQ_LEN, N_PREV = 3, 4, 2
ATTENTION = {
    "fcnet_hiddens": [8],
    "use_attention": True,
    "attention_dim": 8,
    "attention_num_heads": 1,
    "attention_head_dim": 8,
    "attention_memory_inference": MEMORY,
    "attention_memory_training": MEMORY,
    "attention_position_wise_mlp_dim": 8,
    "attention_use_n_prev_actions": N_PREV,
    "attention_use_n_prev_rewards": N_PREV,
    "max_seq_len": MAX_SEQ_LEN,
}
GTRXL_KWARGS = {
    "num_transformer_units": 1,
    "attention_dim": 8,
    "num_heads": 2,
    "head_dim": 4,
    "memory_inference": MEMORY,
    "memory_training": MEMORY,
    "position_wise_mlp_dim": 8,
}


# ------------------------------------------------------------------ a 1.x-style PG policy module
def pg_postprocess(policy, sample_batch, other_agent_batches=None, episode=None):
    return compute_advantages(sample_batch, 0.0, policy.config["gamma"], use_gae=False, use_critic=False)


def pg_torch_loss(policy, model, dist_class, train_batch):
    import torch

    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    seq_lens = train_batch[SampleBatch.SEQ_LENS]
    steps = torch.arange(logp.shape[0] // seq_lens.shape[0])  # the padded length T
    mask = torch.reshape(steps[None, :] < seq_lens[:, None], [-1]).float()
    loss = -torch.sum(logp * train_batch["advantages"] * mask) / torch.clamp(torch.sum(mask), min=1)
    policy.seen_train_batches.append(
        {k: train_batch[k].detach().cpu().numpy() for k in _SEEN if k in train_batch}
    )
    model.tower_stats["policy_loss"] = loss
    return loss


def pg_torch_stats(policy, train_batch):
    import torch

    return {"policy_loss": torch.mean(torch.stack(policy.get_tower_stats("policy_loss")))}


def pg_tf_loss(policy, model, dist_class, train_batch):
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    seq_lens = train_batch[SampleBatch.SEQ_LENS]
    mask = tf.reshape(tf.sequence_mask(seq_lens, tf.shape(logp)[0] // tf.shape(seq_lens)[0]), [-1])
    mask = tf.cast(mask, tf.float32)
    policy.policy_loss = -tf.reduce_sum(logp * train_batch["advantages"] * mask) / tf.maximum(
        tf.reduce_sum(mask), 1.0
    )
    policy.train_views = {k: train_batch[k] for k in _SEEN}
    return policy.policy_loss


def pg_tf_stats(policy, train_batch):
    # The train batch's own views, fetched with the loss (works in graph, eager and traced mode).
    return {"policy_loss": policy.policy_loss, **{f"view_{k}": v for k, v in policy.train_views.items()}}


# (unroll_id, t) names a row of one sample batch; graph TF feeds the (large) eps_id as float32.
_SEEN = ("state_in_0", SampleBatch.SEQ_LENS, SampleBatch.T, SampleBatch.UNROLL_ID)


def _torch_policy_class():
    from rlpolicy.policy.policy_template import build_policy_class

    def after_init(policy, obs_space, action_space, config):
        policy.seen_train_batches = []

    return build_policy_class(
        name="AttentionPGTorchPolicy",
        framework="torch",
        loss_fn=pg_torch_loss,
        stats_fn=pg_torch_stats,
        postprocess_fn=pg_postprocess,
        after_init=after_init,
        before_loss_init=after_init,
    )


def _tf_policy_class():
    from rlpolicy.policy.tf_policy_template import build_tf_policy

    return build_tf_policy(
        name="AttentionPGTFPolicy", loss_fn=pg_tf_loss, stats_fn=pg_tf_stats, postprocess_fn=pg_postprocess
    )


CASES = {
    "torch-use_attention": ("torch", False, "wrapper"),
    "torch-custom_gtrxl": ("torch", False, "custom"),
    "tf-use_attention": ("tf", False, "wrapper"),
    "tf2-use_attention": ("tf2", False, "wrapper"),
    "tf2-traced-custom_gtrxl": ("tf2", True, "custom"),
}


def _model_config(kind, fw):
    if kind == "wrapper":
        return dict(ATTENTION)
    if fw == "torch":
        from rlpolicy.models.torch.attention_net import GTrXLNet
    else:
        from rlpolicy.models.tf.attention_net import GTrXLNet
    return {"custom_model": GTrXLNet, "custom_model_config": dict(GTRXL_KWARGS), "max_seq_len": MAX_SEQ_LEN}


@pytest.fixture(scope="module", params=list(CASES))
def sampled(request):
    """(case, worker, sample batches, the weights before training)."""
    fw, tracing, kind = CASES[request.param]
    pytest.importorskip("torch" if fw == "torch" else "tensorflow")
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    cls = _torch_policy_class() if fw == "torch" else _tf_policy_class()
    config = {
        "framework": fw,
        "eager_tracing": tracing,
        "gamma": 0.9,
        "lr": 0.01,
        "model": _model_config(kind, fw),
    }
    worker = RolloutWorker(
        env_creator=lambda _: gym.make("CartPole-v1"),
        policy_spec=cls,
        policy_config=config,
        num_envs=2,
        rollout_fragment_length=50,
        seed=1,
    )
    batches = [worker.sample() for _ in range(3)]  # 300 steps, episodes cut across fragments
    return request.param, worker, batches


def _episode_rows(batches):
    """eps_id -> {t: row of the concatenated sample batches}."""
    whole = SampleBatch.concat_samples(batches)
    rows = {}
    for i, (eps, t) in enumerate(zip(whole[SampleBatch.EPS_ID], whole[SampleBatch.T])):
        rows.setdefault(int(eps), {})[int(t)] = i
    return whole, rows


def _window(whole, rows, eps, t0, col, n, zero):
    """``col`` at steps t0 - n .. t0 - 1 of episode ``eps`` (zeros before its start)."""
    return np.stack([whole[col][rows[eps][t]] if t >= 0 else zero for t in range(t0 - n, t0)])


@pytest.mark.tf
def test_views_of_every_sampled_row_are_the_previous_steps(sampled):
    _, worker, batches = sampled
    whole, rows = _episode_rows(batches)
    assert whole.count == 300 and whole["state_in_0"].shape == (300, MEMORY, 8)
    zero = np.zeros(8, np.float32)
    assert any(len(r) > 50 for r in rows.values()) or len(rows) > 2  # history crosses fragment cuts
    for i in range(whole.count):
        eps, t = int(whole[SampleBatch.EPS_ID][i]), int(whole[SampleBatch.T][i])
        if t - MEMORY >= 0 and (t - MEMORY) not in rows[eps]:
            continue  # started before the first kept batch
        np.testing.assert_array_equal(
            whole["state_in_0"][i], _window(whole, rows, eps, t, "state_out_0", MEMORY, zero)
        )
        if (
            "prev_actions" in worker.policy.view_requirements
            and worker.policy.view_requirements["prev_actions"].shift_from is not None
        ):
            np.testing.assert_array_equal(
                whole["prev_actions"][i], _window(whole, rows, eps, t, SampleBatch.ACTIONS, N_PREV, 0)
            )
            np.testing.assert_array_equal(
                whole["prev_rewards"][i], _window(whole, rows, eps, t, SampleBatch.REWARDS, N_PREV, 0.0)
            )
    assert np.abs(whole["state_out_0"]).max() > 0  # the memory carries data


@pytest.mark.tf
def test_sampler_fed_the_model_exactly_these_views(sampled):
    """Recomputing the logits of some rows from their batch views reproduces the sampled ones."""
    _, worker, batches = sampled
    batch = batches[-1]
    pick = np.arange(0, batch.count, 7)
    inputs = {
        k: batch[k][pick]
        for k in worker.policy.view_requirements
        if k in batch and worker.policy.view_requirements[k].used_for_compute_actions
    }
    _, state_out, extra = worker.policy.compute_actions_from_input_dict(SampleBatch(inputs), explore=False)
    np.testing.assert_allclose(
        extra[SampleBatch.ACTION_DIST_INPUTS],
        batch[SampleBatch.ACTION_DIST_INPUTS][pick],
        rtol=1e-4,
        atol=1e-5,
    )
    np.testing.assert_allclose(state_out[0], batch["state_out_0"][pick], rtol=1e-4, atol=1e-5)


@pytest.mark.tf
def test_learn_on_batch_trains_on_one_memory_window_per_sequence(sampled):
    case, worker, batches = sampled
    policy = worker.policy
    before = [np.array(w, copy=True) for w in _flat_weights(policy)]
    whole, rows = _episode_rows(batches)
    train = batches[-1].copy()
    losses = []
    for _ in range(3):
        info = worker.learn_on_batch(train.copy())["default_policy"]
        losses.append(float(info["learner_stats"]["policy_loss"]))
    assert np.isfinite(losses).all()
    after = _flat_weights(policy)
    assert any(not np.allclose(a, b) for a, b in zip(before, after))
    if case.startswith("torch"):
        seen = policy.seen_train_batches[-1]
    else:
        stats = info["learner_stats"]
        seen = {k: np.asarray(stats[f"view_{k}"]) for k in _SEEN}
    seq_lens, state_in = seen[SampleBatch.SEQ_LENS], seen["state_in_0"]
    assert int(np.sum(seq_lens)) == train.count and seq_lens.max() <= MAX_SEQ_LEN
    assert state_in.shape == (len(seq_lens), MEMORY, 8)
    starts = np.arange(len(seq_lens)) * MAX_SEQ_LEN  # padded to max_seq_len (a shift-range state)
    zero = np.zeros(8, np.float32)
    eps_of = {
        (int(u), int(t)): int(e)
        for u, t, e in zip(train[SampleBatch.UNROLL_ID], train[SampleBatch.T], train[SampleBatch.EPS_ID])
    }
    checked = 0
    for j, s in enumerate(starts):
        key = (int(seen[SampleBatch.UNROLL_ID][s]), int(seen[SampleBatch.T][s]))
        t0, eps = key[1], eps_of[key]
        if t0 - MEMORY >= 0 and (t0 - MEMORY) not in rows[eps]:
            continue
        np.testing.assert_array_equal(state_in[j], _window(whole, rows, eps, t0, "state_out_0", MEMORY, zero))
        checked += 1
    assert checked >= len(seq_lens) // 2


def _flat_weights(policy):
    weights = policy.get_weights()
    values = weights.values() if isinstance(weights, dict) else weights
    return [np.asarray(v) for v in values]


# ------------------------------------------------------------------ bootstrapping from the next window
def test_single_step_input_dict_moves_a_per_row_memory_window_on():
    from rlpolicy.policy.view_requirement import ViewRequirement

    s = np.arange(1.0, 7.0, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)  # state_out rows 1..6
    zero = np.zeros(2, np.float32)
    windows = np.stack([np.stack([s[t] if t >= 0 else zero for t in range(i - 3, i)]) for i in range(6)])
    req = {"state_in_0": ViewRequirement("state_out_0", shift="-3:-1", batch_repeat_value=4)}
    # One window per row (the sampler's layout): the next step sees state_out 4, 5, 6.
    last = SampleBatch({"state_out_0": s, "state_in_0": windows}).get_single_step_input_dict(req)
    np.testing.assert_array_equal(last["state_in_0"], [s[3:6]])
    # A trajectory shorter than the window: zeros, then state_out 1, 2.
    short = SampleBatch({"state_out_0": s[:2], "state_in_0": windows[:2]}).get_single_step_input_dict(req)
    np.testing.assert_array_equal(short["state_in_0"], [[zero, s[0], s[1]]])
    # RLlib 1.11's layout (one window per batch_repeat_value rows: rows 0 and 4) gives the same.
    strided = SampleBatch({"state_out_0": s, "state_in_0": windows[[0, 4]]})
    np.testing.assert_array_equal(strided.get_single_step_input_dict(req)["state_in_0"], [s[3:6]])


@pytest.mark.parametrize("fw", ["torch", "tf2"])
def test_ppo_bootstraps_a_cut_fragment_with_the_next_memory_window(fw):
    pytest.importorskip("torch" if fw == "torch" else "tensorflow")
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    if fw == "torch":
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy as PPOPolicy
    else:
        from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy as PPOPolicy
    model = {k: v for k, v in ATTENTION.items() if not k.startswith("attention_use_n")}
    config = {"framework": fw, "gamma": 0.9, "lambda": 1.0, "model": {**model, "vf_share_layers": True}}
    worker = RolloutWorker(
        env_creator=lambda _: gym.make("CartPole-v1"),
        policy_spec=PPOPolicy,
        policy_config=config,
        num_envs=1,
        rollout_fragment_length=6,
        seed=3,
    )  # 6 % max_seq_len = 2
    batch = worker.sample()
    assert not batch[SampleBatch.DONES][-1]  # cut by the fragment length: bootstrapped
    # The step after the fragment, by hand: its obs and the last three memory outputs.
    next_inputs = SampleBatch(
        {"obs": batch[SampleBatch.NEXT_OBS][-1:], "state_in_0": batch["state_out_0"][None, -3:]}
    )
    _, _, extra = worker.policy.compute_actions_from_input_dict(next_inputs, explore=False)
    last_r = float(np.asarray(extra[SampleBatch.VF_PREDS]).reshape(-1)[0])
    expected = batch[SampleBatch.REWARDS][-1] + 0.9 * last_r
    np.testing.assert_allclose(batch["value_targets"][-1], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fw", ["torch", "tf2"])  # graph tf acts in the sampled fixture above
def test_compute_single_action_loop_with_a_rolling_memory(fw):
    """RLlib 1.11's attention-net inference loop: pass the memory as ``state``, append the
    returned memory row and drop the oldest. The same rows as one batch give the same logits."""
    pytest.importorskip("torch" if fw == "torch" else "tensorflow")
    cls = _torch_policy_class() if fw == "torch" else _tf_policy_class()
    cls = cls.as_eager() if fw == "tf2" else cls
    model = {k: v for k, v in ATTENTION.items() if not k.startswith("attention_use_n")}
    policy = cls(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), {"framework": fw, "model": model})
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    memory = np.zeros((MEMORY, 8), np.float32)
    windows, logits, outs = [], [], []
    for o in obs:
        _, (mem_out,), extra = policy.compute_single_action(o, state=[memory], explore=False)
        windows.append(memory)
        logits.append(extra[SampleBatch.ACTION_DIST_INPUTS])
        outs.append(mem_out)
        memory = np.concatenate([memory, [mem_out]])[1:]
    assert np.shape(mem_out) == (8,) and not np.allclose(windows[-1], 0.0)
    np.testing.assert_array_equal(windows[-1], np.stack(outs[-4:-1]))  # the last three memory rows
    _, (batch_out,), extra = policy.compute_actions_from_input_dict(
        SampleBatch({"obs": obs, "state_in_0": np.stack(windows)}), explore=False
    )
    np.testing.assert_allclose(extra[SampleBatch.ACTION_DIST_INPUTS], np.stack(logits), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batch_out, np.stack(outs), rtol=1e-4, atol=1e-5)


def test_fake_gpu_towers_each_train_on_whole_sequences_with_their_memory():
    """Two (fake) GPU towers split the padded batch between sequences; each tower's loss
    sees every sequence with its own memory window."""
    pytest.importorskip("torch")
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    config = {
        "framework": "torch",
        "num_gpus": 2,
        "_fake_gpus": True,
        "gamma": 0.9,
        "lr": 0.01,
        "model": dict(ATTENTION),
    }
    worker = RolloutWorker(
        env_creator=lambda _: gym.make("CartPole-v1"),
        policy_spec=_torch_policy_class(),
        policy_config=config,
        num_envs=2,
        rollout_fragment_length=30,
        seed=2,
    )
    batches = [worker.sample() for _ in range(2)]
    whole, rows = _episode_rows(batches)
    train = batches[-1]
    worker.policy.seen_train_batches.clear()
    info = worker.learn_on_batch(train.copy())["default_policy"]
    assert np.isfinite(info["learner_stats"]["policy_loss"])
    seen = worker.policy.seen_train_batches
    assert len(seen) == 2
    eps_of = {
        (int(u), int(t)): int(e)
        for u, t, e in zip(train[SampleBatch.UNROLL_ID], train[SampleBatch.T], train[SampleBatch.EPS_ID])
    }
    total, zero = 0, np.zeros(8, np.float32)
    for tower in seen:
        seq_lens = tower[SampleBatch.SEQ_LENS]
        real = seq_lens > 0  # a tower may be padded with empty sequences
        total += int(seq_lens.sum())
        for j in np.nonzero(real)[0]:
            s = j * MAX_SEQ_LEN
            key = (int(tower[SampleBatch.UNROLL_ID][s]), int(tower[SampleBatch.T][s]))
            eps, t0 = eps_of[key], key[1]
            if t0 - MEMORY >= 0 and (t0 - MEMORY) not in rows[eps]:
                continue
            np.testing.assert_array_equal(
                tower["state_in_0"][j], _window(whole, rows, eps, t0, "state_out_0", MEMORY, zero)
            )
    assert total == train.count


@pytest.mark.parametrize("fw", ["tf2", "torch"])
def test_weights_move_between_two_policies_in_one_process(fw):
    """Weight keys do not depend on how many attention models the process built before
    (a WorkerSet's local and remote workers live in one process without Ray)."""
    pytest.importorskip("torch" if fw == "torch" else "tensorflow")
    cls = _torch_policy_class() if fw == "torch" else _tf_policy_class().as_eager()
    config = {"framework": fw, "model": dict(ATTENTION, attention_num_transformer_units=2)}
    obs_space, act_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    first, second = cls(obs_space, act_space, config), cls(obs_space, act_space, config)
    rng = np.random.default_rng(0)
    inputs = SampleBatch(
        {
            "obs": rng.uniform(-1, 1, (3, 4)).astype(np.float32),
            "state_in_0": rng.normal(size=(3, MEMORY, 8)).astype(np.float32),
            "state_in_1": rng.normal(size=(3, MEMORY, 8)).astype(np.float32),
            "prev_actions": np.array([[0, 1], [1, 1], [0, 0]]),
            "prev_rewards": np.ones((3, N_PREV), np.float32),
        }
    )
    logits = [
        p.compute_actions_from_input_dict(inputs.copy(), explore=False)[2][SampleBatch.ACTION_DIST_INPUTS]
        for p in (first, second)
    ]
    assert not np.allclose(logits[0], logits[1])  # independently initialised
    if fw == "tf2":  # every variable has its own weight entry (none shadowed by a same-named one)
        m = first.model
        keras_weights = {
            id(v)
            for part in (m.base_model, m.gtrxl.trxl_model, m._logits_branch, m._value_branch)
            for v in part.weights
        }
        assert len(first.get_weights()) == len(keras_weights) == 4 + 2 + 2 * 27 + 4
    second.set_weights(first.get_weights())
    again = second.compute_actions_from_input_dict(inputs.copy(), explore=False)[2][
        SampleBatch.ACTION_DIST_INPUTS
    ]
    np.testing.assert_allclose(again, logits[0], rtol=1e-5, atol=1e-6)


@pytest.mark.tf
def test_eager_saved_model_takes_the_memory_window(tmp_path):
    """An exported tf2 attention policy serves ``state_in_0`` [B, memory, dim] + ``seq_lens``
    (the window the view requirement declares; the model has no initial state)."""
    pytest.importorskip("tensorflow")
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf()
    if not tf1.executing_eagerly():
        pytest.skip("loading a SavedModel eagerly needs eager execution")
    model = {k: v for k, v in ATTENTION.items() if not k.startswith("attention_use_n")}
    policy = _tf_policy_class().as_eager()(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), {"framework": "tf2", "model": model}
    )
    rng = np.random.default_rng(1)
    obs = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    memory = rng.normal(size=(3, MEMORY, 8)).astype(np.float32)
    _, (mem_out,), extra = policy.compute_actions_from_input_dict(
        SampleBatch({"obs": obs, "state_in_0": memory}), explore=False
    )
    policy.export_model(str(tmp_path / "m"))
    serve = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    got = serve(obs=tf.constant(obs), state_in_0=tf.constant(memory), seq_lens=tf.ones(3, tf.int32))
    np.testing.assert_allclose(
        got["output"].numpy(), extra[SampleBatch.ACTION_DIST_INPUTS], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(got["state_out_0"].numpy(), mem_out, rtol=1e-5, atol=1e-6)


def test_a_batch_in_rllib_1_11_layout_trains_the_same():
    """RLlib 1.11's collector stores one memory window per sequence plus ``seq_lens``; such
    a batch gives the same loss as rlpolicy's one-window-per-row batch."""
    pytest.importorskip("torch")
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    config = {"framework": "torch", "gamma": 0.9, "lr": 0.01, "model": dict(ATTENTION)}
    worker = RolloutWorker(
        env_creator=lambda _: gym.make("CartPole-v1"),
        policy_spec=_torch_policy_class(),
        policy_config=config,
        num_envs=1,
        rollout_fragment_length=22,
        seed=4,
    )
    batch = worker.sample()
    # Sequences by hand: a new one at every episode/unroll change and after MAX_SEQ_LEN rows.
    starts = [0]
    for i in range(1, batch.count):
        new_run = (
            batch[SampleBatch.EPS_ID][i] != batch[SampleBatch.EPS_ID][i - 1]
            or batch[SampleBatch.UNROLL_ID][i] != batch[SampleBatch.UNROLL_ID][i - 1]
        )
        if new_run or i - starts[-1] >= MAX_SEQ_LEN:
            starts.append(i)
    seq_lens = np.diff(starts + [batch.count]).astype(np.int32)
    strided = SampleBatch(
        {
            **{k: v for k, v in batch.items() if k != "state_in_0"},
            "state_in_0": batch["state_in_0"][starts],
            SampleBatch.SEQ_LENS: seq_lens,
        }
    )
    policy = worker.policy
    weights = policy.get_weights()
    per_row = policy.learn_on_batch(batch.copy())["learner_stats"]["policy_loss"]
    policy.set_weights(weights)
    policy.seen_train_batches.clear()
    as_111 = policy.learn_on_batch(strided)["learner_stats"]["policy_loss"]
    np.testing.assert_allclose(as_111, per_row, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(policy.seen_train_batches[-1]["state_in_0"], batch["state_in_0"][starts])
