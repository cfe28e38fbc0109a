"""rlpolicy.utils.schedules: hand-worked values in python, torch, eager tf and TF graph mode."""

import math

import pytest

from rlpolicy.utils.schedules import (
    ConstantSchedule,
    ExponentialSchedule,
    LinearSchedule,
    PiecewiseSchedule,
    PolynomialSchedule,
    Schedule,
)

# (schedule factory, [(t, expected value)]) worked out by hand.
CASES = {
    "constant": (lambda fw: ConstantSchedule(0.3, framework=fw), [(0, 0.3), (10**6, 0.3)]),
    "linear": (
        lambda fw: LinearSchedule(schedule_timesteps=100, final_p=0.1, initial_p=1.1, framework=fw),
        [(0, 1.1), (50, 0.6), (100, 0.1), (500, 0.1)],
    ),
    # 0.0 + 1.0 * (1 - t/10)^2
    "poly": (
        lambda fw: PolynomialSchedule(schedule_timesteps=10, final_p=0.0, framework=fw),
        [(0, 1.0), (5, 0.25), (8, 0.04), (20, 0.0)],
    ),
    # 2 * 0.5^(t/10)
    "exp": (
        lambda fw: ExponentialSchedule(schedule_timesteps=10, initial_p=2.0, decay_rate=0.5, framework=fw),
        [(0, 2.0), (10, 1.0), (20, 0.5), (5, 2.0 * math.sqrt(0.5))],
    ),
    "piecewise": (
        lambda fw: PiecewiseSchedule([(0, 1.0), (10, 0.5), (30, 0.1)], outside_value=0.05, framework=fw),
        [(0, 1.0), (5, 0.75), (10, 0.5), (20, 0.3), (29, 0.5 - 0.4 * 19 / 20), (30, 0.05), (-1, 0.05)],
    ),
}


@pytest.fixture(params=list(CASES))
def case(request):
    return CASES[request.param]


def test_python_values(case):
    make, expected = case
    sched = make(None)
    assert isinstance(sched, Schedule)
    for t, v in expected:
        assert sched.value(t) == pytest.approx(v, abs=1e-6)
        assert sched(t) == pytest.approx(v, abs=1e-6)


def test_torch_tensor_timesteps(case):
    torch = pytest.importorskip("torch")
    make, expected = case
    sched = make("torch")
    for t, v in expected:
        out = sched(torch.tensor(t))
        assert float(out) == pytest.approx(v, rel=1e-6, abs=1e-6)


@pytest.mark.tf_eager_code
def test_eager_tf_values(case, tf_modules):
    _, tf = tf_modules
    make, expected = case
    sched = make("tf2")
    for t, v in expected:
        out = sched.value(t)
        assert tf.is_tensor(out)
        assert float(out.numpy()) == pytest.approx(v, rel=1e-6, abs=1e-6)
    # A tf tensor t also gives tf ops without a tf framework.
    assert float(make(None)(tf.constant(expected[1][0])).numpy()) == pytest.approx(
        expected[1][1], rel=1e-6, abs=1e-6
    )


@pytest.mark.tf
def test_graph_tf_values(case, tf_modules):
    tf1, tf = tf_modules
    make, expected = case
    graph = tf1.Graph()
    with graph.as_default():
        t_ph = tf1.placeholder(tf.int64, shape=())
        out = make("tf")(t_ph)
        with tf1.Session(graph=graph) as sess:
            for t, v in expected:
                assert float(sess.run(out, {t_ph: t})) == pytest.approx(v, rel=1e-6, abs=1e-6)


def test_piecewise_custom_interpolation():
    step = PiecewiseSchedule(
        [(0, 1.0), (10, 2.0)], interpolation=lambda left, right, alpha: left, outside_value=9.0
    )
    assert step(9) == 1.0 and step(10) == 9.0


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: PiecewiseSchedule([(10, 1.0), (0, 2.0)]), "sorted"),
        (lambda: PiecewiseSchedule([]), "non-empty"),
        (lambda: PolynomialSchedule(schedule_timesteps=0, final_p=0.0), "schedule_timesteps"),
        (lambda: LinearSchedule(schedule_timesteps=-1, final_p=0.0), "schedule_timesteps"),
        (lambda: ExponentialSchedule(schedule_timesteps=0), "schedule_timesteps"),
        (lambda: PiecewiseSchedule([(0, 1.0), (10, 2.0)])(11), "outside_value"),
    ],
)
def test_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_piecewise_tf_needs_outside_value(tf_modules):
    with pytest.raises(ValueError, match="outside_value"):
        PiecewiseSchedule([(0, 1.0), (10, 2.0)], framework="tf2")(3)
