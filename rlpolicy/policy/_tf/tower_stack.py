"""Multi-device SGD for TF graph-mode policies (public at RLlib 1.11's
``ray.rllib.execution.multi_gpu_impl``).

``TFMultiGPUTowerStack`` builds one copy of the policy's loss per device
(``policy.copy()`` on that device's own input placeholders, sharing the
model's variables), averages the towers' gradients, clips the *average* by
global norm with ``config["grad_clip"]`` and applies it with the policy's
optimizer(s). For a loss that is a mean over rows, one step on N equally
sized device slices therefore equals one single-device step on all rows,
with or without clipping.

Data handling is framework-neutral and lives in the policy
(``_core.tower_buffers``): the loaded batch is cut into one slice per device
there, and each ``optimize`` call feeds every tower its minibatch. The stack
reads the policy's loss graph under RLlib 1.11's attribute names (optimizers,
loss inputs; each tower copy's gradients), as RLlib's stack does.

With ``config["_deterministic_towers"]`` the stack is built for one device
too and ``optimize_exact`` replaces ``optimize``: each tower fetches the raw
gradient of every fixed chunk it holds (one run per chunk slot, all towers
in that run), the chunk gradients are summed on the host in chunk order,
weighted by their sample shares, then clipped and applied by one apply op
fed with the sums. The result does not depend on the number of devices.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import tree

from rlpolicy._core.tower_buffers import EXACT_KEY, device_minibatch_size, exact_chunk_count
from rlpolicy.policy._tf.grads import average_tower_grads, clip_by_global_norm
from rlpolicy.policy._tf.graph import build_after
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.tf_run_builder import TFRunBuilder

tf1, tf, tfv = try_import_tf()
logger = logging.getLogger(__name__)

# Name scope prefix of the per-device graph copies.
TOWER_SCOPE_NAME = "tower"


class Tower(NamedTuple):
    """One device's graph copy: its input placeholders and its policy copy."""

    device: str
    inputs: Dict[str, Any]
    loss_graph: Any


