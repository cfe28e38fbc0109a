"""Multi-tower (multi-device) helpers of ``TorchPolicy``.

The policy keeps one model copy ("tower") per device. Batch splitting and
the loaded-buffer bookkeeping are framework-neutral and live in
``rlpolicy._core.tower_buffers``. A multi-tower training step
(``run_tower_step``):

1. ``sync_tower_weights``: copies tower 0's weights into the other towers.
2. ``TowerRunner.run``: computes each tower's raw gradients
   (``compute_tower_grads``: backward only) in parallel threads.
3. ``mean_reduce_grads``: averages the per-tower gradients on the main
   device and installs them as tower 0's ``.grad``.
4. The gradient post-processing (the policy's ``extra_grad_process``, e.g.
   clipping) runs once per optimizer on the averaged gradients, so a step
   on N towers equals a step on one device even with ``grad_clip``.

With ``config["_deterministic_towers"]`` the step is ``run_exact_tower_step``
instead: every tower computes one gradient per fixed chunk it holds, and the
chunk gradients are summed in chunk order, each weighted by its sample share
(``weighted_sum_grads``), so the result does not depend on the tower count.

torch is imported lazily, inside the functions, so importing this module
never needs torch.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

GradProcess = Callable[[Any, Any], Dict[str, Any]]


class TowerGrads(NamedTuple):
    """One tower's (or the reduced) gradient computation.

    Attributes:
        grads: One entry per model parameter: the ``.grad`` tensor, or None.
        info: Merged info dicts (``allreduce_latency`` and whatever the
            gradient post-processing returned).
        losses: The loss tensors, one per optimizer.
    """

    grads: List[Any]
    info: Dict[str, Any]
    losses: List[Any]


def make_towers(
    model: Any, devices: Sequence[Any], on_gpu: bool, target_model: Any = None
) -> Tuple[List[Any], Optional[Dict[Any, Any]]]:
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
    targets = (
        None
        if target_model is None
        else {t: copy.deepcopy(target_model).to(d) for t, d in zip(towers, devices)}
    )
    return towers, targets


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
    grad_process: Optional[GradProcess] = None,
    params: Optional[List[Any]] = None,
) -> TowerGrads:
    """Computes one tower's loss(es) and gradients.

    For each optimizer (in order): resets the gradients of the parameters it
    owns, back-propagates its loss term and, if given, lets ``grad_process``
    (the policy's ``extra_grad_process``, e.g. gradient clipping)
    post-process. Without ``grad_process`` only the raw gradients are
    computed and the optimizers are only counted, never touched, so this is
    safe to run for several towers at once.

    Args:
        loss_fn: ``(model, batch) -> list of loss tensors`` (one per optimizer).
        model: The tower's model.
        batch: The tower's (device-resident) train batch.
        optimizers: The policy's optimizers.
        param_groups: Per optimizer, the indices (into
            ``list(model.parameters())``) of the parameters it updates.
        grad_process: ``(optimizer, loss) -> info dict``, or None.
        params: ``list(model.parameters())`` if the caller has it already.

    Returns:
        ``TowerGrads``: one entry per model parameter (references to the
        ``.grad`` tensors, or None), the merged info dict and the losses.
    """
    import torch

    losses = loss_fn(model, batch)
    if len(losses) != len(optimizers):
        raise ValueError(
            f"the loss returned {len(losses)} loss terms for {len(optimizers)} optimizers; "
            "return one loss per optimizer"
        )
    grad_info: Dict[str, Any] = {"allreduce_latency": 0.0}
    if params is None:
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
        if grad_process is not None:
            grad_info.update(grad_process(opt, losses[opt_idx]))
        for idx in owned:
            all_grads[idx] = params[idx].grad
    return TowerGrads(all_grads, grad_info, list(losses))


def run_tower_step(
    runner: "TowerRunner",
    loss_fn: Callable[[Any, Any], List[Any]],
    towers: Sequence[Any],
    device_batches: Sequence[Any],
    optimizers: Sequence[Any],
    param_groups: Sequence[Set[int]],
    grad_process: GradProcess,
    device: Any,
) -> TowerGrads:
    """One multi-tower gradient computation; leaves the mean grads in tower 0.

    Syncs the towers to tower 0, computes every tower's raw gradients in
    parallel, averages them on tower 0's device and installs the average as
    tower 0's ``.grad``. Then ``grad_process(optimizer, loss)`` runs once per
    optimizer on tower 0 (which the optimizers hold), with ``loss`` the mean
    (detached, on ``device``) of that optimizer's per-tower losses.
    With a mean loss over equally sized slices this equals a single-device
    step on the whole batch, gradient clipping included. No optimizer steps.

    Args:
        runner: Runs one callable per tower.
        loss_fn: ``(model, batch) -> list of loss tensors`` (one per optimizer).
        towers: The tower models; tower 0 is the main model.
        device_batches: One (device-resident) batch per tower.
        optimizers: The policy's optimizers (over tower 0's parameters).
        param_groups: Per optimizer, the parameter indices it updates.
        grad_process: ``(optimizer, loss) -> info dict``.
        device: Tower 0's device (where the averaging happens).

    Returns:
        ``TowerGrads`` of the averaged (and post-processed) gradients, the
        merged info and the mean loss per optimizer.
    """
    import torch

    main = towers[0]
    for tower in towers:
        if not tower.training:
            tower.train()
    sync_tower_weights(main, towers)
    outs = runner.run(
        lambda model, batch: compute_tower_grads(loss_fn, model, batch, optimizers, param_groups),
        list(zip(towers, device_batches)),
    )
    grads = mean_reduce_grads([o.grads for o in outs], device)
    params = list(main.parameters())
    for p, g in zip(params, grads):
        p.grad = g
    with torch.no_grad():
        losses = [
            torch.stack([o.losses[k].detach().to(device) for o in outs]).mean()
            for k in range(len(optimizers))
        ]
    info: Dict[str, Any] = {"allreduce_latency": 0.0}
    for opt, loss in zip(optimizers, losses):
        info.update(grad_process(opt, loss))
    # Post-processing may replace (not just scale) a .grad: read them back.
    grads = [None if g is None else p.grad for p, g in zip(params, grads)]
    return TowerGrads(grads, info, losses)


def weighted_sum_grads(chunk_grads: Sequence[Tuple[Sequence[Any], float]], device: Any) -> List[Any]:
    """``sum_c weight_c * grads_c`` per parameter, added in the order given, on ``device``.

    The order of the additions is that of ``chunk_grads`` alone, so the same
    chunk gradients always give the same bits. A parameter that has no
    gradient in any chunk stays None; a chunk without one adds nothing.

    Args:
        chunk_grads: ``(grads, weight)`` per chunk; ``grads`` has one entry
            (tensor or None) per model parameter.
        device: Where the sums are made (tower 0's device).
    """
    import torch

    if not chunk_grads:
        return []
    device = torch.device(device)
    out: List[Any] = []
    with torch.no_grad():
        for i in range(len(chunk_grads[0][0])):
            acc = None
            for grads, weight in chunk_grads:
                g = grads[i]
                if g is None:
                    continue
                g = g.to(device)
                if acc is None:
                    acc = g * weight
                else:
                    acc.add_(g, alpha=weight)
            out.append(acc)
    return out


def run_exact_tower_step(
    runner: "TowerRunner",
    loss_fn: Callable[[Any, Any], List[Any]],
    towers: Sequence[Any],
    device_chunks: Sequence[Sequence[Any]],
    optimizers: Sequence[Any],
    param_groups: Sequence[Set[int]],
    grad_process: GradProcess,
    device: Any,
) -> TowerGrads:
    """One deterministic multi-tower gradient computation; leaves the grads in tower 0.

    Syncs the towers to tower 0; tower ``i`` computes the raw gradients of
    each chunk in ``device_chunks[i]`` (``rlpolicy._core.tower_buffers.ExactChunk``:
    its own forward and backward pass, so a chunk's gradient does not depend
    on the rows it shares a tower with); the towers run in parallel. The chunk
    gradients are then summed in chunk-index order, chunk ``c`` weighted by
    ``num_samples_c / total_samples`` (its share of the minibatch's samples), installed as
    tower 0's ``.grad``, and ``grad_process`` runs once per optimizer on them
    with the equally weighted loss sum. For a loss that is a mean over the
    chunk's samples this is the gradient of the mean over the whole
    minibatch, with the same bits on 1 tower as on K. No optimizer steps.

    Args:
        runner: Runs one callable per tower.
        loss_fn: ``(model, batch) -> list of loss tensors`` (one per optimizer).
        towers: The tower models; tower 0 is the main model.
        device_chunks: Per tower, its chunks (batches on that tower's device).
        optimizers: The policy's optimizers (over tower 0's parameters).
        param_groups: Per optimizer, the parameter indices it updates.
        grad_process: ``(optimizer, loss) -> info dict``.
        device: Tower 0's device (where the sums are made).

    Returns:
        ``TowerGrads`` of the reduced (and post-processed) gradients, the
        merged info and the weighted loss per optimizer.
    """
    import torch

    main = towers[0]
    used = list(towers[: len(device_chunks)])
    for tower in used:
        if not tower.training:
            tower.train()
    sync_tower_weights(main, used)

    def tower_work(model: Any, chunks: Sequence[Any]) -> List[Tuple[Any, TowerGrads]]:
        return [(c, compute_tower_grads(loss_fn, model, c.batch, optimizers, param_groups)) for c in chunks]

    outs = runner.run(tower_work, list(zip(used, device_chunks)))
    done = sorted((pair for out in outs for pair in out), key=lambda pair: pair[0].position)
    grads = weighted_sum_grads([(g.grads, c.weight) for c, g in done], device)
    params = list(main.parameters())
    for p, g in zip(params, grads):
        p.grad = g
    with torch.no_grad():
        losses = []
        for k in range(len(optimizers)):
            total = None
            for c, g in done:
                term = g.losses[k].detach().to(device) * c.weight
                total = term if total is None else total + term
            losses.append(total)
    info: Dict[str, Any] = {"allreduce_latency": 0.0}
    for opt, loss in zip(optimizers, losses):
        info.update(grad_process(opt, loss))
    grads = [None if g is None else p.grad for p, g in zip(params, grads)]
    return TowerGrads(grads, info, losses)


def gather_tower_stats(towers: Sequence[Any], stats_name: str, device: Any) -> List[Any]:
    """``tower.tower_stats[stats_name]`` of every tower that has it, moved to ``device``.

    Raises:
        AssertionError: If no tower has ``stats_name`` (as RLlib 1.11).
    """
    import torch
    import tree

    def to_device(s: Any) -> Any:
        if isinstance(s, torch.Tensor):
            return s.to(device)
        return tree.map_structure(lambda x: x.to(device), s)

    data = [to_device(t.tower_stats[stats_name]) for t in towers if stats_name in t.tower_stats]
    if not data:
        raise AssertionError(
            f"Stats `{stats_name}` not found in any of the towers (you have {len(towers)} "
            "towers in total)! Make sure you call the loss function on at least one of the "
            "towers."
        )
    return data


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
                    max_workers=len(self.devices) - 1, thread_name_prefix="rlpolicy-tower"
                )
            return self._pool

    def _call(self, idx: int, fn: Callable[..., Any], args: tuple, grad_enabled: Optional[bool]) -> Any:
        # grad_enabled None: the calling thread's own mode (kept, and restored after).
        import torch

        device = self.devices[idx]
        try:
            if grad_enabled is None:
                mode = torch.is_grad_enabled()
                try:
                    return self._on_device(device, fn, args)
                finally:
                    if torch.is_grad_enabled() != mode:
                        torch.set_grad_enabled(mode)
            with torch.set_grad_enabled(grad_enabled):
                return self._on_device(device, fn, args)
        except Exception as e:  # noqa: BLE001 - re-raised with the tower named
            raise ValueError(
                f"Error in tower {idx} on device {device} during the multi-tower gradient "
                f"calculation: {type(e).__name__}: {e}"
            ) from e

    @staticmethod
    def _on_device(device: Any, fn: Callable[..., Any], args: tuple) -> Any:
        import torch

        kind = getattr(device, "type", None)
        if kind == "cuda" or (kind is None and str(device).split(":")[0] == "cuda"):
            with torch.cuda.device(device):
                return fn(*args)
        return fn(*args)

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
        if n == 1:  # on this thread, in its own grad mode
            return [self._call(0, fn, per_tower_args[0], None)]
        grad_enabled = torch.is_grad_enabled()
        pool = self._get_pool()
        futures = [pool.submit(self._call, i, fn, per_tower_args[i], grad_enabled) for i in range(1, n)]
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
