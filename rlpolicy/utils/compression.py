"""Compression of arbitrary picklable data into ASCII strings (RLlib's ``utils.compression``).

As in RLlib 1.11, ``pack`` pickles its argument, compresses the bytes and base64-encodes
them into an ASCII ``str``; ``unpack`` reverses it. RLlib compresses with lz4 and, without
lz4, silently returns the data unchanged. rlpolicy does not depend on lz4: it uses lz4
when it is installed (so strings packed by RLlib 1.11 unpack here) and zlib otherwise, so
``pack`` always compresses. ``unpack`` recognises both formats from their headers.

``unpack`` un-pickles its input: only unpack data you (or a trusted peer) packed.
SampleBatch.compress uses its own pickle-free format (``_core.batch_ops``).
"""

from __future__ import annotations

import base64
import logging
import pickle
import zlib
from typing import Any

import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI

logger = logging.getLogger(__name__)

try:  # cloudpickle (a Ray dependency) also pickles lambdas and local classes.
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle

try:
    import lz4.frame as _lz4

    LZ4_ENABLED = True
except ImportError:
    _lz4 = None
    LZ4_ENABLED = False

# The first bytes of an lz4 frame (little-endian magic 0x184D2204).
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


@DeveloperAPI
def compression_supported() -> bool:
    """Whether ``pack`` compresses (always True: zlib stands in for a missing lz4)."""
    return True


@DeveloperAPI
def pack(data: Any) -> str:
    """Pickles, compresses and base64-encodes ``data`` into an ASCII string.

    Args:
        data: Any picklable object (numpy arrays, dicts of them, ...).

    Returns:
        The packed data (``is_compressed`` is True for it).
    """
    raw = _pickler.dumps(data)
    blob = _lz4.compress(raw) if LZ4_ENABLED else zlib.compress(raw)
    return base64.b64encode(blob).decode("ascii")


@DeveloperAPI
def pack_if_needed(data: Any) -> Any:
    """Packs ``data`` if it is a numpy array; returns anything else unchanged."""
    if isinstance(data, np.ndarray):
        data = pack(data)
    return data


@DeveloperAPI
def unpack(data: Any) -> Any:
    """Reverses ``pack``.

    Args:
        data: A string (or bytes) that ``pack`` produced, with lz4 or zlib.

    Raises:
        ValueError: If ``data`` is not packed data (not base64, or neither lz4 nor zlib).
        ImportError: If ``data`` was compressed with lz4 and lz4 is not installed.
    """
    if not is_compressed(data):
        raise ValueError(f"unpack: expected a str or bytes produced by pack(), got {type(data).__name__}")
    try:
        blob = base64.b64decode(data, validate=True)
    except (ValueError, TypeError) as e:
        raise ValueError(f"unpack: data is not base64 text produced by pack() ({e})") from None
    if blob.startswith(_LZ4_MAGIC):
        if not LZ4_ENABLED:
            raise ImportError(
                "unpack: this data was compressed with lz4 (RLlib's format); install lz4 to unpack it"
            )
        raw = _lz4.decompress(blob)
    else:
        try:
            raw = zlib.decompress(blob)
        except zlib.error as e:
            raise ValueError(f"unpack: data is neither lz4 nor zlib compressed ({e})") from None
    return pickle.loads(raw)


@DeveloperAPI
def unpack_if_needed(data: Any) -> Any:
    """Unpacks ``data`` if ``is_compressed(data)``; returns anything else unchanged."""
    if is_compressed(data):
        data = unpack(data)
    return data


@DeveloperAPI
def is_compressed(data: Any) -> bool:
    """True for ``str`` and ``bytes`` (what RLlib 1.11 takes for packed data)."""
    return isinstance(data, (bytes, str))


__all__ = [
    "LZ4_ENABLED",
    "compression_supported",
    "pack",
    "pack_if_needed",
    "unpack",
    "unpack_if_needed",
    "is_compressed",
]
