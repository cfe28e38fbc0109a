"""Observation preprocessors (RLlib's ``ray.rllib.models.preprocessors``).

A preprocessor turns one environment observation into the flat float array
that travels through sample batches: one-hot for Discrete/MultiDiscrete, a
concatenation of the preprocessed parts for Dict/Tuple, ``[length, item_0,
..., item_{max_len-1}]`` (zero-padded) for Repeated, unchanged for Box.

They are framework-neutral and the policies' own observation preparation
builds on them, so they are written in ``rlpolicy._core.preprocessors``; this
module is their public (RLlib 1.11) path.
"""
from __future__ import annotations

from rlpolicy._core.preprocessors import (
    ATARI_OBS_SHAPE,
    ATARI_RAM_OBS_SHAPE,
    OBS_VALIDATION_INTERVAL,
    AtariRamPreprocessor,
    DictFlatteningPreprocessor,
    NoPreprocessor,
    OneHotPreprocessor,
    Preprocessor,
    RepeatedValuesPreprocessor,
    TupleFlatteningPreprocessor,
    get_preprocessor,
)

__all__ = ["ATARI_OBS_SHAPE", "ATARI_RAM_OBS_SHAPE", "OBS_VALIDATION_INTERVAL", "Preprocessor",
           "AtariRamPreprocessor", "OneHotPreprocessor", "NoPreprocessor",
           "TupleFlatteningPreprocessor", "DictFlatteningPreprocessor",
           "RepeatedValuesPreprocessor", "get_preprocessor"]

# Shown (and pickled by reference) under their public path.
for _obj in (Preprocessor, AtariRamPreprocessor, OneHotPreprocessor, NoPreprocessor,
             TupleFlatteningPreprocessor, DictFlatteningPreprocessor, RepeatedValuesPreprocessor,
             get_preprocessor):
    _obj.__module__ = __name__
del _obj
