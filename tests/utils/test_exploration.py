"""Exploration base, factory, Random, StochasticSampling and EpsilonGreedy (torch, tf, tf2).

Noise explorations are in test_exploration_noise.py; explorations driven by the
real action distributions in test_exploration_real_dists.py.
"""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from exploration_harness import Driver, exploration_kwargs, fake_dist, struct_dist_class

from rlpolicy.utils.exploration import (
    EpsilonGreedy,
    Exploration,
    GaussianNoise,
    PerWorkerEpsilonGreedy,
    Random,
    StochasticSampling,
)
from rlpolicy.utils.exploration._factory import create_exploration
from rlpolicy.utils.schedules import ConstantSchedule

FLOAT_MIN = -3.4e38
DISCRETE4 = gym.spaces.Discrete(4)


def factory_kwargs(space=DISCRETE4, framework="torch", **over):
    kw = dict(
        action_space=space, policy_config={}, model=None, num_workers=0, worker_index=0, framework=framework
    )
    kw.update(over)
    return kw


class CustomExploration(Exploration):
    def __init__(self, action_space, *, knob=3, **kwargs):
        super().__init__(action_space, **kwargs)
        self.knob = knob


# ----------------------------------------------------------------------------
# Factory.
# ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "type_spec", [EpsilonGreedy, "EpsilonGreedy", "rlpolicy.utils.exploration.epsilon_greedy.EpsilonGreedy"]
)
def test_factory_resolves_class_name_and_path(type_spec):
    cfg = {"type": type_spec, "initial_epsilon": 0.5, "epsilon_timesteps": 7}
    expl = create_exploration(cfg, **factory_kwargs())
    assert type(expl) is EpsilonGreedy
    assert expl.epsilon_schedule(0) == pytest.approx(0.5, abs=1e-6)
    assert expl.epsilon_schedule(7) == pytest.approx(0.05, abs=1e-6)
    assert cfg == {"type": type_spec, "initial_epsilon": 0.5, "epsilon_timesteps": 7}


def test_factory_passes_policy_context_and_custom_kwargs():
    cfg = {"type": f"{__name__}.CustomExploration", "knob": 9}
    expl = create_exploration(cfg, **factory_kwargs(num_workers=3, worker_index=2))
    assert isinstance(expl, CustomExploration) and expl.knob == 9
    assert (expl.num_workers, expl.worker_index, expl.framework) == (3, 2, "torch")
    assert expl.action_space == DISCRETE4 and expl.policy_config == {}


@pytest.mark.parametrize("cfg", [None, {}])
def test_factory_defaults_to_stochastic_sampling(cfg):
    assert type(create_exploration(cfg, **factory_kwargs())) is StochasticSampling


def test_factory_returns_an_exploration_object_unchanged():
    expl = Random(DISCRETE4, **{k: v for k, v in factory_kwargs().items() if k != "action_space"})
    assert create_exploration(expl, **factory_kwargs()) is expl


@pytest.mark.parametrize(
    "cfg, exc, match",
    [
        (
            {"type": "NoSuchExploration"},
            ValueError,
            r"'NoSuchExploration' is unknown; use a class, one of \[.*'EpsilonGreedy'.*"
            r"'StochasticSampling'",
        ),
        ({"type": "no.such.module.Cls"}, ValueError, r"'no\.such\.module\.Cls' is unknown"),
        ({"type": dict}, ValueError, r"not a subclass of Exploration"),
        ({"type": 3}, ValueError, r"must be a class or a string, got 3"),
        ({"epsilon": 0.1}, ValueError, r"has no 'type' key; known types: \[.*'Random'"),
        ("EpsilonGreedy", ValueError, r"must be a dict with a 'type' key"),
        ({"type": "EpsilonGreedy", "framework": "tf"}, ValueError, r"sets \['framework'\]"),
        (
            {"type": "EpsilonGreedy", "epsilon": 0.3},
            TypeError,
            r"EpsilonGreedy config: .*unexpected keyword argument 'epsilon'",
        ),
        (
            {"type": "EpsilonGreedy", "epsilon_schedule": {"type": "Bogus"}},
            ValueError,
            r"schedule 'type'='Bogus' is unknown; use a class, one of \[.*'ConstantSchedule'",
        ),
    ],
)
def test_factory_errors(cfg, exc, match):
    with pytest.raises(exc, match=match):
        create_exploration(cfg, **factory_kwargs())


