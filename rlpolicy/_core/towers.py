"""Multi-tower (multi-device) helpers for ``TorchPolicy``.

The policy keeps one model copy ("tower") per device. A training step:

1. ``slice_device_batches``: picks the minibatch slice of each device's
   pre-loaded batch.
2. ``sync_tower_weights``: copies tower 0's weights into the other towers.
3. ``TowerRunner.run``: computes each tower's gradients (``compute_tower_grads``)
   in parallel threads (inline for a single tower).
4. ``mean_reduce_grads``: averages the per-tower gradients on the main device
   and installs them as tower 0's ``.grad`` before the optimizer step.

torch is imported lazily, inside the functions, so importing this module
never needs torch.
"""
from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

TowerGrads = Tuple[List[Any], Dict[str, Any]]


def equal_split_length(total: int, num_devices: int) -> int:
    """Samples per device when ``total`` samples are split evenly (excess dropped)."""
    if num_devices < 1:
        raise ValueError(f"num_devices={num_devices} is invalid; need at least one device")
    return total // num_devices


def make_towers(model: Any, devices: Sequence[Any], on_gpu: bool,
                target_model: Any = None) -> Tuple[List[Any], Optional[Dict[Any, Any]]]:
    """Creates the model towers (and target models) for ``devices``, RLlib 1.11 style.

    CPU towers: tower 0 is ``model`` itself, the others deep copies; all towers
    share the one ``target_model``. GPU towers: every tower (tower 0 included)
    is a deep copy moved to its device, each with its own target-model copy.

    Returns:
        ``(towers, target_models)``; ``target_models`` maps tower -> target model,
        or is None without a ``target_model``.
    """
    if not on_gpu:
        towers = [model if i == 0 else copy.deepcopy(model) for i in range(len(devices))]
        targets = None if target_model is None else {t: target_model for t in towers}
        return towers, targets
    towers = [copy.deepcopy(model).to(d) for d in devices]
    targets = None if target_model is None else {
        t: copy.deepcopy(target_model).to(d) for t, d in zip(towers, devices)}
    return towers, targets


def split_for_devices(batch: Any, num_devices: int, pad: Callable[[Any], None],
                      devices: Sequence[Any]) -> List[Any]:
    """Cuts ``batch`` into one time-slice per device, pads and moves each slice.

    Without sequences, rows beyond an equal share per device are dropped, so
    every device gets ``len(batch) // num_devices`` rows. With sequences
    (``seq_lens``), the slices follow ``batch.timeslices`` and are zero-padded
    by ``pad`` (RLlib 1.11).
    """
    n = len(batch)
    if "seq_lens" not in batch and n % num_devices:
        batch = batch[:n - n % num_devices]
    slices = batch.timeslices(num_slices=num_devices)
    for s in slices:
        pad(s)
    return [s.to_device(d) for s, d in zip(slices, devices)]


def slice_device_batches(device_batches: Sequence[Any], offset: int,
                         device_batch_size: int) -> List[Any]:
    """Returns the minibatch each device trains on, RLlib 1.11 style.

    Each device's pre-loaded batch is sliced to ``[offset:offset + size]``;
    when ``device_batch_size`` covers all loaded samples, the loaded batches
    are used whole.
    """
    if device_batch_size >= sum(len(b) for b in device_batches):
        return list(device_batches)
    return [minibatch_slice(b, offset, device_batch_size) for b in device_batches]


def minibatch_slice(batch: Any, offset: int, size: int) -> Any:
    """``batch[offset:offset + size]``, truncated at the batch's end like a list slice
    (RLlib 1.11); an ``offset`` outside the loaded rows is a ValueError."""
    n = len(batch)
    if not 0 <= offset < n:
        raise ValueError(f"learn_on_loaded_batch: offset {offset} is outside the {n} samples "
                         "loaded per device")
    return batch[offset:min(offset + size, n)]


