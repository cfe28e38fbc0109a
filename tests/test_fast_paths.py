"""Every ``rlpolicy._fast`` entry run both ways (fast and plain) gives the same results.

Plus: a failed guard means the plain path and one log line; no module outside
``rlpolicy/_fast/`` imports framework internals; eager fast paths do not retrace.
"""

import ast
import logging
import pathlib

import gymnasium as gym
import numpy as np
import pytest

import rlpolicy
from rlpolicy import _fast

ROOT = pathlib.Path(rlpolicy.__file__).parent
ATOL = 1e-6
INTERNALS = ("torch._C", "tensorflow.python", "tf_keras.src", "keras.src")
FRAMEWORKS = ("torch", "tensorflow", "tf_keras", "keras")
# Files allowed to reach framework internals outside rlpolicy/_fast (none).
NOT_YET_MOVED: set = set()


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=ATOL, rtol=1e-5)


# ----------------------------------------------------------------- one case per entry


def _torch_state_dict():
    torch = pytest.importorskip("torch")
    from rlpolicy.policy._torch.convert import load_state_dict_fast, weights_snapshot

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    rng = np.random.default_rng(0)
    new = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in model.state_dict().items()}
    new["1.num_batches_tracked"] = np.array(7, np.int64)
    load_state_dict_fast(model, new)
    names = list(model.state_dict())
    return {"names": names, **weights_snapshot(model)}, new


def _torch_functional_linear():
    torch = pytest.importorskip("torch")
    from rlpolicy.models.catalog import MODEL_DEFAULTS
    from rlpolicy.models.torch.fcnet import FullyConnectedNetwork

    torch.manual_seed(0)
    cfg = {**MODEL_DEFAULTS, "fcnet_hiddens": [8, 8], "vf_share_layers": False}
    model = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (5,)), gym.spaces.Discrete(3), 3, cfg, "fc")
    obs = torch.from_numpy(np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32))
    logits, _ = model({"obs": obs, "obs_flat": obs}, [], None)
    value = model.value_function()
    (logits.sum() + value.sum()).backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    return [logits.detach().numpy(), value.detach().numpy(), *grads], None


def _keras_model():
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    keras = tf.keras
    inp = keras.Input((4,))
    h = keras.layers.Dense(8, activation="tanh")(inp)
    out = keras.layers.Dense(2)(tf.concat([h, inp], axis=-1))
    model = keras.Model(inp, [out, h])
    model.set_weights(
        [np.full(w.shape, 0.1 * (i + 1), np.float32) for i, w in enumerate(model.get_weights())]
    )
    return tf, model


def _keras_replay():
    pytest.importorskip("tensorflow")
    from rlpolicy.models.tf.functional_replay import KerasReplay

    tf, model = _keras_model()
    if not tf.executing_eagerly():
        pytest.skip("the replay runs eagerly only")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    return [t.numpy() for t in KerasReplay()(model, x)], None


def _tf_concrete_call():
    pytest.importorskip("tensorflow")
    from rlpolicy.utils.tf_utils import fast_function

    tf, model = _keras_model()
    if not tf.executing_eagerly():
        pytest.skip("fast_function calls concrete functions eagerly only")
    fn = fast_function(lambda x: model(x))
    xs = [tf.constant(np.full((n, 4), 0.5 * n, np.float32)) for n in (1, 3, 3, 1)]
    return [[t.numpy() for t in fn(x)] for x in xs], None


def _tf_session_callable():
    pytest.importorskip("tensorflow")
    from rlpolicy.utils.framework import try_import_tf
    from rlpolicy.utils.tf_run_builder import TFRunBuilder

    tf1, tf, _ = try_import_tf()
    graph = tf1.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 2])
        y = {"sum": tf.reduce_sum(x, axis=1), "double": [x * 2.0]}
        sess = tf1.Session(graph=graph)
    out = []
    for n in (1, 3, 3):
        builder = TFRunBuilder(sess, "test")
        fetch = builder.add_fetches([y])
        builder.add_feed_dict({x: np.full((n, 2), float(n), np.float32)})
        out.append(builder.get(fetch))
    sess.close()
    return out, None


