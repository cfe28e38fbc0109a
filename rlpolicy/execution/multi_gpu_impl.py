"""Multi-device SGD for TF graph-mode policies (RLlib 1.11's ``ray.rllib.execution.multi_gpu_impl``).

``TFMultiGPUTowerStack`` lives beside the graph policy that builds it
(``rlpolicy/policy/_tf/tower_stack.py``); this is its public path.
"""

from rlpolicy.policy._tf.tower_stack import TOWER_SCOPE_NAME, TFMultiGPUTowerStack, Tower

__all__ = ["TFMultiGPUTowerStack", "TOWER_SCOPE_NAME", "Tower"]