def sync_tower_weights(main_model: Any, towers: Sequence[Any]) -> None:
    """Copies ``main_model``'s parameters and buffers into every other tower.

    Towers are deep copies of the main model, so their parameters and
    buffers line up one to one; copying in place keeps the optimizer's and
    any other references to the tower tensors valid.
    """
    import torch

    if len(towers) < 2:
        return
    src = [*main_model.parameters(), *main_model.buffers()]
    with torch.no_grad():
        for tower in towers:
            if tower is main_model:
                continue
            dst = [*tower.parameters(), *tower.buffers()]
            if len(dst) != len(src):
                # Structure diverged (e.g. lazily created buffers): fall back.
                tower.load_state_dict(main_model.state_dict())
                continue
            for d, s in zip(dst, src):
                d.copy_(s)


def mean_reduce_grads(tower_grads: Sequence[Sequence[Any]], device: Any) -> List[Any]:
    """Averages per-tower gradient lists element-wise on ``device``.

    Entries that are None in tower 0 stay None (RLlib 1.11 behaviour). The
    result re-uses tower 0's gradient tensors (updated in place) when they
    already live on ``device``, so no extra memory is allocated.
    """
    import torch

    n = len(tower_grads)
    if n == 1:
        return list(tower_grads[0])
    out: List[Any] = []
    device = torch.device(device)
    with torch.no_grad():
        for i, g0 in enumerate(tower_grads[0]):
            if g0 is None:
                out.append(None)
                continue
            acc = g0 if g0.device == device else g0.to(device)
            for grads in tower_grads[1:]:
                g = grads[i]
                if g is not None:
                    acc.add_(g.to(device))
            acc.div_(n)
            out.append(acc)
    return out


def compute_tower_grads(
    loss_fn: Callable[[Any, Any], List[Any]],
    model: Any,
    batch: Any,
    optimizers: Sequence[Any],
    param_groups: Sequence[Set[int]],
    grad_process: Callable[[Any, Any], Dict[str, Any]],
) -> TowerGrads:
    """Computes one tower's loss(es) and gradients.

    For each optimizer (in order): resets the gradients of the parameters it
    owns, back-propagates its loss term and lets ``grad_process`` (the
    policy's ``extra_grad_process``, e.g. gradient clipping) post-process.

    Args:
        loss_fn: ``(model, batch) -> list of loss tensors`` (one per optimizer).
        model: The tower's model.
        batch: The tower's (device-resident) train batch.
        optimizers: The policy's optimizers.
        param_groups: Per optimizer, the indices (into
            ``list(model.parameters())``) of the parameters it updates.
        grad_process: ``(optimizer, loss) -> info dict``.

    Returns:
        ``(grads, grad_info)``: one entry per model parameter (references to
        the ``.grad`` tensors, or None) and the merged info dict.
    """
    import torch

    losses = loss_fn(model, batch)
    if len(losses) != len(optimizers):
        raise ValueError(
            f"the loss returned {len(losses)} loss terms for {len(optimizers)} optimizers; "
            "return one loss per optimizer")
    grad_info: Dict[str, Any] = {"allreduce_latency": 0.0}
    params = list(model.parameters())
    all_grads: List[Any] = [None] * len(params)
    last = len(optimizers) - 1
    for opt_idx, opt in enumerate(optimizers):
        owned = param_groups[opt_idx]
        # Clearing to None (not zeroing in place) lets backward() store fresh
        # gradients instead of adding them onto zeros; a parameter this loss
        # does not reach but that had a gradient gets zeros, as in-place zeroing
        # would have left it.
        had_grad = [idx for idx in owned if params[idx].grad is not None]
        for idx in had_grad:
            params[idx].grad = None
        # Later optimizers' losses may share the graph: keep it until the last.
        losses[opt_idx].backward(retain_graph=opt_idx < last)
        for idx in had_grad:
            if params[idx].grad is None:
                params[idx].grad = torch.zeros_like(params[idx])
        grad_info.update(grad_process(opt, losses[opt_idx]))
        for idx in owned:
            all_grads[idx] = params[idx].grad
    return all_grads, grad_info