@pytest.mark.parametrize(
    "cls, space, match",
    [
        (EpsilonGreedy, gym.spaces.Box(-1, 1, (2,)), r"EpsilonGreedy needs a Discrete"),
        (GaussianNoise, DISCRETE4, r"GaussianNoise needs a Box action space"),
    ],
)
def test_wrong_action_space_is_rejected(cls, space, match):
    with pytest.raises(ValueError, match=match):
        cls(**exploration_kwargs(space, "torch"))


@pytest.mark.parametrize("cls", [EpsilonGreedy, Random, StochasticSampling])
def test_unknown_framework_is_rejected(cls):
    with pytest.raises(ValueError, match=r"framework='mxnet' is not supported; use one of"):
        cls(**exploration_kwargs(DISCRETE4, "mxnet"))


# ----------------------------------------------------------------------------
# Base class hooks.
# ----------------------------------------------------------------------------
def test_base_hooks_are_pass_throughs():
    expl = Exploration(DISCRETE4, **{k: v for k, v in factory_kwargs().items() if k != "action_space"})
    opts, loss, batch = ["opt"], ["loss"], {"obs": np.zeros(2)}
    assert expl.get_exploration_optimizer(opts) is opts
    assert expl.get_exploration_loss(loss, batch) is loss
    assert expl.postprocess_trajectory(None, batch) is batch
    assert expl.get_state() == {} and expl.set_state({}) is None
    assert expl.before_compute_actions(timestep=1, explore=True) is None
    assert expl.on_episode_start(None, environment=None, episode=0) is None
    assert expl.on_episode_end(None, environment=None, episode=0) is None
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert expl.get_info() == {}
    assert any("get_state" in str(x.message) for x in w)


def test_torch_exploration_takes_the_model_device():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 2)
    expl = Random(**{**exploration_kwargs(DISCRETE4, "torch"), "model": model})
    assert expl.device == torch.device("cpu")


def _first_parameter_models(torch):
    nn = torch.nn

    class NoOwnParams(nn.Module):  # parameters only in (nested) children, one slot unset
        def __init__(self):
            super().__init__()
            self.empty = nn.Sequential(nn.Tanh())
            self.unset = None
            self.body = nn.Sequential(nn.Tanh(), nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1)))

    class Shared(nn.Module):  # one child twice: visited once
        def __init__(self):
            super().__init__()
            inner = nn.Sequential(nn.ReLU())
            self.a, self.b, self.c = inner, inner, nn.Linear(2, 2)

    class CustomOrder(nn.Module):  # overrides the enumeration: its own order counts
        def __init__(self):
            super().__init__()
            self.x, self.y = nn.Linear(2, 2), nn.Linear(2, 2)

        def parameters(self, recurse=True):
            return iter([self.y.bias, self.x.weight])

    class CustomChild(nn.Sequential):  # a child with its own module walk
        def named_modules(self, memo=None, prefix="", remove_duplicate=True):
            yield prefix, self
            yield prefix + ".1", self[1]

    class HasCustomChild(nn.Module):
        def __init__(self):
            super().__init__()
            self.kids = CustomChild(nn.Linear(2, 2), nn.Linear(2, 3))

    return {
        "linear": nn.Linear(2, 2),
        "no-own-params": NoOwnParams(),
        "shared": Shared(),
        "custom-order": CustomOrder(),
        "custom-child": HasCustomChild(),
        "no-params": nn.Sequential(nn.Tanh(), nn.ReLU()),
    }


