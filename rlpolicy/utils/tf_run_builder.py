"""``TFRunBuilder`` (RLlib 1.11's ``ray.rllib.utils.tf_run_builder``): collect feeds and
fetches from several places, then run the session once."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Dict, List, Optional, Union

import numpy as np

from rlpolicy._fast.tf_internals import make_session_callable, timeline_module
from rlpolicy.utils.framework import try_import_tf

tf1, tf, tfv = try_import_tf()

logger = logging.getLogger(__name__)


class TFRunBuilder:
    """Gathers a feed dict and fetches, and runs them in one ``session.run``.

    The run happens on the first ``get()``; after that no more feeds or
    fetches can be added. Runs go through a session callable cached per
    (fed tensors, fetch structure), which skips ``session.run``'s per-call
    Python work; odd feeds, a patched ``run`` or ``TF_TIMELINE_DIR`` use
    ``session.run`` itself.

    Example:
        >>> builder = TFRunBuilder(sess, "compute_actions")
        >>> builder.add_feed_dict({obs_ph: obs})
        >>> idx = builder.add_fetches([actions_op])
        >>> actions = builder.get(idx)[0]
    """

    def __init__(self, session: Any, debug_name: str):
        """Initializes a TFRunBuilder.

        Args:
            session: The ``tf1.Session`` to run.
            debug_name: A name for this run, used in error messages and timelines.
        """
        self.session = session
        self.debug_name = debug_name
        self.feed_dict: Dict[Any, Any] = {}
        self.fetches: List[Any] = []
        self._executed: Optional[list] = None

    def _check_open(self, what: str) -> None:
        if self._executed is not None:
            raise RuntimeError(
                f"TFRunBuilder({self.debug_name!r}): cannot {what} after the run was executed by get()"
            )

    def add_feed_dict(self, feed_dict: Dict[Any, Any]) -> None:
        """Adds placeholder -> value entries to the feed dict.

        Raises:
            ValueError: If a placeholder was already fed.
            RuntimeError: If the run already happened.
        """
        self._check_open("add feeds")
        for k in feed_dict:
            if k in self.feed_dict:
                raise ValueError(f"TFRunBuilder({self.debug_name!r}): key added twice: {k}")
        self.feed_dict.update(feed_dict)

    def add_fetches(self, fetches: List[Any]) -> List[int]:
        """Appends ops/tensors to fetch.

        Returns:
            Their indices, to pass to ``get()``.

        Raises:
            RuntimeError: If the run already happened.
        """
        self._check_open("add fetches")
        base = len(self.fetches)
        self.fetches.extend(fetches)
        return list(range(base, len(self.fetches)))

    def get(self, to_fetch: Union[int, List[int], tuple]) -> Any:
        """Runs the session (first call only) and returns the fetched value(s).

        Args:
            to_fetch: An index from ``add_fetches``, or a (nested) list/tuple of them.

        Returns:
            The value(s), in the same list/tuple nesting.

        Raises:
            ValueError: For an unsupported ``to_fetch`` type.
            Exception: The session's error, with ``debug_name`` in its message.
        """
        if self._executed is None:
            self._executed = _run(self)
        if isinstance(to_fetch, int):
            return self._executed[to_fetch]
        if isinstance(to_fetch, list):
            return [self.get(x) for x in to_fetch]
        if isinstance(to_fetch, tuple):
            return tuple(self.get(x) for x in to_fetch)
        raise ValueError(f"TFRunBuilder({self.debug_name!r}): unsupported fetch type: {to_fetch!r}")


def _run(builder: TFRunBuilder) -> List[Any]:
    try:
        timeline_dir = os.environ.get("TF_TIMELINE_DIR")
        if not timeline_dir:
            fast = _run_cached(builder.session, builder.fetches, builder.feed_dict)
            if fast is not _NO_FAST_PATH:
                return fast
        return run_timeline(
            builder.session, builder.fetches, builder.debug_name, builder.feed_dict, timeline_dir
        )
    except Exception as e:  # re-raised with the run's name in the message
        logger.error("TFRunBuilder(%r): error fetching %s", builder.debug_name, builder.fetches)
        renamed = _renamed(e, builder.debug_name)
        if renamed is e:
            raise
        raise renamed from e


_NO_FAST_PATH = object()
_MAX_CALLABLES = 64
# Attribute on the session: {(fed tensors, fetch structure key): callable or None (run())}
_CACHE_ATTR = "_rlpolicy_run_callables"


def _fetch_key(fetches: Any) -> Any:
    """A hashable key for a (nested) fetch structure; unhashable leaves raise TypeError."""
    if isinstance(fetches, (list, tuple)):
        return (type(fetches), tuple(_fetch_key(f) for f in fetches))
    if isinstance(fetches, dict):
        return (type(fetches), tuple((k, _fetch_key(v)) for k, v in fetches.items()))
    hash(fetches)
    return fetches


def _feed_values(feeds: tuple, values: List[Any]) -> Any:
    """Feed values converted like ``session.run`` would, or ``_NO_FAST_PATH`` if unsure."""
    out = []
    for t, v in zip(feeds, values):
        if isinstance(v, (str, bytes)):
            return _NO_FAST_PATH
        try:
            arr = np.asarray(v, dtype=t.dtype.as_numpy_dtype)
        except (TypeError, ValueError, OverflowError):
            return _NO_FAST_PATH  # session.run raises its usual error
        if not t.shape.is_compatible_with(arr.shape):
            return _NO_FAST_PATH  # session.run raises its usual shape error
        out.append(arr)
    return out


def _run_cached(session: Any, fetches: Any, feed_dict: Dict[Any, Any]) -> Any:
    """Runs through a cached session callable for this feed set and fetch structure.

    Returns:
        The fetched values, or ``_NO_FAST_PATH`` where ``session.run`` must be used.
    """
    if tf is None:
        return _NO_FAST_PATH
    feeds = tuple(feed_dict)
    try:
        key = (feeds, _fetch_key(fetches))
        cache = session.__dict__.get(_CACHE_ATTR)
        if cache is None:
            cache = session.__dict__[_CACHE_ATTR] = {}
        fn = cache.get(key, _NO_FAST_PATH)
    except (TypeError, AttributeError):  # unhashable fetches, or a session without __dict__
        return _NO_FAST_PATH
    if fn is _NO_FAST_PATH:
        if len(cache) >= _MAX_CALLABLES:
            cache.clear()
        fn = cache[key] = make_session_callable(session, fetches, feeds)
    if fn is None or getattr(session, "_closed", True):
        return _NO_FAST_PATH
    values = _feed_values(feeds, list(feed_dict.values()))
    if values is _NO_FAST_PATH:
        return values
    run, handler = fn
    return handler.build_results(session, run(*values))


def _renamed(e: Exception, debug_name: str) -> Exception:
    """The same kind of error with the run's name prefixed to its message (or noted on it)."""
    prefix = f"TFRunBuilder({debug_name!r}) run failed: "
    try:
        if tf is not None and isinstance(e, tf.errors.OpError):
            return type(e)(e.node_def, e.op, prefix + e.message)
        return type(e)(prefix + str(e))
    except Exception:  # an exception class with another constructor: keep the original
        add_note = getattr(e, "add_note", None)  # (Python 3.11+)
        if add_note is not None:
            add_note(prefix.rstrip(": "))
        return e