class TowerOptimizerView:
    """An optimizer as seen from one (non-main) tower.

    The policy's optimizers hold tower 0's parameters. Gradient post-processing
    (e.g. clipping in ``extra_grad_process``) running for tower ``i`` must
    touch tower ``i``'s gradients, not tower 0's (which another thread may be
    writing at the same time). This view exposes the optimizer's
    ``param_groups`` with each parameter swapped for the tower's counterpart;
    every other attribute comes from the wrapped optimizer.
    """

    def __init__(self, optimizer: Any, main_params: Sequence[Any], tower_params: Sequence[Any]):
        self._optimizer = optimizer
        index = {p: i for i, p in enumerate(main_params)}
        self._group_indices = [[index.get(p) for p in g["params"]]
                               for g in optimizer.param_groups]
        self._tower_params = list(tower_params)

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """The optimizer's param groups, holding this tower's parameters."""
        groups = []
        for group, indices in zip(self._optimizer.param_groups, self._group_indices):
            params = [self._tower_params[i] for i in indices if i is not None]
            groups.append({**group, "params": params})
        return groups

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)


def make_optimizer_views(optimizers: Sequence[Any], main_model: Any,
                         towers: Sequence[Any]) -> Dict[int, List["TowerOptimizerView"]]:
    """Per tower index > 0, a ``TowerOptimizerView`` of each optimizer."""
    main = list(main_model.parameters())
    return {i: [TowerOptimizerView(o, main, list(t.parameters())) for o in optimizers]
            for i, t in enumerate(towers) if i > 0}


class TowerRunner:
    """Runs one callable per tower, in parallel threads when there are several.

    The thread pool is created once (lazily) and re-used for every step;
    tower 0 always runs on the calling thread. Torch's grad mode is
    thread-local, so the caller's mode is applied inside each worker thread.
    """

    def __init__(self, devices: Sequence[Any]):
        self.devices = list(devices)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    def _get_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=len(self.devices) - 1, thread_name_prefix="rlpolicy-tower")
            return self._pool

    def _call(self, idx: int, fn: Callable[..., Any], args: tuple, grad_enabled: bool) -> Any:
        import torch

        device = self.devices[idx]
        try:
            with torch.set_grad_enabled(grad_enabled):
                if getattr(device, "type", str(device).split(":")[0]) == "cuda":
                    with torch.cuda.device(device):
                        return fn(*args)
                return fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised with the tower named
            raise ValueError(
                f"Error in tower {idx} on device {device} during the multi-tower gradient "
                f"calculation: {type(e).__name__}: {e}") from e

    def run(self, fn: Callable[..., Any], per_tower_args: Sequence[tuple]) -> List[Any]:
        """Calls ``fn(*per_tower_args[i])`` for each tower ``i``; returns the results.

        Raises:
            ValueError: naming the tower and device, chained to the original
                error, if any tower fails (the lowest failing tower wins).
        """
        import torch

        n = len(per_tower_args)
        if n > len(self.devices):
            raise ValueError(f"got work for {n} towers but only {len(self.devices)} devices")
        grad_enabled = torch.is_grad_enabled()
        if n == 1:
            return [self._call(0, fn, per_tower_args[0], grad_enabled)]
        pool = self._get_pool()
        futures = [pool.submit(self._call, i, fn, per_tower_args[i], grad_enabled)
                   for i in range(1, n)]
        results: List[Any] = [None] * n
        first_error: Optional[BaseException] = None
        try:
            results[0] = self._call(0, fn, per_tower_args[0], grad_enabled)
        except ValueError as e:
            first_error = e
        for i, fut in enumerate(futures, start=1):
            try:
                results[i] = fut.result()
            except ValueError as e:
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return results

    def shutdown(self) -> None:
        """Stops the worker threads (a later ``run`` starts new ones)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