@pytest.mark.parametrize(
    "name", ["linear", "no-own-params", "shared", "custom-order", "custom-child", "no-params"]
)
def test_torch_exploration_device_comes_from_the_first_parameter_torch_lists(name):
    # The device is that of next(model.parameters()) (the lookup is a direct walk
    # where torch's enumeration is not overridden).
    torch = pytest.importorskip("torch")
    from rlpolicy.utils.exploration.exploration import _first_parameter

    model = _first_parameter_models(torch)[name]
    expected = next(iter(model.parameters()), None)
    assert _first_parameter(model, torch.nn.Module) is expected
    if name == "custom-child":  # (the override's own order: Linear(2, 3)'s weight)
        assert expected.shape == (3, 2)
    expl = Random(**{**exploration_kwargs(DISCRETE4, "torch"), "model": model})
    assert expl.device == (None if expected is None else torch.device("cpu"))


# ----------------------------------------------------------------------------
# Random.
# ----------------------------------------------------------------------------
RANDOM_SPACES = {
    "box": gym.spaces.Box(-2.0, 3.0, (3,), np.float32),
    "box-half-bounded": gym.spaces.Box(
        np.array([0.0, -np.inf], np.float32), np.array([np.inf, np.inf], np.float32)
    ),
    "box-int": gym.spaces.Box(0, 3, (2,), np.int64),
    "discrete-start": gym.spaces.Discrete(3, start=2),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 4]),
    "dict": gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,))}),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiDiscrete([2, 5]))),
}


