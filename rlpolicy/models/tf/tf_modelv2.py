"""The TensorFlow model base class (RLlib's ``ray.rllib.models.tf.tf_modelv2``).

A ``TFModelV2`` holds one or more ``tf_keras`` models (Keras 2) as attributes.
It works in both TF modes:

* graph mode ("tf"): built while a ``tf1.Graph`` is the default graph; the
  model remembers that graph and ``context()`` re-enters it;
* eager mode ("tf2"/"tfe"): built and called eagerly.

Variables are discovered automatically by walking the instance attributes
(Keras models, ``tf.Module``s, ``tf.Variable``s, nested TFModelV2s, lists and
dicts of those), in attribute creation order, with the keys RLlib uses.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

import gymnasium as gym

from rlpolicy._core import checkpoint_io
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.utils import tf_modes
from rlpolicy.utils._variable_keys import unique_keys
from rlpolicy.utils.annotations import PublicAPI, override
from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()
_KERAS: Any = None  # the tf_keras module, on first use


def _keras() -> Any:
    """``get_keras()``, looked up once (it runs before every model call)."""
    global _KERAS
    if _KERAS is None:
        _KERAS = get_keras()
    return _KERAS


_warned_register_variables = False


@PublicAPI
class TFModelV2(ModelV2):
    """Base class for TF models; subclasses build ``tf_keras`` models in ``__init__``.

    A subclass builds its layers in ``__init__`` and implements ``forward()``
    (and usually ``value_function()``)::

        class MyModel(TFModelV2):
            def __init__(self, obs_space, action_space, num_outputs, model_config, name):
                super().__init__(obs_space, action_space, num_outputs, model_config, name)
                keras = get_keras()
                inp = keras.layers.Input(shape=obs_space.shape)
                out = keras.layers.Dense(num_outputs)(inp)
                val = keras.layers.Dense(1)(inp)
                self.base_model = keras.Model(inp, [out, val])

            def forward(self, input_dict, state, seq_lens):
                out, self._value_out = self.base_model(input_dict["obs"])
                return out, state
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass builds its Keras layers in __init__: under the Keras build
        # lock, then pinned to the flavour of the model (see utils/tf_modes.py).
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:  # (a wrapped one wrapped again is harmless: the lock is re-entrant)
            cls.__init__ = _built_under_keras_lock(init)  # type: ignore[method-assign]

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
    ):
        """Initialises the base model state (no variables are created here).

        Args:
            obs_space: The (flat) observation space.
            action_space: The action space.
            num_outputs: Number of outputs of ``forward()``.
            model_config: The model config dict.
            name: The model's name.
        """
        super().__init__(obs_space, action_space, num_outputs, model_config, name, framework="tf")
        # Only filled by the deprecated `register_variables()`.
        self.var_list: List[TensorType] = []
        # Graph mode: remember the graph the model was built in.
        self.graph = None if tf1.executing_eagerly() else tf1.get_default_graph()
        # The last walk for variables() (opaque to the walks: a holder, not a container).
        self._variable_cache = VariableCache()

    def context(self) -> contextlib.AbstractContextManager:
        """Returns a context that makes the model's graph the default one.

        Eager models get a no-op context. (The model's Keras layers keep the
        flavour, graph or eager, it was built in: ``rlpolicy.utils.tf_modes``.)
        """
        if self.graph is not None:
            return self.graph.as_default()
        return contextlib.nullcontext()

    def update_ops(self) -> List[TensorType]:
        """Returns extra ops to run with each train step (none by default).

        Override to return, e.g., batch-norm moving-average update ops.
        """
        return []

    def register_variables(self, variables: List[TensorType]) -> None:
        """Deprecated: variables are found automatically.

        Registered variables, if any, replace the automatic discovery (as in
        RLlib).

        Args:
            variables: The variables to register.
        """
        global _warned_register_variables
        if not _warned_register_variables:
            deprecation_warning(old="TFModelV2.register_variables", error=False)
            _warned_register_variables = True
        self.var_list.extend(variables)

    @override(ModelV2)
    def variables(self, as_dict: bool = False) -> Union[List[TensorType], Dict[str, TensorType]]:
        """Returns all variables of this model (and of nested models).

        Args:
            as_dict: Return an ordered ``{key: variable}`` dict. Keys are the
                attribute path plus the variable name with "/" replaced by
                "." (e.g. ``"base_model.fc_1.kernel:0"``).

        Returns:
            The list (or dict) of variables, in discovery order.
        """
        if self.var_list:
            if as_dict:
                return unique_keys((v.name, v) for v in self.var_list)
            return list(self.var_list)
        found = _cached_variables(self, getattr(self, "_variable_cache", None))
        return dict(found) if as_dict else list(found.values())

    @override(ModelV2)
    def trainable_variables(self, as_dict: bool = False) -> Union[List[TensorType], Dict[str, TensorType]]:
        """Like ``variables()`` but only the trainable ones."""
        if as_dict:
            return {
                k: v for k, v in cast(Dict[str, Any], self.variables(as_dict=True)).items() if v.trainable
            }
        return [v for v in cast(List[Any], self.variables()) if v.trainable]

    @override(ModelV2)
    def import_from_h5(self, h5_file: str) -> None:
        """Loads weights saved with Keras ``save_weights`` (h5 format).

        Works for models holding exactly one Keras model (e.g. the default
        fully connected and vision nets, whose Keras model is ``base_model``).

        Args:
            h5_file: Path to the h5 weights file.

        Raises:
            NotImplementedError: the model holds no Keras model or several;
                override this method to say which one to load into.
        """
        models = _keras_model_attributes(self)
        if len(models) != 1:
            raise NotImplementedError(
                f"{type(self).__name__}.import_from_h5({h5_file!r}): the model holds "
                f"{len(models)} Keras models ({', '.join(models) or 'none'}), expected exactly 1; "
                "override import_from_h5 to pick the Keras model to load into"
            )
        (keras_model,) = models.values()
        # Only a regular file within the size limit (no link to /dev/zero, FIFO, device).
        checkpoint_io.check_regular_file(
            os.fspath(h5_file), checkpoint_io.Limits().max_arrays_file_bytes, "h5 file"
        )
        try:
            with self.context():
                keras_model.load_weights(h5_file)
        except Exception as e:  # noqa: BLE001 - h5py/Keras raise many types for a bad file
            raise checkpoint_io.CheckpointError(
                f"h5 file {os.fspath(h5_file)!r} cannot be loaded into {type(self).__name__}: {type(e).__name__}: {e}"
            ) from e

    @staticmethod
    def _find_sub_modules(current_key: str, struct: Any) -> Dict[str, TensorType]:
        """Returns ``{key: variable}`` for all variables inside ``struct``."""
        return _find_sub_modules(current_key, struct)