class TFMultiGPUTowerStack:
    """Per-device loss copies of a TF policy, trained with averaged gradients."""

    def __init__(
        self,
        optimizer: Any = None,
        devices: Optional[List[str]] = None,
        input_placeholders: Optional[List[Any]] = None,
        rnn_inputs: Optional[List[Any]] = None,
        max_per_device_batch_size: Optional[int] = None,
        build_graph: Any = None,
        grad_norm_clipping: Optional[float] = None,
        policy: Any = None,
    ):
        """Builds the towers for ``policy`` (call inside the policy's graph).

        Args:
            optimizer: Deprecated RLlib form (not supported): pass ``policy``.
            devices: Deprecated RLlib form (not supported).
            input_placeholders: Deprecated RLlib form (not supported).
            rnn_inputs: Deprecated RLlib form (not supported).
            max_per_device_batch_size: Rows per device and step; default
                ``(sgd_minibatch_size or train_batch_size) // num_devices``.
            build_graph: Deprecated RLlib form (not supported).
            grad_norm_clipping: Global-norm clip of the averaged gradient;
                default ``policy.config["grad_clip"]``.
            policy: The TFPolicy (with an initialized loss and ``copy()``).

        Raises:
            ValueError: Without ``policy`` (the old argument form is not
                supported), or if the policy's loss is not initialized.
        """
        if policy is None:
            raise ValueError(
                "TFMultiGPUTowerStack: pass policy=<TFPolicy>; the older form "
                "(optimizer, devices, input_placeholders, ...) is not supported"
            )
        if not policy.loss_initialized():
            raise ValueError("TFMultiGPUTowerStack: the policy's loss must be initialized first")
        self.policy = policy
        self.devices = list(policy.devices)
        self.optimizers = list(policy._optimizers)
        self.max_per_device_batch_size = max_per_device_batch_size or device_minibatch_size(
            policy.config, len(self.devices)
        )
        self.grad_norm_clipping = (
            grad_norm_clipping if grad_norm_clipping is not None else policy.config.get("grad_clip")
        )
        tower_inputs = policy._tower_inputs()
        self._input_names = [name for name, _ in tower_inputs]
        self.loss_inputs = [template for _, template in tower_inputs]
        self.exact = bool(exact_chunk_count(policy.config, len(self.devices)))
        with policy.graph.as_default():
            shared_ops = set(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS))
            self._towers = [self._setup_device(i, d) for i, d in enumerate(self.devices)]
            self._train_op = self._build_train_op(shared_ops)
            if self.exact:
                self._build_exact_apply()

    def _setup_device(self, tower_i: int, device: str) -> Tower:
        """Input placeholders shaped like the policy's, and a policy copy reading them."""
        with tf.device(device), tf1.name_scope(f"{TOWER_SCOPE_NAME}_{tower_i}"):
            inputs = {}
            for name, template in zip(self._input_names, self.loss_inputs):
                inputs[name] = tree.map_structure(
                    lambda t, n=name: tf1.placeholder(t.dtype, t.shape, name=n), template
                )
            loss_graph = self.policy.copy(list(inputs.items()))
        return Tower(device, inputs, loss_graph)

    def _build_train_op(self, shared_ops: set) -> Any:
        """Averages the towers' gradients, clips the average and applies it once."""
        multi = self.policy.config["_tf_policy_handles_more_than_one_loss"]
        clip = self.grad_norm_clipping
        tower_grads = [t.loss_graph._grads_and_vars for t in self._towers]
        avg: Any
        if multi:
            avg = [
                clip_by_global_norm(average_tower_grads([g[i] for g in tower_grads]), clip)
                for i in range(len(self.optimizers))
            ]
        else:
            avg = clip_by_global_norm(average_tower_grads(tower_grads), clip)
        self._update_ops = [op for op in tf1.get_collection(tf1.GraphKeys.UPDATE_OPS) if op not in shared_ops]
        if self._update_ops:
            logger.debug("Tower update ops run with each step: %s", self._update_ops)
        return build_after(
            self._update_ops,
            lambda: self.policy.build_apply_op(
                optimizer=self.optimizers if multi else self.optimizers[0], grads_and_vars=avg
            ),
        )

    def _build_exact_apply(self) -> None:
        """The deterministic mode's apply op: placeholders for the reduced gradients
        (one per gradient of tower 0), clipped by global norm and applied once.

        Raises:
            ValueError: If the towers have update ops (e.g. batch norm), which the
                fed apply op cannot run, or their gradients are not over the same
                variables in the same order.
        """
        if self._update_ops:
            raise ValueError(
                f"config['{EXACT_KEY}'] does not support models with update ops "
                f"(e.g. batch norm): {[op.name for op in self._update_ops]}"
            )
        multi = self.policy.config["_tf_policy_handles_more_than_one_loss"]
        groups = [t.loss_graph._grads_and_vars for t in self._towers]
        if not multi:
            groups = [[g] for g in groups]
        first = [[v for _, v in grp] for grp in groups[0]]
        for i, tower_groups in enumerate(groups[1:], start=1):
            if [[v for _, v in grp] for grp in tower_groups] != first:
                raise ValueError(
                    f"config['{EXACT_KEY}']: tower {i}'s gradients are not over "
                    "tower 0's variables in the same order"
                )
        self._exact_grads = [[g for grp in tower_groups for g, _ in grp] for tower_groups in groups]
        with tf1.name_scope("exact_reduced_grads"):
            self._exact_inputs = [
                [tf1.placeholder(tf.convert_to_tensor(g).dtype, v.shape) for g, v in grp] for grp in groups[0]
            ]
        clipped = [
            clip_by_global_norm(list(zip(ph, vs)), self.grad_norm_clipping)
            for ph, vs in zip(self._exact_inputs, first)
        ]
        self._exact_apply_op = self.policy.build_apply_op(
            optimizer=self.optimizers if multi else self.optimizers[0],
            grads_and_vars=clipped if multi else clipped[0],
        )

    def optimize_exact(self, sess: Any, device_chunks: Sequence[Sequence[Any]]) -> Dict[str, Any]:
        """One deterministic SGD step: tower ``i`` computes the gradient of each chunk
        in ``device_chunks[i]`` (``rlpolicy._core.tower_buffers.ExactChunk``); the
        sums ``sum_c num_samples_c / total_samples * grad_c``, added in chunk-index order in
        float32, are clipped and applied once.

        Returns:
            ``{"tower_<i>": fetches of tower i's first chunk}``.

        Raises:
            ValueError: If the stack is not in the deterministic mode, or not
                one equally long chunk list per device is given.
        """
        if not self.exact:
            raise ValueError(f"optimize_exact needs config['{EXACT_KEY}'] set when the stack is built")
        if len(device_chunks) != len(self._towers) or len({len(c) for c in device_chunks}) != 1:
            raise ValueError(
                f"optimize_exact got chunk lists of lengths "
                f"{[len(c) for c in device_chunks]} for {len(self._towers)} "
                "towers; pass the same number of chunks for every device"
            )
        done = []
        fetches: Dict[str, Any] = {}
        for j in range(len(device_chunks[0])):
            builder = TFRunBuilder(sess, "learn_on_loaded_batch")
            run: List[Any] = []
            for i, (tower, chunks) in enumerate(zip(self._towers, device_chunks)):
                graph = tower.loss_graph
                builder.add_feed_dict(graph.extra_compute_grad_feed_dict())
                builder.add_feed_dict(graph._get_loss_inputs_dict(chunks[j].batch, shuffle=False))
                run.append([self._exact_grads[i], graph._get_grad_and_stats_fetches()])
            out = builder.get(builder.add_fetches([run])[0])
            for i, (grads, stats) in enumerate(out):
                done.append((device_chunks[i][j], grads))
                fetches.setdefault(f"tower_{i}", stats)
        done.sort(key=lambda pair: pair[0].position)
        sums = []
        for k in range(len(done[0][1])):
            acc = np.asarray(done[0][1][k]) * np.float32(done[0][0].weight)
            for chunk, grads in done[1:]:
                acc += np.asarray(grads[k]) * np.float32(chunk.weight)
            sums.append(acc)
        flat_inputs = [ph for grp in self._exact_inputs for ph in grp]
        sess.run(
            self._exact_apply_op,
            feed_dict={**self.policy.extra_compute_grad_feed_dict(), **dict(zip(flat_inputs, sums))},
        )
        return fetches

    def optimize(self, sess: Any, device_batches: Sequence[Any]) -> Dict[str, Any]:
        """Runs one SGD step: tower ``i`` trains on ``device_batches[i]``.

        Args:
            sess: The policy's session.
            device_batches: One (numpy) SampleBatch per device.

        Returns:
            ``{"tower_<i>": fetches of tower i}`` (each with its learner stats).

        Raises:
            ValueError: If not exactly one batch per device is given.
        """
        if len(device_batches) != len(self._towers):
            raise ValueError(
                f"optimize got {len(device_batches)} batches for "
                f"{len(self._towers)} towers; pass one batch per device"
            )
        builder = TFRunBuilder(sess, "learn_on_loaded_batch")
        fetches: Dict[str, Any] = {}
        for i, (tower, batch) in enumerate(zip(self._towers, device_batches)):
            graph = tower.loss_graph
            builder.add_feed_dict(graph.extra_compute_grad_feed_dict())
            builder.add_feed_dict(graph._get_loss_inputs_dict(batch, shuffle=False))
            fetches[f"tower_{i}"] = graph._get_grad_and_stats_fetches()
        idx = builder.add_fetches([self._train_op, fetches])
        return builder.get(idx[1])

    def get_device_losses(self) -> List[Any]:
        """The per-device policy copies (their ``_losses``, ``_grads``, stats)."""
        return [t.loss_graph for t in self._towers]


# Its public home (RLlib's path), which re-exports it.
TFMultiGPUTowerStack.__module__ = "rlpolicy.execution.multi_gpu_impl"