def _rows(actions, space, i):
    """Row i of a batched (nested) action, in the structure of ``space``."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _rows(actions[k], s, i) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_rows(a, s, i) for a, s in zip(actions, space.spaces))
    return np.asarray(actions[i], dtype=space.dtype)


def _leaves(actions):
    import tree

    return tree.flatten(actions)


@pytest.mark.parametrize("space_id", list(RANDOM_SPACES))
def test_random_actions_lie_in_the_space(framework, space_id):
    space = RANDOM_SPACES[space_id]
    space.seed(0)
    batch = 300
    driver = Driver(
        framework,
        lambda: Random(**exploration_kwargs(space, framework)),
        struct_dist_class(space, framework),
        in_dim=4,
    )
    actions, logp = driver.act(np.zeros((batch, 4)), timestep=0, explore=True)
    assert all(space.contains(_rows(actions, space, i)) for i in range(batch))
    np.testing.assert_array_equal(logp, np.zeros(batch, np.float32))
    # Uniform draws: every discrete value occurs, continuous ones are not constant.
    for leaf, sub in zip(_leaves(actions), _leaves(_space_struct(space))):
        if isinstance(sub, gym.spaces.Discrete):
            assert set(np.unique(leaf)) == set(range(sub.start, sub.start + sub.n))
        elif isinstance(sub, gym.spaces.MultiDiscrete):
            for col, n in enumerate(sub.nvec):
                assert set(np.unique(leaf[:, col])) == set(range(n))
        elif np.issubdtype(sub.dtype, np.integer):
            assert set(np.unique(leaf)) == set(range(int(sub.low.min()), int(sub.high.max()) + 1))
        else:
            assert leaf.std(axis=0).min() > 0.1


def _space_struct(space):
    from rlpolicy.utils.exploration._ops import base_struct_from_space

    return base_struct_from_space(space)


def test_random_bounded_box_is_uniform(framework):
    space = RANDOM_SPACES["box"]
    driver = Driver(
        framework,
        lambda: Random(**exploration_kwargs(space, framework)),
        struct_dist_class(space, framework),
        in_dim=4,
    )
    actions, _ = driver.act(np.zeros((4000, 4)), timestep=0)
    # U(-2, 3): mean 0.5, std 5 / sqrt(12).
    np.testing.assert_allclose(actions.mean(axis=0), 0.5, atol=0.15)
    np.testing.assert_allclose(actions.std(axis=0), 5 / np.sqrt(12), rtol=0.05, atol=1e-4)


def test_random_without_explore_is_deterministic(framework):
    space = RANDOM_SPACES["dict"]
    driver = Driver(
        framework,
        lambda: Random(**exploration_kwargs(space, framework)),
        struct_dist_class(space, framework),
        in_dim=4,
    )
    actions, logp = driver.act(np.zeros((5, 4)), timestep=0, explore=False)
    np.testing.assert_array_equal(actions["a"], np.zeros(5))
    np.testing.assert_array_equal(actions["b"], np.zeros((5, 2)))
    np.testing.assert_array_equal(logp, np.zeros(5))


# ----------------------------------------------------------------------------
# StochasticSampling.
# ----------------------------------------------------------------------------
def _ss_driver(framework, **kw):
    return Driver(
        framework,
        lambda: StochasticSampling(**exploration_kwargs(DISCRETE4, framework, **kw)),
        fake_dist("categorical", framework),
        4,
    )


def test_stochastic_sampling_without_explore_is_deterministic_sample(framework):
    driver = _ss_driver(framework)
    logits = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    actions, logp = driver.act(logits, timestep=3, explore=False)
    np.testing.assert_array_equal(actions, logits.argmax(axis=1))
    np.testing.assert_array_equal(logp, np.zeros(50))


def test_stochastic_sampling_samples_with_their_logp(framework):
    driver = _ss_driver(framework)
    logits = np.tile(np.log(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)), (8000, 1))
    actions, logp = driver.act(logits, timestep=0, explore=True)
    freq = np.bincount(actions, minlength=4) / len(actions)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.025)
    np.testing.assert_allclose(logp, np.log([0.1, 0.2, 0.3, 0.4])[actions], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pass_timestep", [True, False], ids=["timestep", "no-timestep"])
def test_stochastic_sampling_random_timesteps(framework, pass_timestep):
    """Timesteps 0..N-1 draw uniformly from the space, later ones from the distribution."""
    n_random = 3
    driver = _ss_driver(framework, random_timesteps=n_random)
    logits = np.tile(np.array([[60.0, 0.0, 0.0, 0.0]], np.float32), (400, 1))
    if not pass_timestep:
        driver.act(logits, timestep=-1)  # Next calls without a timestep count from 0.
    for t in range(n_random + 2):
        actions, logp = driver.act(logits, timestep=t if pass_timestep else None)
        counts = np.bincount(actions, minlength=4)
        if t < n_random:
            assert counts.min() > 60, (t, counts)  # ~100 each; action 1-3 have p=e^-60 here.
            np.testing.assert_array_equal(logp, np.zeros(400))
        else:
            assert counts[0] == 400, (t, counts)
    # The random phase does not come back for smaller timesteps once explore=False.
    actions, _ = driver.act(logits, timestep=0, explore=False)
    assert (actions == 0).all()


# ----------------------------------------------------------------------------
# EpsilonGreedy.
# ----------------------------------------------------------------------------
# initial 1.0 for 10 warm-up steps, then linear to 0.1 at t=30 (hand-computed values).
EPS_KW = dict(initial_epsilon=1.0, final_epsilon=0.1, warmup_timesteps=10, epsilon_timesteps=20)
EPS_EXPECTED = {0: 1.0, 5: 1.0, 10: 1.0, 15: 0.775, 20: 0.55, 25: 0.325, 29: 0.145, 30: 0.1, 1000: 0.1}


def _eg_driver(framework, cls=EpsilonGreedy, **kw):
    return Driver(
        framework,
        lambda: cls(**exploration_kwargs(DISCRETE4, framework, **kw)),
        fake_dist("categorical", framework),
        4,
    )


def test_epsilon_follows_its_schedule(framework):
    driver = _eg_driver(framework, **EPS_KW)
    q = np.array([[0.0, 1.0, 5.0, 2.0]], np.float32)
    for t, eps in EPS_EXPECTED.items():
        driver.act(q, timestep=t)
        state = driver.get_state()
        assert float(state["cur_epsilon"]) == pytest.approx(eps, abs=1e-6), t
        assert int(state["last_timestep"]) == t


def test_epsilon_state_survives_get_set_state(framework):
    q = np.array([[0.0, 1.0, 5.0, 2.0]], np.float32)
    source = _eg_driver(framework, **EPS_KW)
    source.act(q, timestep=25)
    state = source.get_state()
    fresh = _eg_driver(framework, **EPS_KW)
    assert float(fresh.get_state()["cur_epsilon"]) == pytest.approx(1.0, abs=1e-6)
    fresh.set_state(state)
    restored = fresh.get_state()
    assert int(restored["last_timestep"]) == 25
    assert float(restored["cur_epsilon"]) == pytest.approx(0.325, abs=1e-6)
    fresh.act(q, timestep=None)  # One step past the restored timestep: eps(26) = 0.28.
    assert float(fresh.get_state()["cur_epsilon"]) == pytest.approx(0.28, abs=1e-6)


def test_set_state_without_timestep_names_the_key(framework):
    driver = _eg_driver(framework)
    with pytest.raises(KeyError, match="no 'last_timestep' key"):
        driver.set_state({"cur_epsilon": 0.5})
    assert int(driver.get_state()["last_timestep"]) == 0


@pytest.mark.parametrize("schedule", ["object", "config"])
def test_random_action_frequency_matches_epsilon(framework, schedule):
    eps, batch = 0.3, 6000
    sched = (
        ConstantSchedule(eps, framework=framework)
        if schedule == "object"
        else {"type": "ConstantSchedule", "value": eps}
    )
    driver = _eg_driver(framework, epsilon_schedule=sched)
    # Greedy action 2; action 3 is masked out (FLOAT_MIN) and must never be picked.
    q = np.tile(np.array([[0.0, 1.0, 5.0, FLOAT_MIN]], np.float32), (batch, 1))
    actions, logp = driver.act(q, timestep=0)
    counts = np.bincount(actions, minlength=4)
    assert counts[3] == 0
    # A random action is uniform over the 3 valid ones: P(non-greedy) = eps * 2 / 3.
    non_greedy = (counts[0] + counts[1]) / batch
    assert non_greedy == pytest.approx(eps * 2 / 3, abs=4 * np.sqrt(0.2 * 0.8 / batch))
    assert abs(counts[0] - counts[1]) < 5 * np.sqrt(batch * 0.1)
    np.testing.assert_array_equal(logp, np.zeros(batch))
    greedy, _ = driver.act(q, timestep=1, explore=False)
    assert (greedy == 2).all()


def test_torch_epsilon_greedy_draws_as_rllib_on_a_fixed_seed():
    """RLlib's torch recipe: rand(B) < eps, then multinomial over the unmasked actions."""
    torch = pytest.importorskip("torch")
    q = np.array(
        [[0.0, 1.0, 5.0, FLOAT_MIN], [FLOAT_MIN, 2.0, FLOAT_MIN, 1.0], [3.0, 0.0, 1.0, 2.0]], np.float32
    )
    driver = _eg_driver("torch", epsilon_schedule=ConstantSchedule(0.5, framework="torch"))
    torch.manual_seed(7)
    got = [driver.act(q, timestep=t)[0] for t in range(200)]
    torch.manual_seed(7)
    qt = torch.from_numpy(q)
    for actions in got:
        chose_random = torch.rand(3) < 0.5
        random_actions = torch.multinomial((qt > FLOAT_MIN).float(), 1).squeeze(1)
        expected = torch.where(chose_random, random_actions, qt.argmax(1))
        np.testing.assert_array_equal(actions, expected.numpy())


