"""PG's default config (RLlib 1.11 values)."""

from rlpolicy._core.defaults import COMMON_CONFIG
from rlpolicy.utils import merge_dicts

DEFAULT_CONFIG: dict = merge_dicts(
    COMMON_CONFIG,
    {
        "num_workers": 0,
        "lr": 0.0004,
        "lr_schedule": None,
        "rollout_fragment_length": 200,
        "train_batch_size": 200,
    },
)
