"""Saving a TF graph-mode policy: SavedModel, ONNX (via tf2onnx) and tf1 Saver checkpoints.

``TFPolicy.export_model`` / ``export_checkpoint`` delegate here. Each writer
works on the policy's session and its serving signature (inputs and outputs
by name), so it can be tested on a hand-built graph.

tensorflow (and tf2onnx) are imported lazily.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from rlpolicy.policy._tf.control_flow import keep_functional_control_flow, prune_dead_loop_vars

ONNX_FILE_NAME = "saved_model"  # RLlib 1.11 writes <export_dir>/saved_model.onnx


def _tf():
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf(error=True)
    return tf1, tf


def _tensor_info(tensor: Any) -> Any:
    """The ``TensorInfo`` proto of a graph tensor, as ``build_tensor_info`` makes it,
    without that TF1 function's deprecation warning on every export."""
    tf1, tf = _tf()
    if not isinstance(tensor, tf.Tensor):  # sparse/composite tensors: TF's own encoding
        return tf1.saved_model.utils.build_tensor_info(tensor)
    return tf1.TensorInfo(
        name=tensor.name, dtype=tensor.dtype.as_datatype_enum, tensor_shape=tensor.shape.as_proto()
    )


def build_signature_def_map(inputs: Dict[str, Any], outputs: Dict[str, Any]) -> Dict[str, Any]:
    """A ``{"serving_default": SignatureDef}`` predict signature from named tensors."""
    tf1, _ = _tf()
    info = _tensor_info
    signature = tf1.saved_model.signature_def_utils.build_signature_def(
        {k: info(v) for k, v in inputs.items()},
        {k: info(v) for k, v in outputs.items()},
        tf1.saved_model.signature_constants.PREDICT_METHOD_NAME,
    )
    return {tf1.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: signature}


def save_saved_model(sess: Any, export_dir: str, signature_def_map: Dict[str, Any]) -> None:
    """Writes a TF1 SavedModel (tag "serve") of ``sess`` with the given signatures.

    Raises:
        FileExistsError: If ``export_dir`` exists and is not empty.
    """
    tf1, _ = _tf()
    if os.path.isdir(export_dir) and os.listdir(export_dir):
        raise FileExistsError(
            f"export_model: {export_dir!r} is not empty; a SavedModel needs an empty or new directory"
        )
    with sess.graph.as_default():
        builder = tf1.saved_model.builder.SavedModelBuilder(export_dir)
        builder.add_meta_graph_and_variables(
            sess, [tf1.saved_model.tag_constants.SERVING], signature_def_map=signature_def_map
        )
        builder.save()


def freeze_serving_graph(sess: Any, outputs: List[str]) -> Any:
    """The part of ``sess.graph`` that computes ``outputs``, variables turned into
    constants and its loops made convertible by tf2onnx (see ``policy._tf.control_flow``)."""
    from rlpolicy.utils.tf_utils import tf_log_filtered

    tf1, _ = _tf()
    nodes = [n.split(":")[0] for n in outputs]
    # The TF1 graph tools are what a graph-mode session has; their deprecation notes
    # are not the user's to act on.
    with sess.graph.as_default(), tf_log_filtered("is deprecated and will be removed"):
        frozen = tf1.graph_util.convert_variables_to_constants(sess, sess.graph.as_graph_def(), nodes)
        _assigns_to_frozen_values(frozen)
        frozen = tf1.graph_util.extract_sub_graph(frozen, nodes)
        # Again: drops the producers of the loop variables pruned away.
        frozen = tf1.graph_util.extract_sub_graph(prune_dead_loop_vars(frozen, outputs), nodes)
    keep_functional_control_flow(frozen)
    return frozen


# Ref-variable (TF1 ``VariableV2``) updates and the op computing their result from
# (old value, operand); ``None``: the result is the operand.
_REF_ASSIGN_RESULT = {"Assign": None, "AssignAdd": "AddV2", "AssignSub": "Sub"}