_count = 0


def run_timeline(
    sess: Any, ops: Any, debug_name: str, feed_dict: Dict[Any, Any] = None, timeline_dir: str = None
) -> Any:
    """``sess.run(ops, feed_dict)``; with ``timeline_dir``, also writes a Chrome trace there.

    Args:
        sess: The session.
        ops: What to fetch.
        debug_name: Used in the trace file name.
        feed_dict: The feeds.
        timeline_dir: Directory for ``timeline-<name>-<pid>-<n>.json`` files, or None.

    Returns:
        The fetched values.
    """
    feed_dict = feed_dict or {}
    if not timeline_dir:
        return sess.run(ops, feed_dict=feed_dict)
    timeline = timeline_module()
    global _count
    run_options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
    run_metadata = tf1.RunMetadata()
    start = time.time()
    fetches = sess.run(ops, options=run_options, run_metadata=run_metadata, feed_dict=feed_dict)
    trace = timeline.Timeline(step_stats=run_metadata.step_stats)
    outf = os.path.join(timeline_dir, f"timeline-{debug_name}-{os.getpid()}-{_count % 10}.json")
    _count += 1
    with open(outf, "w") as f:
        f.write(trace.generate_chrome_trace_format())
    logger.info("Wrote tf timeline (%.3f s) to %s", time.time() - start, os.path.abspath(outf))
    return fetches


__all__ = ["TFRunBuilder", "run_timeline"]
