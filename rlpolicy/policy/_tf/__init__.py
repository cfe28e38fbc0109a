"""Helpers of the TF graph-mode ``TFPolicy`` that take data (graphs, tensors, sessions,
variables, batches), never the policy: the tensor records with their feed builders
(``records``), graph building (``graph``), variables (``variables``), gradients
(``grads``), export (``export``, ``control_flow``)."""
