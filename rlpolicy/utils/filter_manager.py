"""``FilterManager``: keeps the observation filters of a driver and its remote
workers in step (RLlib 1.11's ``ray.rllib.utils.filter_manager``)."""

from __future__ import annotations

from typing import Any, Dict, List

from rlpolicy.utils.annotations import DeveloperAPI


def _is_actor(worker: Any) -> bool:
    return hasattr(getattr(worker, "get_filters", None), "remote")


@DeveloperAPI
class FilterManager:
    """Merges the filter changes of remote workers into local filters and sends the result back.

    Remote workers are anything with ``get_filters(flush_after=...)`` and
    ``sync_filters(filters)``: Ray actor handles of ``RolloutWorker`` (called
    through Ray) or ``RolloutWorker`` objects in this process (called directly).
    """

    @staticmethod
    @DeveloperAPI
    def synchronize(local_filters: Dict[str, Any], remotes: List[Any], update_remote: bool = True) -> None:
        """Merges every remote worker's filter buffer into ``local_filters``, then
        (with ``update_remote``) gives every remote worker a copy of the merged filters.

        Each remote worker's buffer is emptied when it is read
        (``get_filters(flush_after=True)``), so no change is merged twice.

        Args:
            local_filters: Policy id -> Filter, changed in place (e.g. the local
                worker's ``filters``).
            remotes: Remote workers (actor handles or RolloutWorkers).
            update_remote: Push the merged filters to the remote workers.

        Raises:
            KeyError: If a remote worker lacks a filter of ``local_filters``
                (no local filter is changed then).
        """
        remote_filters = _gather(remotes)
        for i, filters in enumerate(remote_filters):
            missing = [k for k in local_filters if k not in filters]
            if missing:
                raise KeyError(
                    f"FilterManager.synchronize: remote worker {i} has no filter for "
                    f"policy id(s) {missing}; it has {sorted(filters)}"
                )
        for filters in remote_filters:
            for k in local_filters:
                local_filters[k].apply_changes(filters[k], with_buffer=False)
        if update_remote and remotes:
            copies = {k: f.as_serializable() for k, f in local_filters.items()}
            _broadcast(remotes, copies)


def _gather(remotes: List[Any]) -> List[Dict[str, Any]]:
    actors = [r for r in remotes if _is_actor(r)]
    fetched: List[Any] = []
    if actors:
        import ray

        fetched = ray.get([r.get_filters.remote(flush_after=True) for r in actors])
    by_actor = iter(fetched)
    return [next(by_actor) if _is_actor(r) else r.get_filters(flush_after=True) for r in remotes]


def _broadcast(remotes: List[Any], copies: Dict[str, Any]) -> None:
    actors = [r for r in remotes if _is_actor(r)]
    if actors:
        import ray

        ref = ray.put(copies)
        # Waited for, so the next sample() of every worker filters with the merged state.
        ray.get([r.sync_filters.remote(ref) for r in actors])
    for r in remotes:
        if not _is_actor(r):
            r.sync_filters({k: f.copy() for k, f in copies.items()})


__all__ = ["FilterManager"]
