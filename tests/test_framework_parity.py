"""The same PG policy in torch, tf (graph) and tf2 (eager), from the same
initial weights and batch, agrees: greedy actions, distribution inputs,
log-likelihoods, the loss, and the weights after one plain-SGD step.

The torch weights are copied into both TF models (torch Linear weights are
``[out, in]``, TF kernels ``[in, out]``); the loss is also checked against
numpy, and the SGD step against ``w - lr * grad`` with a numpy gradient of
the logits layer.
"""

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")

from tensorflow.python.eager.context import eager_mode  # noqa: E402

from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy  # noqa: E402
from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
LR = 0.5
CONFIG = {
    "lr": LR,
    "seed": 0,
    "model": {"fcnet_hiddens": [6], "fcnet_activation": "tanh", "vf_share_layers": True},
}
# torch fcnet parameter -> TF variable (vf_share_layers=True, one hidden layer).
TORCH_TO_TF = {
    "_hidden_layers.0._model.0.weight": "fc_1/kernel",
    "_hidden_layers.0._model.0.bias": "fc_1/bias",
    "_logits._model.0.weight": "fc_out/kernel",
    "_logits._model.0.bias": "fc_out/bias",
    "_value_branch._model.0.weight": "value_out/kernel",
    "_value_branch._model.0.bias": "value_out/bias",
}


def _sgd(policy, config):
    if policy.framework == "torch":
        return torch.optim.SGD(policy.model.parameters(), lr=config["lr"])
    if policy.get_session() is not None:
        return tf1.train.GradientDescentOptimizer(config["lr"])
    return get_keras().optimizers.SGD(learning_rate=config["lr"])


def _tf_vars(policy):
    return {v.name.split(":")[0]: v for v in policy.model.variables()}


def _tf_values(policy):
    vs = _tf_vars(policy)
    sess = policy.get_session()
    if sess is not None:
        return dict(zip(vs, sess.run(list(vs.values()))))
    with eager_mode():  # the eager policy's variables, also from a TF1-mode (graph) process
        return {k: v.numpy() for k, v in vs.items()}


def _load_torch_weights_into_tf(policy, torch_state):
    tf_vars = _tf_vars(policy)
    assert set(tf_vars) == set(TORCH_TO_TF.values())
    sess = policy.get_session()
    for t_name, value in torch_state.items():
        value = value.T if value.ndim == 2 else value
        var = tf_vars[TORCH_TO_TF[t_name]]
        if sess is None:
            with eager_mode():
                var.assign(value)
        else:
            with sess.graph.as_default():
                var.load(value, sess)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture(scope="module")
def policies():
    torch.manual_seed(0)
    t_pol = PGTorchPolicy.with_updates(name="PGTorchSGD", optimizer_fn=_sgd)(OBS, ACT, dict(CONFIG))
    state = {k: v.detach().numpy().copy() for k, v in t_pol.model.state_dict().items()}
    tf_cls = PGTFPolicy.with_updates(name="PGTFSGD", optimizer_fn=_sgd)
    out = {"torch": t_pol}
    for fw, cls in (("tf", tf_cls), ("tf2", tf_cls.as_eager())):
        out[fw] = cls(OBS, ACT, {**CONFIG, "framework": fw})
        _load_torch_weights_into_tf(out[fw], state)
    return out, state


def _batch(n=10, seed=1):
    r = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 4)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 3, n),
            SampleBatch.REWARDS: np.zeros(n, np.float32),
            "advantages": r.normal(size=n).astype(np.float32),
        }
    )


def _numpy_logits(w, obs):
    hidden = np.tanh(
        obs.astype(np.float64) @ w["_hidden_layers.0._model.0.weight"].T + w["_hidden_layers.0._model.0.bias"]
    )
    return hidden, hidden @ w["_logits._model.0.weight"].T + w["_logits._model.0.bias"]


def test_same_weights_same_actions_logits_and_log_likelihoods(policies):
    pols, state = policies
    obs = _batch()[SampleBatch.OBS]
    _, logits = _numpy_logits(state, obs)
    actions = {}
    for fw, pol in pols.items():
        a, _, extra = pol.compute_actions(obs, explore=False)
        actions[fw] = np.asarray(a)
        np.testing.assert_allclose(
            extra[SampleBatch.ACTION_DIST_INPUTS], logits, rtol=1e-5, atol=1e-5, err_msg=fw
        )
    np.testing.assert_array_equal(actions["torch"], np.argmax(logits, -1))
    np.testing.assert_array_equal(actions["tf"], actions["torch"])
    np.testing.assert_array_equal(actions["tf2"], actions["torch"])
    some_actions = np.array([0, 1, 2, 2, 1, 0, 0, 1, 2, 1])
    expected = _log_softmax(logits)[np.arange(len(obs)), some_actions]
    for fw, pol in pols.items():
        np.testing.assert_allclose(
            np.asarray(pol.compute_log_likelihoods(some_actions, obs)),
            expected,
            rtol=1e-5,
            atol=1e-5,
            err_msg=fw,
        )


def test_one_sgd_step_gives_the_same_loss_and_weights(policies):
    pols, state = policies
    batch = _batch(seed=2)
    hidden, logits = _numpy_logits(state, batch[SampleBatch.OBS])
    n, acts, adv = len(batch), batch[SampleBatch.ACTIONS], batch["advantages"].astype(np.float64)
    expected_loss = -np.mean(_log_softmax(logits)[np.arange(n), acts] * adv)
    # d loss / d logits = -(onehot - softmax) * adv / n  ->  gradient of the logits layer.
    p = np.exp(_log_softmax(logits))
    d_logits = -(np.eye(3)[acts] - p) * adv[:, None] / n
    expected_w_out = state["_logits._model.0.weight"] - LR * (d_logits.T @ hidden)
    expected_b_out = state["_logits._model.0.bias"] - LR * d_logits.sum(0)

    losses = {
        fw: float(pol.learn_on_batch(batch.copy())[LEARNER_STATS_KEY]["policy_loss"])
        for fw, pol in pols.items()
    }
    for fw, loss in losses.items():
        assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-6), fw
    t_after = {k: v.detach().numpy() for k, v in pols["torch"].model.state_dict().items()}
    np.testing.assert_allclose(t_after["_logits._model.0.weight"], expected_w_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t_after["_logits._model.0.bias"], expected_b_out, rtol=1e-5, atol=1e-6)
    assert not np.allclose(
        t_after["_hidden_layers.0._model.0.weight"], state["_hidden_layers.0._model.0.weight"]
    )  # the step reached the hidden layer
    for fw in ("tf", "tf2"):
        tf_after = _tf_values(pols[fw])
        for t_name, value in t_after.items():
            got = tf_after[TORCH_TO_TF[t_name]]
            np.testing.assert_allclose(
                got.T if got.ndim == 2 else got, value, rtol=1e-5, atol=1e-5, err_msg=f"{fw}: {t_name}"
            )
