"""PyTorch helpers of ``TorchPolicy`` (``rlpolicy.policy.torch_policy``).

Each module here takes data (tensors, models, optimizers, batches, devices),
never the policy:

* ``convert``: fast torch <-> numpy conversions.
* ``towers``: one model copy per device; per-tower gradients and their mean.
* ``optimizers``: the default Adam, per-optimizer parameter groups, and
  optimizer state snapshots and restores.
* ``export``: TorchScript and ONNX export of a torch ``ModelV2``.

Importing the package never needs torch; the modules look torch up through
``try_import_torch``.
"""
