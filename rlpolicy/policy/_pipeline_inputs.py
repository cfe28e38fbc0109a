"""What the exported action pipelines (torch: ``policy/_torch/pipeline_export.py``,
TF: ``policy/_tf/pipeline_export.py``) take as input, decided once for both: how
each leaf of the raw observation space becomes part of the model's input (the
flattening / one-hot / Atari-RAM preprocessors' work, in their order), and the
refusal of models that read more than observations and RNN state. Takes data
(spaces, config, model); imports no framework."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy._core import pipeline_contract as pc

#: One observation leaf's plan: ``("raw" | "float" | "ram", None)`` or
#: ``("one_hot", (sizes, starts))``.
LeafPlan = Tuple[str, Any]


def pipeline_plan(
    model: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    config: Dict[str, Any],
    initial_state: Sequence[Any],
) -> pc.PipelinePlan:
    """The plan of a policy's pipeline export, checked before anything is traced.

    Raises:
        ValueError: A space, action mapping or model input the pipeline cannot
            express (named in the message).
    """
    raw_space, obs_plan = observation_plan(observation_space, config)
    check_model_inputs(model)
    normalize = bool(config.get("normalize_actions", True))
    pc.check_action_mapping(action_space, normalize)
    init = [np.asarray(s.numpy() if hasattr(s, "numpy") else s, np.float32) for s in initial_state]
    return pc.PipelinePlan(
        raw_space, obs_plan, action_space, init, normalize, bool(config.get("clip_actions", False))
    )


def observation_plan(space: gym.Space, config: Dict[str, Any]) -> Tuple[gym.Space, List[LeafPlan]]:
    """The raw observation space the artifact takes and how each of its leaves
    becomes part of the model's input (the flattening / one-hot preprocessors'
    work, in their order).

    Raises:
        ValueError: Repeated observations, nested observations without a
            preprocessor, or a leaf space the pipeline cannot take.
    """
    from rlpolicy.models.preprocessors import get_preprocessor

    original: Any = getattr(space, "original_space", None)
    prepped = (
        original is not None
        and not config.get("_disable_preprocessor_api", False)
        and (
            isinstance(original, (gym.spaces.Dict, gym.spaces.Tuple))
            or (
                isinstance(original, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
                and isinstance(space, gym.spaces.Box)
            )
        )
    )
    if not prepped:
        pc.observation_leaves(space)  # (refuses Repeated)
        if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise ValueError(
                f"observation space {space}: a policy with "
                "_disable_preprocessor_api takes nested observations; the "
                "pipeline export needs the preprocessed (flat) layout"
            )
        return space, [("raw", None)]
    plan: List[LeafPlan] = []
    for path, leaf in pc.observation_leaves(original):
        if isinstance(leaf, gym.spaces.Discrete):
            plan.append(("one_hot", ([int(leaf.n)], [int(getattr(leaf, "start", 0))])))
        elif isinstance(leaf, gym.spaces.MultiDiscrete):
            nvec = np.asarray(leaf.nvec).ravel()
            starts = np.asarray(getattr(leaf, "start", np.zeros_like(nvec))).ravel()
            plan.append(("one_hot", ([int(k) for k in nvec], [int(s) for s in starts])))
        elif isinstance(leaf, gym.spaces.Box):
            ram = get_preprocessor(leaf).__name__ == "AtariRamPreprocessor"
            plan.append(("ram" if ram else "float", None))
        else:
            raise ValueError(
                f"observation{''.join(f'[{k!r}]' for k in path)}: {leaf} cannot "
                "be exported as a pipeline input (Box, Discrete, MultiDiscrete "
                "and Dict/Tuple of them can)"
            )
    return original, plan


def check_model_inputs(model: Any) -> None:
    """Refuses models whose action computation reads columns other than obs/state.

    Raises:
        ValueError: Naming the columns (``prev_actions``, ``prev_rewards``, ...).
    """
    extra = [
        k
        for k, vr in (getattr(model, "view_requirements", None) or {}).items()
        if getattr(vr, "used_for_compute_actions", True)
        and k not in ("obs", "seq_lens", "is_training", "infos")
        and not k.startswith("state_in_")
        and not k.startswith("state_out_")
    ]
    if extra:
        raise ValueError(
            f"the model reads {extra} for action computation; the pipeline "
            "export takes observations and RNN state only"
        )
