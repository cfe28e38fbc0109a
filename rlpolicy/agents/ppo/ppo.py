"""PPO's default config (RLlib 1.11 values) and ``setup_config``, the
``before_init`` hook both PPO policies run (1.11 defines it in
``ppo_tf_policy``, which re-exports it here)."""

import logging
from typing import Any

from rlpolicy._core.defaults import COMMON_CONFIG
from rlpolicy.utils import merge_dicts
from rlpolicy.utils.deprecation import DEPRECATED_VALUE, deprecation_warning

logger = logging.getLogger(__name__)

DEFAULT_CONFIG: dict = merge_dicts(
    COMMON_CONFIG,
    {
        "use_critic": True,
        "use_gae": True,
        "lambda": 1.0,
        "kl_coeff": 0.2,
        "rollout_fragment_length": 200,
        "train_batch_size": 4000,
        "sgd_minibatch_size": 128,
        "shuffle_sequences": True,
        "num_sgd_iter": 30,
        "lr": 5e-5,
        "lr_schedule": None,
        "vf_loss_coeff": 1.0,
        "model": {"vf_share_layers": False},
        # Deprecated: set config["model"]["vf_share_layers"] (setup_config copies it there).
        "vf_share_layers": DEPRECATED_VALUE,
        "entropy_coeff": 0.0,
        "entropy_coeff_schedule": None,
        "clip_param": 0.3,
        "vf_clip_param": 10.0,
        "grad_clip": None,
        "kl_target": 0.01,
        "batch_mode": "truncate_episodes",
        "observation_filter": "NoFilter",
    },
)


def setup_config(policy: Any, obs_space: Any, action_space: Any, config: dict) -> None:
    """Before a PPO policy is built (RLlib 1.11): a top-level ``vf_share_layers``
    (deprecated) warns and is copied into ``config["model"]``; with shared
    layers, a log line reminds to tune ``vf_loss_coeff``.

    Args:
        policy: The policy being built (unused).
        obs_space: Its observation space (unused).
        action_space: Its action space (unused).
        config: The policy's config; changed in place.
    """
    if config.get("vf_share_layers", DEPRECATED_VALUE) != DEPRECATED_VALUE:
        deprecation_warning(old="config[vf_share_layers]", new="config[model][vf_share_layers]", error=False)
        config.setdefault("model", {})["vf_share_layers"] = config["vf_share_layers"]
    if (config.get("model") or {}).get("vf_share_layers") is True:
        logger.info(
            "`vf_share_layers=True` in your model. Therefore, remember to tune the value of `vf_loss_coeff`!"
        )
