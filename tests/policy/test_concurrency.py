"""Thread safety of acting vs. weight updates (torch, graph-tf and tf2 PPO policies).

Four threads compute actions while one thread installs new weight "versions"
(all weights equal to an integer v, standing in for a learn step) and one
thread round-trips get_state/set_state. The policy is linear
(``fcnet_hiddens: []``), so with ``explore=False`` every logit of an
observation whose entries sum to 1 is ``v * 1 + v = 2 v``: a forward pass that
saw weights of two versions (torn weights) gives a row that is not
``2 v`` for a single integer ``v``.
"""

import threading

import gymnasium as gym
import numpy as np
import pytest

OBS_DIM, N_ACT = 32, 8
OBS = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
ACT = gym.spaces.Discrete(N_ACT)
ACTORS, ACT_ITERS, LEARN_ITERS, STATE_ITERS = 4, 40, 60, 20


def _make(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    from rlpolicy.agents.ppo import PPOTFPolicy, PPOTorchPolicy

    config = {"framework": framework, "seed": 0, "model": {"fcnet_hiddens": [], "vf_share_layers": False}}
    cls = {"torch": PPOTorchPolicy, "tf": PPOTFPolicy}.get(framework) or PPOTFPolicy.as_eager()
    return cls(OBS, ACT, config)


def _versioned(weights, v):
    if not isinstance(weights, dict):  # an eager state's weights: RLlib 1.11's list
        return [np.full(np.shape(w), float(v), np.float32) for w in weights]
    return {k: np.full(np.shape(w), float(v), np.float32) for k, w in weights.items()}


def _values(weights):
    return list(weights.values()) if isinstance(weights, dict) else list(weights)


def _run_threads(targets):
    errors, barrier = [], threading.Barrier(len(targets))

    def wrap(fn):
        def run():
            try:
                barrier.wait()
                fn()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_actions_see_one_weight_version(framework):
    policy = _make(framework)
    template = policy.get_state()["weights"]
    policy.set_weights(_versioned(template, 1))
    obs = np.full((3, OBS_DIM), 1.0 / OBS_DIM, np.float32)  # each row sums to 1
    seen = []

    def actor():
        for _ in range(ACT_ITERS):
            _, _, extra = policy.compute_actions(obs, explore=False)
            seen.append(np.asarray(extra["action_dist_inputs"], np.float64))

    def learner():
        for v in range(2, LEARN_ITERS + 2):
            policy.set_weights(_versioned(template, v))

    def state_cycler():
        for _ in range(STATE_ITERS):
            policy.set_state(policy.get_state())

    errors = _run_threads([actor] * ACTORS + [learner, state_cycler])
    assert errors == []
    assert len(seen) == ACTORS * ACT_ITERS
    for logits in seen:
        versions = logits / 2.0
        v = np.round(versions[0, 0])
        # float32 sums of 32 terms: allow a little rounding, far below 0.5.
        np.testing.assert_allclose(versions, np.full_like(versions, v), rtol=0, atol=1e-3)
        assert 1 <= v <= LEARN_ITERS + 1
    final = policy.get_state()["weights"]
    last = max(int(np.round(np.max(w))) for w in _values(final))
    for w in _values(final):
        np.testing.assert_array_equal(w, np.full_like(w, last))
