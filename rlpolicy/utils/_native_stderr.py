"""Native libraries' start-up banners, written once.

TensorFlow's two shared libraries (``libtensorflow_framework`` and the Python
extension) each carry their own absl logging, so ``import tensorflow`` prints
every start-up line twice ("All log messages before absl::InitializeLog() ...",
"oneDNN custom operations are on ...", "Could not find cuda drivers ..."),
before ``TF_CPP_MIN_LOG_LEVEL`` can reach them. :func:`dedupe_native_stderr`
runs a block with file descriptor 2 sent to a temporary file and then writes
what it caught back to stderr, in order, with each repeated line written once.
Nothing is dropped: the first copy of every line, and every line that was not
repeated, reaches stderr.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

# absl's prefix: severity+MMDD, time, thread id ("I0000 00:00:1796163782.111613    5240 ").
_ABSL_PREFIX = re.compile(rb"^[IWEF]\d{4} [\d:.]+\s+\d+ ")


def dedupe_lines(data: bytes) -> bytes:
    """``data`` with every line that repeats an earlier one (ignoring absl's
    time/thread prefix) left out."""
    seen, out = set(), []
    for line in data.splitlines(keepends=True):
        key = _ABSL_PREFIX.sub(b"", line).rstrip()
        if key and key in seen:
            continue
        seen.add(key)
        out.append(line)
    return b"".join(out)


@contextlib.contextmanager
def dedupe_native_stderr() -> Iterator[None]:
    """Runs the block with fd 2 captured; writes the capture back deduplicated.

    Without a real fd 2 (an embedded interpreter, ``sys.stderr`` replaced by an
    object without a file descriptor) the block just runs.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (AttributeError, OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            data = dedupe_lines(capture.read())
            while data:  # os.write may write less than asked
                data = data[os.write(2, data) :]
