"""The numpy reference of a policy whose model is one linear layer [3] -> [2]."""

import numpy as np


def linear_head(policy):
    """(kernel [3, 2], bias [2]) of the policy's one linear layer, from its keyed weights
    (any framework: a torch Linear stores its kernel as [out, in])."""
    kernel = bias = None
    weights = policy.get_state()["weights"]  # (eager TF: RLlib 1.11's list)
    for value in weights.values() if isinstance(weights, dict) else weights:
        value = np.asarray(value)
        if value.shape == (3, 2):
            kernel = value
        elif value.shape == (2, 3):  # torch Linear stores [out, in]
            kernel = value.T
        elif value.shape == (2,):
            bias = value
    assert kernel is not None and bias is not None
    return kernel, bias