def _torch_fused_adam():
    torch = pytest.importorskip("torch")
    from rlpolicy.policy._torch.optimizers import default_adam

    # Three Adam steps on fixed gradients (the optimizer built by the entry's choice)
    # against numpy's Adam formula (lr 0.1, betas (0.9, 0.999), eps 1e-8).
    x0 = np.array([0.5, -1.0, 2.0], np.float32)
    grads = [np.array([1.0, -2.0, 0.5], np.float32) * (k + 1) for k in range(3)]
    param = torch.nn.Parameter(torch.from_numpy(x0.copy()))
    opt = default_adam([param], lr=0.1)
    for g in grads:
        param.grad = torch.from_numpy(g)
        opt.step()
    x, m, v = x0.astype(np.float64), np.zeros(3), np.zeros(3)
    for t, g in enumerate(grads, 1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        x = x - 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return {"x": param.detach().numpy().copy()}, {"x": x}


CASES = {
    "torch_state_dict": _torch_state_dict,
    "torch_fused_adam": _torch_fused_adam,
    "torch_functional_linear": _torch_functional_linear,
    "keras_replay": _keras_replay,
    "tf_concrete_call": _tf_concrete_call,
    "tf_session_callable": _tf_session_callable,
}
TF_ENTRIES = {"keras_replay", "tf_concrete_call", "tf_session_callable"}


def _registered():
    for name in CASES:  # (importing the users of each entry registers it)
        if name in TF_ENTRIES:
            pytest.importorskip("tensorflow")
            import rlpolicy._fast.tf_internals  # noqa: F401
        else:
            pytest.importorskip("torch")
            import rlpolicy._fast.torch_functional  # noqa: F401
            import rlpolicy._fast.torch_optim  # noqa: F401
            import rlpolicy._fast.torch_state  # noqa: F401


def _assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, list) and a and isinstance(a[0], str):
        assert a == b
    elif isinstance(a, (list, tuple)) and a and not isinstance(a[0], (int, float, np.number)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        _close(a, b)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.tf) if n in TF_ENTRIES else n for n in CASES]
)
def test_entry_gives_the_same_results_fast_and_plain(name):
    _registered()
    entry = _fast.REGISTRY[name]
    if not entry.active:
        pytest.skip(f"{name} is off here ({entry.reason or 'forced plain'})")
    fast, expected = CASES[name]()
    assert entry.active
    with _fast.plain(name):
        assert not entry.active
        plain, _ = CASES[name]()
    assert entry.active
    _assert_same(fast, plain)
    if expected is not None:  # the independent expectation (what was loaded)
        _assert_same({k: v for k, v in fast.items() if k != "names"}, expected)
        if "names" in fast:
            assert fast["names"] == list(expected)


def test_fused_adam_entry_picks_the_kernel_and_the_plain_path_does_not():
    torch = pytest.importorskip("torch")
    from rlpolicy._fast.torch_optim import FUSED_ADAM, fused_adam_devices
    from rlpolicy.policy._torch.optimizers import default_adam

    if not FUSED_ADAM.active:
        pytest.skip(f"torch_fused_adam is off here ({FUSED_ADAM.reason})")
    param = torch.nn.Parameter(torch.zeros(2))
    assert "cpu" in fused_adam_devices()
    assert default_adam([param], lr=0.1).param_groups[0]["fused"] is True
    with _fast.plain("torch_fused_adam"):
        assert fused_adam_devices() == ()
        assert not default_adam([param], lr=0.1).param_groups[0]["fused"]


def test_every_registered_entry_has_a_case():
    _registered()
    assert set(_fast.REGISTRY) <= set(CASES) | {"keras_modes"}, sorted(_fast.REGISTRY)


def test_a_failed_guard_runs_the_plain_path_with_one_log_line(caplog):
    calls = []

    def guard():
        calls.append(1)
        return "feature X missing"

    with caplog.at_level(logging.INFO, logger="rlpolicy._fast"):
        entry = _fast.register("test_only_failing", "framework 0.1", guard)
        again = _fast.register("test_only_failing", "framework 0.1", guard)
    try:
        assert again is entry and not entry.active and entry.reason == "feature X missing"
        assert len(calls) == 1
        lines = [r.getMessage() for r in caplog.records if "test_only_failing" in r.getMessage()]
        assert len(lines) == 1 and "feature X missing" in lines[0] and "plain path" in lines[0]
        with _fast.plain("test_only_failing"):
            assert not entry.active
        assert not entry.active  # (the guard still fails)
    finally:
        del _fast.REGISTRY["test_only_failing"]


def test_a_raising_guard_is_a_failed_guard():
    entry = _fast.Entry("test_only_raising", "x", lambda: 1 / 0)
    assert not entry.active and "ZeroDivisionError" in entry.reason


def test_env_var_forces_the_plain_path(monkeypatch):
    monkeypatch.setenv("RLPOLICY_FAST_PLAIN", "a_name, other")
    assert not _fast.Entry("a_name", "x", lambda: None).active
    assert _fast.Entry("third", "x", lambda: None).active
    monkeypatch.setenv("RLPOLICY_FAST", "0")
    assert not _fast.Entry("third", "x", lambda: None).active


def test_plain_rejects_unknown_names():
    with pytest.raises(KeyError, match="unknown entries \\['nope'\\]"):
        with _fast.plain("nope"):
            pass


# ----------------------------------------------------------------- no internals outside _fast


