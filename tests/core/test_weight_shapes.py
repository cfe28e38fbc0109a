"""_core.checkpoint_checks.check_weight_shapes: the one key/shape check of every
framework's set_weights (graph TF, eager TF, torch feed it ``{key: shape}``)."""

import numpy as np
import pytest

from rlpolicy._core.checkpoint_checks import check_weight_shapes

SHAPES = {"fc/w": (4, 2), "fc/b": (2,)}


def test_matching_weights_pass_whatever_their_container():
    check_weight_shapes(SHAPES, {"fc/b": [0.0, 1.0], "fc/w": np.zeros((4, 2))})
    check_weight_shapes({}, {})


@pytest.mark.parametrize(
    "weights, match",
    [
        (
            {"fc/w": np.zeros((4, 2))},
            r"^set_weights: .*missing keys \['fc/b'\], unknown keys \[\]; nothing was assigned$",
        ),
        ({**{k: np.zeros(s) for k, s in SHAPES.items()}, "x": 1}, r"missing keys \[\], unknown keys \['x'\]"),
        (
            {"fc/w": np.zeros((2, 4)), "fc/b": np.zeros(2)},
            r"^set_weights: 'fc/w' has shape \(2, 4\), the model's is \(4, 2\)",
        ),
        ({"fc/w": np.zeros((4, 2)), "fc/b": 0.0}, r"'fc/b' has shape \(\), the model's is \(2,\)"),
    ],
)
def test_bad_weights_name_the_keys_or_the_first_bad_shape(weights, match):
    with pytest.raises(ValueError, match=match):
        check_weight_shapes(SHAPES, weights)


def test_the_caller_names_the_message():
    with pytest.raises(ValueError, match=r"^state\['opt'\]: 'fc/b' has shape \(3,\)"):
        check_weight_shapes(SHAPES, {"fc/w": np.zeros((4, 2)), "fc/b": np.zeros(3)}, "state['opt']")
