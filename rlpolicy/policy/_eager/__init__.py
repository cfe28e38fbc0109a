"""Helpers of ``EagerTFPolicy`` (``rlpolicy.policy.eager_tf_policy``), not in RLlib.

Each takes data (tensors, batches, models, variables, optimizers), never the
policy: ``learning`` (gradients),
``tracing`` (tensor conversion and counted ``tf.function``s), ``variables``
(weight keys and checks, optimizer state), ``export`` (SavedModel, ONNX,
``tf.train.Checkpoint``) and ``mode`` (eager methods in a graph-mode process).
"""
