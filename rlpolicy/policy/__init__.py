"""Policy layer of rlpolicy (mirrors `ray.rllib.policy`)."""