def _assigns_to_frozen_values(graph_def: Any) -> int:
    """Rewrites, in place, each ``Assign``/``AssignAdd``/``AssignSub`` of a variable
    that freezing turned into a constant into the value that update returns
    (``Identity`` of the operand, ``AddV2``/``Sub`` of constant and operand).

    A frozen graph keeps no state; the serving outputs may read such updates (the
    exploration's timestep, with ``tf1.disable_v2_behavior()``'s ref variables),
    and an update of a constant does not import. Returns the number rewritten.
    """
    consts = {n.name for n in graph_def.node if n.op == "Const"}
    count = 0
    for node in graph_def.node:
        if node.op not in _REF_ASSIGN_RESULT or node.input[0].split(":")[0] not in consts:
            continue
        result_op = _REF_ASSIGN_RESULT[node.op]
        dtype = node.attr["T"].type
        operands = list(node.input[:2]) if result_op else [node.input[1]]
        controls = [i for i in node.input if i.startswith("^")]
        name, device = node.name, node.device
        node.Clear()
        node.name, node.op, node.device = name, result_op or "Identity", device
        node.input.extend(operands + controls)
        node.attr["T"].type = dtype
        count += 1
    return count


def import_tf2onnx() -> Any:
    """Imports ``tf2onnx`` (for the graph and the eager ONNX export).

    Raises:
        RuntimeError: If ``tf2onnx`` is not installed.
    """
    try:
        import tf2onnx
    except ImportError as e:
        raise RuntimeError(
            "Converting a TensorFlow model to ONNX requires `tf2onnx` to be "
            "installed. Install with `pip install tf2onnx`."
        ) from e
    return tf2onnx


def save_onnx(sess: Any, export_dir: str, signature_def_map: Dict[str, Any], opset: int) -> str:
    """Freezes the serving graph and converts it to ``<export_dir>/saved_model.onnx``.

    The ONNX inputs and outputs are named like the graph tensors of the
    signature (e.g. ``"obs:0"``, ``"state_in_0:0"``, ``"seq_lens:0"``); inputs
    the outputs do not read (e.g. ``is_training``) are left out. Recurrent
    policies work too: their loops are kept functional and freed of the
    gradient accumulators tf2onnx cannot convert. As in RLlib 1.11, image
    (4-D) observations are ONNX inputs in NCHW layout.

    Returns:
        The path of the ONNX file.

    Raises:
        RuntimeError: If ``tf2onnx`` is not installed.
    """
    tf2onnx = import_tf2onnx()
    tf1, tf = _tf()
    sd = signature_def_map[tf1.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
    inputs, outputs = (
        [v.name for _, v in sorted(sd.inputs.items())],
        [v.name for _, v in sorted(sd.outputs.items())],
    )
    frozen = freeze_serving_graph(sess, outputs)
    # Inputs the outputs do not depend on (e.g. is_training) are not in the graph.
    present = {node.name for node in frozen.node}
    inputs = [n for n in inputs if n.split(":")[0] in present]
    os.makedirs(export_dir, exist_ok=True)
    path = os.path.join(export_dir, ONNX_FILE_NAME + ".onnx")
    with tf.Graph().as_default():  # tf2onnx reads the graph def in graph mode
        # RLlib 1.11: image (4-D) inputs are exposed channels-first (NCHW).
        ranks = {
            node.name: len(node.attr["shape"].shape.dim) for node in frozen.node if node.op == "Placeholder"
        }
        nchw = [n for n in inputs if ranks.get(n.split(":")[0]) == 4]
        tf2onnx.convert.from_graph_def(
            frozen,
            input_names=inputs,
            output_names=outputs,
            opset=int(opset),
            output_path=path,
            inputs_as_nchw=nchw,
        )
    return path


def save_checkpoint(sess: Any, saver: Any, export_dir: str, filename_prefix: str) -> str:
    """``saver.save(sess, <export_dir>/<filename_prefix>)``, creating ``export_dir``.

    Returns:
        The checkpoint path prefix.
    """
    os.makedirs(export_dir, exist_ok=True)
    save_path = os.path.join(export_dir, filename_prefix)
    with sess.graph.as_default():
        return saver.save(sess, save_path)
