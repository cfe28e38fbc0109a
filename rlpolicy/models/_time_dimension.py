"""``add_time_dimension`` (public at RLlib 1.11's ``ray.rllib.policy.rnn_sequencing``).

The recurrent models reshape the flat, right-zero-padded [N*T, ...] rows of a
sequence batch into [N, T, ...]; the op lives beside them, and
``rlpolicy.policy.rnn_sequencing`` re-exports it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.typing import TensorType


@DeveloperAPI
def add_time_dimension(
    padded_inputs: TensorType,
    *,
    max_seq_len: Optional[int] = None,
    seq_lens: Optional[TensorType] = None,
    framework: str = "tf",
    time_major: bool = False,
) -> TensorType:
    """Reshapes padded [N*T, ...] inputs into [N, T, ...] (or [T, N, ...] if time_major).

    T is `max_seq_len` if given, else the padded length divided by len(seq_lens).

    Args:
        padded_inputs: Right-zero-padded sequences laid end to end.
        max_seq_len: Length T of every padded sequence.
        seq_lens: Sequence lengths (only their count N is used when max_seq_len is None).
        framework: "tf", "tf2", "tfe", "torch" or "np".
        time_major: Return [T, N, ...] instead of [N, T, ...].

    Raises:
        ValueError: If neither max_seq_len nor seq_lens is given, or the framework is unknown.
    """
    if max_seq_len is None and seq_lens is None:
        raise ValueError("add_time_dimension: pass max_seq_len or seq_lens")
    if framework in ("tf", "tf2", "tfe"):
        return _add_time_dimension_tf(padded_inputs, max_seq_len, seq_lens, time_major)
    if framework == "torch":
        from rlpolicy.utils.framework import try_import_torch

        torch, _ = try_import_torch()
        x = torch.as_tensor(padded_inputs)
        t = int(max_seq_len) if max_seq_len is not None else x.shape[0] // len(seq_lens)  # type: ignore[arg-type]
        out = x.reshape((x.shape[0] // t, t) + tuple(x.shape[1:]))
        return out.transpose(0, 1) if time_major else out
    if framework == "np":
        x = np.asarray(padded_inputs)
        t = int(max_seq_len) if max_seq_len is not None else x.shape[0] // len(seq_lens)  # type: ignore[arg-type]
        out = x.reshape((x.shape[0] // t, t) + x.shape[1:])
        return np.swapaxes(out, 0, 1) if time_major else out
    raise ValueError(
        f"add_time_dimension: unknown framework {framework!r}; use 'tf', 'tf2', 'tfe', 'torch' or 'np'"
    )


def _add_time_dimension_tf(
    padded_inputs: Any, max_seq_len: Optional[int], seq_lens: Any, time_major: bool
) -> Any:
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    x = tf.convert_to_tensor(padded_inputs)
    rows = tf.shape(x)[0]
    if max_seq_len is not None:
        t = tf.cast(max_seq_len, tf.int32)
        n = rows // t
    else:
        n = tf.shape(seq_lens)[0]
        t = rows // n
    out = tf.reshape(x, tf.concat([tf.stack([n, t]), tf.shape(x)[1:]], axis=0))
    if time_major:
        perm = tf.concat([[1, 0], tf.range(2, tf.rank(out))], axis=0)
        out = tf.transpose(out, perm)
    return out