def _built_under_keras_lock(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def build(self: TFModelV2, *args: Any, **kwargs: Any) -> None:
        with tf_modes.keras_build(self, lambda: self.graph is None, (TFModelV2,)):
            init(self, *args, **kwargs)

    return build


def _keras_model_attributes(model: TFModelV2) -> Dict[str, Any]:
    """The instance attributes of ``model`` that are Keras models, by name."""
    keras = _keras()
    return {k: v for k, v in model.__dict__.items() if isinstance(v, keras.Model)}


class VariableCache:
    """A model's last ``variables()`` walk: (the objects and counts it depended on,
    {key: variable}). Copies and pickles start empty (a copy walks its own)."""

    def __init__(self) -> None:
        self.entry: Optional[Tuple[List[Any], List[int], Dict[str, TensorType]]] = None

    def __deepcopy__(self, memo: Dict[int, Any]) -> "VariableCache":
        return VariableCache()

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        return (VariableCache, ())


def _cached_variables(model: TFModelV2, cache: Optional[VariableCache]) -> Dict[str, TensorType]:
    """``_find_sub_modules("", model.__dict__)``, kept in the model's ``cache`` while nothing it depends on changed.

    The walk (and Keras' own walk over each model's layers) runs before every
    learning step otherwise. The result is reused while the attributes hold
    the same variables, Keras layers, ``tf.Module``s and containers (lists,
    tuples and dicts compared element by element, nested TFModelV2s by their
    attributes; other values, such as the last outputs, cannot hold
    variables and are not compared) and every Keras layer or
    ``tf.Module`` other than a functional Keras model (whose layers, built
    with the model, are fixed) has the same number of variables.
    """
    objects: List[Any] = []
    counts: List[int] = []
    _dependencies(model.__dict__, objects, counts, _keras(), set())
    if cache is None:  # (a model whose TFModelV2.__init__ did not run: no cache)
        return _find_sub_modules("", model.__dict__)
    cached = cache.entry
    if (
        cached is not None
        and cached[1] == counts
        and len(cached[0]) == len(objects)
        and all(a is b for a, b in zip(cached[0], objects))
    ):
        return cached[2]
    found = _find_sub_modules("", model.__dict__)
    cache.entry = (objects, counts, found)
    return found


def _dependencies(struct: Any, objects: List[Any], counts: List[int], keras: Any, seen: set) -> None:
    """Collects what ``_sub_module_variables(struct)`` depends on (see ``_cached_variables``)."""
    if id(struct) in seen:
        return
    if not isinstance(struct, (TFModelV2, keras.Model, tf.Module, tf.Variable, tuple, list, dict)):
        return  # (tensors, arrays, spaces, numbers: never variables, e.g. the last outputs)
    seen.add(id(struct))
    objects.append(struct)
    if isinstance(struct, TFModelV2):
        counts.append(len(struct.var_list))
        _dependencies(struct.__dict__, objects, counts, keras, seen)
    elif isinstance(struct, (keras.Model, tf.Module)):
        if not getattr(struct, "_is_graph_network", False):
            counts.append(len(struct.variables))
    elif isinstance(struct, (tuple, list)):
        counts.append(len(struct))
        for value in struct:
            _dependencies(value, objects, counts, keras, seen)
    elif isinstance(struct, dict):
        counts.append(len(struct))
        for key, value in struct.items():
            objects.append(key)
            _dependencies(value, objects, counts, keras, seen)


def _find_sub_modules(current_key: str, struct: Any) -> Dict[str, TensorType]:
    """Walks ``struct`` and collects its variables with RLlib's key scheme.

    Keys that repeat (variables of the same name, which eager TF allows) are made
    unique with a ``_<n>`` suffix in discovery order (see ``unique_keys``), so no
    variable is lost (RLlib 1.11's dict silently kept only the last one).
    """
    return unique_keys(_sub_module_variables(current_key, struct))


def _sub_module_variables(current_key: str, struct: Any) -> List[Tuple[str, TensorType]]:
    """``(key, variable)`` pairs of ``struct`` in discovery order (keys may repeat)."""
    keras = _keras()
    if isinstance(struct, (keras.Model, tf.Module)):
        prefix = current_key + "."
        return [(prefix + re.sub("/", ".", var.name), var) for var in struct.variables]
    if isinstance(struct, TFModelV2):
        return [
            (current_key + "." + key, var)
            for key, var in cast(Dict[str, Any], struct.variables(as_dict=True)).items()
        ]
    if isinstance(struct, tf.Variable):
        return [(current_key, struct)]
    if isinstance(struct, (tuple, list)):
        return [
            pair
            for i, value in enumerate(struct)
            for pair in _sub_module_variables(f"{current_key}_{i}", value)
        ]
    if isinstance(struct, dict):
        prefix = current_key + "_" if current_key else ""
        return [
            pair for key, value in struct.items() for pair in _sub_module_variables(prefix + str(key), value)
        ]
    return []
