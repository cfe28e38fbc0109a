"""Base class of torch models (RLlib's ``ray.rllib.models.torch.torch_modelv2``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union, cast

import gymnasium as gym

from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.utils.annotations import PublicAPI, override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import ModelConfigDict, TensorType

_, nn = try_import_torch()


@PublicAPI
class TorchModelV2(ModelV2):
    """ModelV2 for PyTorch; subclasses must also inherit from ``nn.Module``.

    Typical subclass::

        class MyModel(TorchModelV2, nn.Module):
            def __init__(self, *args, **kwargs):
                TorchModelV2.__init__(self, *args, **kwargs)
                nn.Module.__init__(self)
                self._hidden = nn.Sequential(...)

    Attributes:
        tower_stats: Per-tower values a loss function stores (e.g. the loss
            itself), read back with ``TorchPolicy.get_tower_stats``.
    """

    if TYPE_CHECKING:  # from nn.Module, which every TorchModelV2 also subclasses

        def parameters(self, recurse: bool = True) -> Iterator[Any]: ...

        def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Any]]: ...

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
    ):
        """Initializes the framework-neutral part; see ``ModelV2.__init__``.

        Raises:
            ValueError: the subclass does not inherit from ``nn.Module``.
        """
        if not isinstance(self, nn.Module):
            raise ValueError(
                f"{type(self).__name__} subclasses TorchModelV2 but not nn.Module; "
                "declare it as MyModel(TorchModelV2, nn.Module)"
            )
        ModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name, framework="torch")
        self.tower_stats: Dict[str, Any] = {}

    @override(ModelV2)
    def variables(self, as_dict: bool = False) -> Union[List[TensorType], Dict[str, TensorType]]:
        """Returns ``parameters()`` as a list, or a dict keyed by parameter name.

        The dict keys are the ``state_dict()`` names of the parameters (in the
        same order); buffers are not included.
        """
        if as_dict:
            return dict(self.named_parameters())
        return list(self.parameters())

    @override(ModelV2)
    def trainable_variables(self, as_dict: bool = False) -> Union[List[TensorType], Dict[str, TensorType]]:
        """Like ``variables`` but only the parameters with ``requires_grad``."""
        if as_dict:
            return {
                k: v for k, v in cast(Dict[str, Any], self.variables(as_dict=True)).items() if v.requires_grad
            }
        return [v for v in cast(List[Any], self.variables()) if v.requires_grad]
