"""`import rlpolicy` works without torch and tensorflow; with one of them, that one works.

Each case runs in a fresh interpreter whose import system refuses the blocked frameworks,
as on a machine where they are not installed.
"""

import subprocess
import sys
import textwrap

import pytest

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
    """
)

FRAMEWORK_FREE_MODULES = [
    "rlpolicy",
    "rlpolicy.utils",
    "rlpolicy.utils.framework",
    "rlpolicy.utils.numpy",
    "rlpolicy.utils.schedules",
    "rlpolicy.utils.spaces.space_utils",
    "rlpolicy.utils.exploration",
    "rlpolicy.policy.sample_batch",
    "rlpolicy.policy.view_requirement",
    "rlpolicy.policy.rnn_sequencing",
    "rlpolicy.policy.policy",
    "rlpolicy.policy.policy_template",
    "rlpolicy.models.catalog",
    "rlpolicy.models.modelv2",
    "rlpolicy.models.preprocessors",
    "rlpolicy.evaluation.postprocessing",
    "rlpolicy.agents.callbacks",
    "rlpolicy.agents.trainer",
]


def _run(blocked, body):
    code = BLOCKER.format(blocked=sorted(blocked)) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_without_torch_and_tf():
    out = _run(
        {"torch", "tensorflow", "tf_keras", "keras"},
        f"""
        import importlib, sys
        for m in {FRAMEWORK_FREE_MODULES!r}:
            importlib.import_module(m)
        from rlpolicy.utils.framework import try_import_torch, try_import_tf
        torch, nn = try_import_torch()
        tf1, tf, v = try_import_tf()
        assert torch is None and tf1 is None and tf is None and v is None
        assert "torch" not in sys.modules and "tensorflow" not in sys.modules
        import numpy as np
        from rlpolicy.policy.sample_batch import SampleBatch
        b = SampleBatch(obs=np.zeros((3, 2)), rewards=np.ones(3))
        assert len(b) == 3
        try:
            try_import_torch(error=True)
        except ImportError as e:
            assert "torch" in str(e).lower()
        else:
            raise SystemExit("expected ImportError")
        print("ok")
        """,
    )
    assert "ok" in out


def test_torch_only_environment():
    pytest.importorskip("torch")
    out = _run(
        {"tensorflow", "tf_keras", "keras"},
        """
        import sys
        import gymnasium as gym
        import numpy as np
        from rlpolicy.models.catalog import ModelCatalog, MODEL_DEFAULTS
        obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
        dist_cls, n = ModelCatalog.get_action_dist(act, MODEL_DEFAULTS, framework="torch")
        model = ModelCatalog.get_model_v2(obs, act, n, MODEL_DEFAULTS, framework="torch")
        import torch
        out, _ = model({"obs": torch.zeros(5, 4)})
        assert tuple(out.shape) == (5, 2)
        assert "tensorflow" not in sys.modules
        print("ok")
        """,
    )
    assert "ok" in out


def test_tf_only_environment():
    pytest.importorskip("tensorflow")
    out = _run(
        {"torch"},
        """
        import sys
        import gymnasium as gym
        import numpy as np
        from rlpolicy.models.catalog import ModelCatalog, MODEL_DEFAULTS
        obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
        dist_cls, n = ModelCatalog.get_action_dist(act, MODEL_DEFAULTS, framework="tf2")
        model = ModelCatalog.get_model_v2(obs, act, n, MODEL_DEFAULTS, framework="tf2")
        out, _ = model({"obs": np.zeros((5, 4), np.float32)})
        assert tuple(out.shape) == (5, 2)
        assert "torch" not in sys.modules
        print("ok")
        """,
    )
    assert "ok" in out


def test_torch_policy_never_imports_tensorflow_even_when_installed():
    """With TF installed, a torch-only process (build, act, learn a PPO torch policy)
    must not pay TF's import: nothing on the torch path may import it at module level."""
    pytest.importorskip("torch")
    out = _run(
        set(),
        """
        import sys
        import gymnasium as gym
        import numpy as np
        from rlpolicy.agents.ppo import DEFAULT_CONFIG
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
        from rlpolicy.evaluation.postprocessing import compute_gae_for_sample_batch
        from rlpolicy.policy.sample_batch import SampleBatch
        config = dict(DEFAULT_CONFIG, framework="torch", num_workers=0, train_batch_size=8,
                      sgd_minibatch_size=8, num_sgd_iter=1)
        policy = PPOTorchPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), config)
        obs = np.zeros((8, 4), np.float32)
        actions, _, extra = policy.compute_actions(obs)
        batch = SampleBatch(obs=obs, new_obs=obs, actions=actions, rewards=np.ones(8, np.float32),
                            dones=np.arange(8) == 7, **extra)
        policy.learn_on_batch(compute_gae_for_sample_batch(policy, batch))
        assert "tensorflow" not in sys.modules, "tensorflow was imported"
        print("ok")
        """,
    )
    assert "ok" in out