def test_torch_epsilon_greedy_rejects_a_fully_masked_row():
    pytest.importorskip("torch")
    driver = _eg_driver("torch", **EPS_KW)
    q = np.array([[0.0, 1.0, 5.0, 2.0], [FLOAT_MIN] * 4], np.float32)
    with pytest.raises(ValueError, match="EpsilonGreedy: a row of action weights sums to 0 or NaN"):
        driver.act(q, timestep=0)


@pytest.mark.tf
@pytest.mark.tf_eager_code
def test_epsilon_greedy_in_a_tf_function():
    """With eager_tracing the exploration runs inside tf.function; its state still updates."""
    pytest.importorskip("tensorflow")
    from exploration_harness import TFFakeCategorical

    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    expl = EpsilonGreedy(**exploration_kwargs(DISCRETE4, "tf2", **EPS_KW))

    @tf.function
    def act(q, t, explore):
        return expl.get_exploration_action(
            action_distribution=TFFakeCategorical(q), timestep=t, explore=explore
        )

    q = tf.constant(np.tile([[0.0, 1.0, 5.0, 2.0]], (2000, 1)).astype(np.float32))
    for t in (0, 20, 30):
        actions, _ = act(q, tf.constant(t, tf.int64), tf.constant(True))
        state = expl.get_state()
        assert int(state["last_timestep"]) == t
        assert float(state["cur_epsilon"]) == pytest.approx(EPS_EXPECTED[t], abs=1e-6)
        non_greedy = float(np.mean(actions.numpy() != 2))
        assert non_greedy == pytest.approx(EPS_EXPECTED[t] * 0.75, abs=0.05)


