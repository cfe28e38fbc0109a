"""Bounded, regular-file-only reading of checkpoint files, and the save lock.

Reading: a file is opened without following links and without blocking, must
be a regular file, and is read only up to its limit (a link to ``/dev/zero``,
a FIFO or a device is refused before any read). The array file's zip members
are checked against their ``.npy`` headers and against the metadata before a
byte of array data is decompressed: declared shape x dtype must equal the
stored size, every member must be referenced, no name may repeat.

Writing: saves into one folder take an exclusive ``flock`` on a lock file, so
the "previous array file" a save removes is never one another save has just
committed.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import stat
import zipfile
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Set

import numpy as np

LOCK_FILE = ".rlpolicy_checkpoint.lock"
_NPY_HEADER_MAX = 64 * 1024


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded: corrupt, foreign, untrusted, out of limits, or from a newer format."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint directory does not exist (also a FileNotFoundError)."""


@dataclass(frozen=True)
class Limits:
    """Upper bounds of what a checkpoint load reads or allocates (raise them for huge policies).

    Attributes:
        max_json_bytes: Size of ``rlpolicy_checkpoint.json``.
        max_arrays_file_bytes: Size of the ``.npz`` array file.
        max_array_bytes: Size of one array.
        max_arrays: Number of arrays.
        max_depth: Nesting depth of the JSON (dicts/lists inside each other).
        max_model_weights: Weights a model config may ask for (estimated before building).
    """

    max_json_bytes: int = 64 * 2**20
    max_arrays_file_bytes: int = 8 * 2**30
    max_array_bytes: int = 4 * 2**30
    max_arrays: int = 100_000
    max_depth: int = 64
    max_model_weights: int = 2**26


def read_regular_file(directory: str, name: str, max_bytes: int, what: str) -> bytes:
    """Reads ``directory/name``, which must be a regular file (not a link) of at most ``max_bytes``.

    Raises:
        CheckpointError: Naming the path and the reason.
    """
    if not isinstance(name, str) or not name or os.path.basename(name) != name or name in (".", ".."):
        raise CheckpointError(f"checkpoint in {directory!r}: {what} {name!r} is not a plain file name")
    path = os.path.join(directory, name)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        reason = "is a symbolic link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})"
        raise CheckpointError(f"checkpoint {what} {path!r} {reason}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(
                f"checkpoint {what} {path!r} is not a regular file (a FIFO, device or folder)"
            )
        if info.st_size > max_bytes:
            raise CheckpointError(
                f"checkpoint {what} {path!r} has {info.st_size} bytes, over the limit of {max_bytes} "
                "(raise it with limits=Limits(...))"
            )
        data = f.read(info.st_size + 1)  # (read(n) allocates n bytes: never ask for the limit itself)
    if len(data) != info.st_size:
        raise CheckpointError(f"checkpoint {what} {path!r} changed while it was read; try again")
    return data


def check_regular_file(path: str, max_bytes: int, what: str) -> None:
    """Raises CheckpointError unless ``path`` is a regular file (no link) of at most ``max_bytes``."""
    try:
        info = os.lstat(path)
    except OSError as e:
        raise CheckpointError(f"{what} {path!r} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{what} {path!r} is not a regular file (a link, FIFO, device or folder)")
    if info.st_size > max_bytes:
        raise CheckpointError(f"{what} {path!r} has {info.st_size} bytes, over the limit of {max_bytes}")


def parse_json(data: bytes, path: str, max_depth: int) -> Any:
    """Parses JSON bytes and checks their nesting depth.

    Raises:
        CheckpointError: Bad encoding or syntax, or nesting deeper than ``max_depth``.
    """
    try:
        value = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(
            f"policy checkpoint {path!r} nests deeper than the limit of {max_depth}"
        ) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"policy checkpoint {path!r} is corrupt: not valid JSON ({e})") from None
    depth = nesting_depth(value)
    if depth > max_depth:
        raise CheckpointError(f"policy checkpoint {path!r} nests {depth} deep, over the limit of {max_depth}")
    return value


