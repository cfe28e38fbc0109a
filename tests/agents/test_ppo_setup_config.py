"""``ppo_tf_policy.setup_config`` as RLlib 1.11 defines it (its ``ppo_torch_policy``,
MAML and MBMPO modules import it from there): a top-level ``vf_share_layers``
(deprecated) is copied into ``config["model"]`` with a deprecation warning.

Client code here is 1.x-style: it imports the function from ``ppo_tf_policy`` and
passes it as ``before_init`` of its own policy class, as MAML's torch policy does.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")

from rlpolicy.agents.ppo.ppo_tf_policy import setup_config  # noqa: E402
from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy, ppo_surrogate_loss  # noqa: E402
from rlpolicy.policy.policy_template import build_policy_class  # noqa: E402
from rlpolicy.utils.deprecation import DEPRECATED_VALUE  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def test_setup_config_moves_the_deprecated_key_into_the_model_config():
    config = {"vf_share_layers": True, "model": {"vf_share_layers": False}}
    with pytest.warns(DeprecationWarning, match=r"config\[vf_share_layers\]"):
        setup_config(None, OBS, ACT, config)
    assert config["model"]["vf_share_layers"] is True
    untouched = {"vf_share_layers": DEPRECATED_VALUE, "model": {"vf_share_layers": False}}
    setup_config(None, OBS, ACT, untouched)
    assert untouched["model"]["vf_share_layers"] is False


def _value_params(policy):
    return [n for n, _ in policy.model.named_parameters() if "value_branch_separate" in n]


def test_ppo_policies_run_it_before_building_the_model():
    base = {"framework": "torch", "model": {"fcnet_hiddens": [8]}}
    separate = PPOTorchPolicy(OBS, ACT, dict(base))
    assert _value_params(separate)  # the default: a separate value trunk
    with pytest.warns(DeprecationWarning):
        shared = PPOTorchPolicy(OBS, ACT, {**base, "vf_share_layers": True})
    assert shared.config["model"]["vf_share_layers"] is True and not _value_params(shared)


def test_a_1x_module_passes_it_as_before_init():
    # As MAML's torch policy: build_policy_class(..., before_init=setup_config).
    MAMLLike = build_policy_class(
        name="MAMLLike",
        framework="torch",
        loss_fn=ppo_surrogate_loss,
        get_default_config=lambda: PPOTorchPolicy._hooks.get_default_config(),
        postprocess_fn=PPOTorchPolicy._hooks.postprocess_fn,
        extra_action_out_fn=PPOTorchPolicy._hooks.extra_action_out_fn,
        before_init=setup_config,
        before_loss_init=PPOTorchPolicy._hooks.before_loss_init,
        mixins=PPOTorchPolicy._hooks.mixins,
    )
    with pytest.warns(DeprecationWarning):
        policy = MAMLLike(
            OBS, ACT, {"framework": "torch", "vf_share_layers": True, "model": {"fcnet_hiddens": [8]}}
        )
    assert not _value_params(policy)
