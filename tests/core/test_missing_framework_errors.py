"""Building a policy or model for a framework that is not installed says so, and names the
``pip install rlpolicy[...]`` extra (instead of an AttributeError on a ``None`` module).

Each case runs in a fresh interpreter whose import system refuses the blocked packages, as
on a machine where they are not installed.
"""

import subprocess
import sys
import textwrap

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = {blocked!r}
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"No module named {{name!r}} (blocked by test)")
            return None
    sys.meta_path.insert(0, _Block())
    import gymnasium as gym
    OBS, ACT = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)

    def error_of(fn, *args, **kwargs):
        try:
            fn(*args, **kwargs)
        except ImportError as e:
            return str(e)
        raise SystemExit(f"{{fn}} did not raise ImportError")
    """
)


def _run(blocked, body):
    code = BLOCKER.format(blocked=sorted(blocked)) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_torch_policies_and_models_without_torch():
    lines = _run(
        {"torch"},
        """
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
        from rlpolicy.models.catalog import MODEL_DEFAULTS, ModelCatalog
        from rlpolicy.policy.policy_template import build_policy_class
        from rlpolicy.policy.torch_policy import TorchPolicy
        MyPolicy = build_policy_class("MyPolicy", "torch", loss_fn=lambda *a: None)
        print(error_of(PPOTorchPolicy, OBS, ACT, {}))
        print(error_of(MyPolicy, OBS, ACT, {}))
        print(error_of(TorchPolicy, OBS, ACT, {}))
        print(error_of(ModelCatalog.get_model_v2, OBS, ACT, 2, MODEL_DEFAULTS, framework="torch"))
        print(error_of(ModelCatalog.get_action_dist, ACT, MODEL_DEFAULTS, framework="torch"))
    """,
    )
    assert lines[0] == (
        "PPOTorchPolicy needs PyTorch (framework='torch'), but torch is not installed; "
        "install it with `pip install rlpolicy[torch]`"
    )
    assert lines[1].startswith("MyPolicy needs PyTorch (framework='torch')")
    assert lines[2].startswith("TorchPolicy needs PyTorch (framework='torch')")
    assert len(lines) == 5
    for line in lines[2:]:
        assert "needs PyTorch" in line and "`pip install rlpolicy[torch]`" in line, line


def test_tf_models_without_tensorflow():
    lines = _run(
        {"tensorflow", "tf_keras", "keras"},
        """
        from rlpolicy.models.catalog import MODEL_DEFAULTS, ModelCatalog
        for fw in ("tf", "tf2"):
            print(error_of(ModelCatalog.get_model_v2, OBS, ACT, 2, MODEL_DEFAULTS, framework=fw))
        print(error_of(ModelCatalog.get_action_dist, ACT, MODEL_DEFAULTS, framework="tf"))
    """,
    )
    assert lines[0] == (
        "ModelCatalog needs TensorFlow (framework='tf'), but tensorflow is not "
        "installed; install it with `pip install rlpolicy[tf]`"
    )
    assert lines[1].startswith("ModelCatalog needs TensorFlow (framework='tf2')")
    assert "`pip install rlpolicy[tf]`" in lines[2]


def test_tf_policies_without_tensorflow():
    lines = _run(
        {"tensorflow", "tf_keras", "keras"},
        """
        from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy
        from rlpolicy.policy.tf_policy_template import build_tf_policy
        MyTF = build_tf_policy("MyTF", loss_fn=lambda *a: None)
        print(error_of(PPOTFPolicy, OBS, ACT, {}))
        print(error_of(MyTF, OBS, ACT, {}))
        print(error_of(MyTF.as_eager(), OBS, ACT, {"framework": "tf2"}))
    """,
    )
    assert lines[0].startswith("PPOTFPolicy needs TensorFlow (framework='tf')")
    assert lines[1].startswith("MyTF needs TensorFlow")
    assert len(lines) == 3
    for line in lines:
        assert "`pip install rlpolicy[tf]`" in line, line
