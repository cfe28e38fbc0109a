"""``TFRunBuilder`` (RLlib 1.11's ``ray.rllib.utils.tf_run_builder``): collect feeds and
fetches from several places, then run the session once."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Dict, List, Union

from rlpolicy.utils.framework import try_import_tf

tf1, tf, tfv = try_import_tf()

logger = logging.getLogger(__name__)


class TFRunBuilder:
    """Gathers a feed dict and fetches, and runs them in one ``session.run``.

    The run happens on the first ``get()``; after that no more feeds or
    fetches can be added.

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
        self._executed = None

    def _check_open(self, what: str) -> None:
        if self._executed is not None:
            raise RuntimeError(f"TFRunBuilder({self.debug_name!r}): cannot {what} after the run "
                               f"was executed by get()")

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
        return run_timeline(builder.session, builder.fetches, builder.debug_name,
                            builder.feed_dict, os.environ.get("TF_TIMELINE_DIR"))
    except Exception as e:  # re-raised with the run's name in the message
        logger.error("TFRunBuilder(%r): error fetching %s", builder.debug_name, builder.fetches)
        renamed = _renamed(e, builder.debug_name)
        if renamed is e:
            raise
        raise renamed from e


def _renamed(e: Exception, debug_name: str) -> Exception:
    """The same kind of error with the run's name prefixed to its message (or noted on it)."""
    prefix = f"TFRunBuilder({debug_name!r}) run failed: "
    try:
        if tf is not None and isinstance(e, tf.errors.OpError):
            return type(e)(e.node_def, e.op, prefix + e.message)
        return type(e)(prefix + str(e))
    except Exception:  # an exception class with another constructor: keep the original
        e.add_note(prefix.rstrip(": "))
        return e


_count = 0


def run_timeline(sess: Any, ops: Any, debug_name: str, feed_dict: Dict[Any, Any] = None,
                 timeline_dir: str = None) -> Any:
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
    from tensorflow.python.client import timeline

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