def _private(part):
    return part.startswith("_") and not part.startswith("__")


def _internal_uses(path):
    """``(line, name)`` of every import of, or attribute chain into, framework internals."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            parts, cur = [], node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                names = [".".join([cur.id, *reversed(parts)])]
        if isinstance(node, (ast.Import, ast.ImportFrom)):  # private framework modules / names
            for name in names:
                parts = name.split(".")
                if parts[0] in FRAMEWORKS and any(_private(p) for p in parts[1:]):
                    found.append((node.lineno, name))
        for name in names:
            if any(name == p or name.startswith(p + ".") for p in INTERNALS):
                found.append((node.lineno, name))
            elif name in ("torch", "tensorflow") and isinstance(node, ast.ImportFrom):
                if any(a.name in ("_C", "python") for a in node.names):
                    found.append((node.lineno, f"{name}.{node.names[0].name}"))
    return found


def test_no_module_outside_fast_uses_framework_internals():
    bad = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("_fast/") or rel in NOT_YET_MOVED:
            continue
        uses = _internal_uses(path)
        if uses:
            bad[rel] = uses
    assert not bad, f"framework internals outside rlpolicy/_fast: {bad}"


def test_the_scan_finds_each_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import torch\nfrom torch import _C\nx = torch._C._get_tracing_state\n"
        "def f():\n    from tensorflow.python.ops import gen_nn_ops\n    import tf_keras.src.engine\n"
        "from torch.utils._foreach_utils import g\nfrom torch.utils import _pytree\nimport torch.__future__\n"
    )
    names = {n for _, n in _internal_uses(src)}
    assert {
        "torch._C",
        "torch._C._get_tracing_state",
        "tensorflow.python.ops",
        "tf_keras.src.engine",
        "torch.utils._foreach_utils",
        "torch.utils._pytree",
    } <= names
    assert not any(n.startswith("torch.__future__") for n in names)  # (dunders are public)


def test_fast_is_a_leaf():
    """``rlpolicy._fast`` imports nothing from rlpolicy but itself."""
    for path in (ROOT / "_fast").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlpolicy"):
                assert node.module.startswith("rlpolicy._fast"), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                for a in node.names:
                    assert not a.name.startswith("rlpolicy") or a.name.startswith("rlpolicy._fast"), path.name


# ----------------------------------------------------------------- no retracing per call


@pytest.mark.tf
@pytest.mark.tf_eager_code
@pytest.mark.learning  # (~30 s: six policies)
def test_eager_policies_over_random_spaces_do_not_retrace_after_the_first_calls(monkeypatch):
    """The retracing warnings a fuzz run printed came from the first traces of many
    instances (TF counts them per code object), not from calls that trace again."""
    pytest.importorskip("tensorflow")
    import contextlib

    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    if not tf.executing_eagerly():
        pytest.skip("eager policies only")
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy.utils import tf_utils

    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.addHandler(handler)
    monkeypatch.setattr(tf_utils, "tf_log_filtered", lambda *a: contextlib.nullcontext())  # see all
    rng = np.random.default_rng(0)
    try:
        for i in range(3):
            obs = gym.spaces.Box(-1, 1, (int(rng.integers(2, 6)),), np.float32)
            n_act = int(rng.integers(1, 3))
            act = (
                gym.spaces.Discrete(n_act + 1) if i % 2 == 0 else gym.spaces.Box(-1, 1, (n_act,), np.float32)
            )
            obs.seed(i)
            act.seed(i)
            for tracing in (False, True):
                cfg = {"framework": "tf2", "eager_tracing": tracing, "model": {"fcnet_hiddens": [8]}}
                policy = PPOTFPolicy.as_eager()(
                    obs, act, {**cfg, "train_batch_size": 8, "sgd_minibatch_size": 8}
                )
                batch = {
                    "obs": np.stack([obs.sample() for _ in range(8)]),
                    "actions": np.stack([act.sample() for _ in range(8)]),
                    "action_logp": np.zeros(8, np.float32),
                    "advantages": np.ones(8, np.float32),
                    "value_targets": np.ones(8, np.float32),
                    "vf_preds": np.zeros(8, np.float32),
                    "action_dist_inputs": np.zeros((8, policy.model.num_outputs), np.float32),
                }

                def calls(policy=policy, obs=obs, batch=batch):
                    for n in (1, 3, 1, 3):
                        policy.compute_actions(np.stack([obs.sample() for _ in range(n)]))
                    policy.learn_on_batch(SampleBatch(dict(batch)))

                calls()
                calls()  # (first calls: each shape and step traces once)
                before = len(messages)
                calls()
                calls()
                retraced = [m for m in messages[before:] if "retracing" in m]
                assert not retraced, (i, tracing, retraced)
    finally:
        tf_logger.removeHandler(handler)