@pytest.mark.parametrize(
    "num_workers, worker_index, expected",
    [
        (4, 0, 0.0),
        (4, 1, 0.4),
        (4, 2, 0.4 ** (1 + 1 / 3 * 7)),
        (4, 4, 0.4**8),
        (1, 1, 0.4),
        (0, 0, 1.0),  # No remote workers: the regular schedule (initial_epsilon=1.0).
    ],
)
def test_per_worker_epsilon(framework, num_workers, worker_index, expected):
    driver = Driver(
        framework,
        lambda: PerWorkerEpsilonGreedy(
            **{
                **exploration_kwargs(DISCRETE4, framework),
                "num_workers": num_workers,
                "worker_index": worker_index,
            }
        ),
        fake_dist("categorical", framework),
        4,
    )
    driver.act(np.zeros((1, 4), np.float32), timestep=0)
    assert float(driver.get_state()["cur_epsilon"]) == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_per_worker_epsilon_rejects_index_above_num_workers():
    with pytest.raises(ValueError, match="worker_index=5 is larger than num_workers=2"):
        PerWorkerEpsilonGreedy(
            **{**exploration_kwargs(DISCRETE4, "torch"), "num_workers": 2, "worker_index": 5}
        )


@pytest.mark.tf
def test_tf_graph_explorations_keep_separate_state_variables():
    """Two explorations in one policy graph: own non-trainable variables, own timesteps."""
    pytest.importorskip("tensorflow")
    from exploration_harness import TFFakeCategorical

    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf()
    graph = tf1.Graph()
    with graph.as_default():
        first = EpsilonGreedy(**exploration_kwargs(DISCRETE4, "tf", **EPS_KW))
        second = EpsilonGreedy(**exploration_kwargs(DISCRETE4, "tf", **EPS_KW))
        q = tf.constant([[0.0, 1.0, 5.0, 2.0]])
        op, _ = first.get_exploration_action(
            action_distribution=TFFakeCategorical(q), timestep=tf.constant(15, tf.int64), explore=True
        )
        assert not tf1.trainable_variables()
        assert len(tf1.global_variables()) == 2
        sess = tf1.Session(graph=graph)
        sess.run(tf1.global_variables_initializer())
    sess.run(op)
    assert int(first.get_state(sess)["last_timestep"]) == 15
    assert float(first.get_state(sess)["cur_epsilon"]) == pytest.approx(0.775, abs=1e-6)
    assert int(second.get_state(sess)["last_timestep"]) == 0
    with pytest.raises(ValueError, match=r"needs the policy's tf Session: pass sess="):
        second.set_state({"last_timestep": 3})