def nesting_depth(value: Any) -> int:
    """How deep dicts and lists nest in ``value`` (iterative: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in children)
    return deepest


def array_refs(value: Any, ref_key: str) -> List[str]:
    """Every ``{ref_key: name}`` reference in a decoded JSON value (iterative)."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if ref_key in item:
                found.append(item[ref_key])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _npy_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> tuple:
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                    f, max_header_size=_NPY_HEADER_MAX
                )
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                    f, max_header_size=_NPY_HEADER_MAX
                )
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except (ValueError, EOFError, OSError, SyntaxError) as e:
            raise CheckpointError(
                f"array file {path!r}: member {info.filename!r} has a bad .npy header ({e})"
            ) from None
        return shape, dtype, f.tell()


def load_npz(payload: bytes, path: str, referenced: Set[str], limits: Limits) -> Dict[str, np.ndarray]:
    """Loads the arrays of an ``.npz`` payload after checking every member first.

    Raises:
        CheckpointError: Not a zip, a duplicate/unreferenced/missing member, a
            header whose shape x dtype differs from the stored size, an object
            dtype, or a limit exceeded.
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(payload))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise CheckpointError(
            f"policy checkpoint array file {path!r} is corrupt: not a zip archive ({e})"
        ) from None
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_arrays:
            raise CheckpointError(
                f"array file {path!r} has {len(infos)} members, over the limit of {limits.max_arrays}"
            )
        names = [i.filename for i in infos]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise CheckpointError(f"array file {path!r} holds members {dupes} more than once")
        keys = {n[:-4] if n.endswith(".npy") else n: i for n, i in zip(names, infos)}
        headers = {key: _check_member(zf, info, path, limits) for key, info in keys.items()}
        missing = sorted(referenced - set(keys))
        if missing:
            raise CheckpointError(
                f"array file {path!r} lacks array {missing[0]!r} that the metadata references "
                f"({len(missing)} missing in all)"
            )
        extra = sorted(set(keys) - referenced)
        if extra:
            raise CheckpointError(
                f"array file {path!r} holds members {extra[:5]} that the metadata does not reference"
            )
        return {key: _read_member(zf, keys[key], path) for key in headers}


def _check_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str, limits: Limits) -> int:
    # The .npy header alone (a few bytes): dtype, and shape x dtype against the stored size.
    shape, dtype, header_len = _npy_header(zf, info, path)
    if dtype.hasobject or dtype.kind not in "biufc":
        raise CheckpointError(
            f"array file {path!r}: member {info.filename!r} has dtype {dtype}; only numbers are "
            "loaded (an object array cannot be read without pickle)"
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limits.max_array_bytes:
        raise CheckpointError(
            f"array file {path!r}: member {info.filename!r} declares {nbytes} bytes, over the per-array limit "
            f"of {limits.max_array_bytes}"
        )
    if info.file_size != header_len + nbytes:
        raise CheckpointError(
            f"array file {path!r}: member {info.filename!r} stores {info.file_size} bytes, but its header "
            f"declares {shape} {dtype} ({header_len + nbytes} bytes with the header)"
        )
    return nbytes


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> np.ndarray:
    try:
        with zf.open(info) as f:
            return np.lib.format.read_array(f, allow_pickle=False, max_header_size=_NPY_HEADER_MAX)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"array file {path!r}: member {info.filename!r} is corrupt ({e})") from None


@contextlib.contextmanager
def save_lock(directory: str) -> Iterator[None]:
    """Holds an exclusive lock on ``directory``'s lock file (one save at a time)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: saves are not serialised
        yield
        return
    path = os.path.join(directory, LOCK_FILE)
    fd = os.open(
        path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o666
    )
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"checkpoint lock {path!r} is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
