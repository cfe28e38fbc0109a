"""Preparing the functional control flow of a frozen TF1 graph for tf2onnx.

Two things stop tf2onnx from converting the loops of a ``tf1.Session``
graph (e.g. the time loop of ``keras.layers.LSTM`` in a recurrent
``TFPolicy``) into a model onnxruntime loads:

* Ops built in a TF1 graph carry ``_lower_using_switch_merge=True``, so
  grappler (which tf2onnx runs first) lowers ``While``/``If`` into TF1
  ``Switch``/``Merge`` loops whose ``TensorList`` ops tf2onnx cannot rewrite.
  :func:`keep_functional_control_flow` clears the flag (tf2onnx does the same
  when it freezes a ``tf.function`` itself).
* Keras layers built in a TF1 graph make their ``While`` loops output every
  intermediate value for later gradients: each becomes an extra loop
  variable, an ``EmptyTensorList`` the body appends to with
  ``TensorListPushBack``; taking gradients rewrites the forward loop the same
  way. For serving these accumulators are dead, but tf2onnx has no
  conversion for them. :func:`prune_dead_loop_vars` drops every loop
  variable (past the leading loop counter and maximum_iterations) whose
  loop output is unused, which the loop condition does not read, and whose
  value in the body only flows into its own next value. The
  rewritten body/condition functions are added to the function library under
  new names; each loop computes exactly what it computed before.

Only protobufs are handled here: no framework is imported at module level.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set

_WHILE_OPS = ("While", "StatelessWhile")
_LOWER_ATTR = "_lower_using_switch_merge"
# A while_v2 loop starts with the loop counter and maximum_iterations; tf2onnx
# reads them by position, so they always stay.
_FIXED_LOOP_VARS = 2


def _source(ref: str) -> str:
    """The node (or function argument) name an input reference reads from."""
    return ref.lstrip("^").split(":")[0]


def _graph_output_index(ref: str) -> int:
    """The output index of a graph-level data reference ``"node"`` / ``"node:k"``."""
    _, _, idx = ref.partition(":")
    return int(idx) if idx else 0


def _downstream(fdef: Any, start: str) -> Set[str]:
    """Names of the nodes of ``fdef`` that (transitively) read from ``start``."""
    consumers: Dict[str, List[str]] = {}
    for node in fdef.node_def:
        for ref in node.input:
            consumers.setdefault(_source(ref), []).append(node.name)
    seen: Set[str] = set()
    stack = [start]
    while stack:
        for name in consumers.get(stack.pop(), []):
            if name not in seen:
                seen.add(name)
                stack.append(name)
    return seen


def _reads(fdef: Any, name: str) -> bool:
    """Whether any node or return value of ``fdef`` reads ``name``."""
    return any(_source(ref) == name for node in fdef.node_def for ref in node.input) or any(
        _source(ref) == name for ref in fdef.ret.values()
    )


def _dead_nodes(body: Any, cond: Any, i: int) -> Optional[Set[str]]:
    """The body nodes to delete with loop variable ``i``, or None if it is live."""
    arg = body.signature.input_arg[i].name
    if _reads(cond, cond.signature.input_arg[i].name):
        return None
    closure = _downstream(body, arg)
    tainted = closure | {arg}
    own = body.signature.output_arg[i].name
    for out_name, ref in body.ret.items():
        if out_name != own and _source(ref) in tainted:
            return None
    if any(_source(ref) in closure for ref in body.control_ret.values()):
        return None
    return closure


def _copy_function(fdef: Any, name: str, keep: List[int], drop_nodes: Set[str], outputs: bool) -> Any:
    """A copy of ``fdef`` named ``name`` with only the arguments (and, for a
    body, outputs) at indices ``keep`` and without the nodes ``drop_nodes``."""
    new = type(fdef)()
    new.CopyFrom(fdef)
    new.signature.name = name
    args = [fdef.signature.input_arg[k] for k in keep]
    del new.signature.input_arg[:]
    new.signature.input_arg.extend(args)
    new.arg_attr.clear()
    new.resource_arg_unique_id.clear()
    for new_k, old_k in enumerate(keep):
        if old_k in fdef.arg_attr:
            new.arg_attr[new_k].CopyFrom(fdef.arg_attr[old_k])
        if old_k in fdef.resource_arg_unique_id:
            new.resource_arg_unique_id[new_k] = fdef.resource_arg_unique_id[old_k]
    if outputs:
        kept_out = [fdef.signature.output_arg[k] for k in keep]
        dropped = {a.name for a in fdef.signature.output_arg} - {a.name for a in kept_out}
        del new.signature.output_arg[:]
        new.signature.output_arg.extend(kept_out)
        for out_name in dropped:
            del new.ret[out_name]
    nodes = [n for n in fdef.node_def if n.name not in drop_nodes]
    del new.node_def[:]
    new.node_def.extend(nodes)
    return new


def _unique_name(base: str, taken: Set[str]) -> str:
    name, k = f"{base}_pruned", 0
    while name in taken:
        k += 1
        name = f"{base}_pruned_{k}"
    taken.add(name)
    return name


def _update_while_node(node: Any, keep: List[int], n: int, body: str, cond: str) -> None:
    """Keeps loop variables ``keep`` (of ``n``) on the While ``node`` itself."""
    refs = list(node.input)
    data, control = refs[:n], refs[n:]
    del node.input[:]
    node.input.extend([data[k] for k in keep] + control)
    types = list(node.attr["T"].list.type)
    del node.attr["T"].list.type[:]
    node.attr["T"].list.type.extend([types[k] for k in keep])
    for key in ("output_shapes", "_output_shapes"):
        if key in node.attr and len(node.attr[key].list.shape) == n:
            shapes = list(node.attr[key].list.shape)
            del node.attr[key].list.shape[:]
            node.attr[key].list.shape.extend([shapes[k] for k in keep])
    if "_num_original_outputs" in node.attr:
        original = node.attr["_num_original_outputs"].i
        node.attr["_num_original_outputs"].i = sum(1 for k in keep if k < original)
    if "_read_only_resource_inputs" in node.attr:
        new_index = {old: new for new, old in enumerate(keep)}
        indices = [new_index[k] for k in node.attr["_read_only_resource_inputs"].list.i if k in new_index]
        del node.attr["_read_only_resource_inputs"].list.i[:]
        node.attr["_read_only_resource_inputs"].list.i.extend(indices)
    node.attr["body"].func.name = body
    node.attr["cond"].func.name = cond


def _renumber_consumers(graph_def: Any, while_name: str, keep: List[int]) -> None:
    new_index = {old: new for new, old in enumerate(keep)}
    for node in graph_def.node:
        for j, ref in enumerate(node.input):
            if not ref.startswith("^") and _source(ref) == while_name:
                k = new_index[_graph_output_index(ref)]
                node.input[j] = while_name if k == 0 else f"{while_name}:{k}"


def _prune_one(graph_def: Any, node: Any, used: Set[int], functions: Dict[str, Any], taken: Set[str]) -> bool:
    """Prunes the dead loop variables of one While ``node``; True if any were removed."""
    body = functions.get(node.attr["body"].func.name)
    cond = functions.get(node.attr["cond"].func.name)
    n = len(node.attr["T"].list.type)
    if (
        body is None
        or cond is None
        or len(body.signature.input_arg) != n
        or len(body.signature.output_arg) != n
        or len(cond.signature.input_arg) != n
    ):
        return False
    keep, drop_nodes = [], set()
    for i in range(n):
        dead = None if i < _FIXED_LOOP_VARS or i in used else _dead_nodes(body, cond, i)
        if dead is None:
            keep.append(i)
        else:
            drop_nodes |= dead
    if len(keep) == n:
        return False
    new_body = _copy_function(body, _unique_name(body.signature.name, taken), keep, drop_nodes, outputs=True)
    new_cond = _copy_function(cond, _unique_name(cond.signature.name, taken), keep, set(), outputs=False)
    graph_def.library.function.extend([new_body, new_cond])
    functions[new_body.signature.name] = new_body
    functions[new_cond.signature.name] = new_cond
    _update_while_node(node, keep, n, new_body.signature.name, new_cond.signature.name)
    _renumber_consumers(graph_def, node.name, keep)
    return True


def prune_dead_loop_vars(graph_def: Any, outputs: Sequence[str] = ()) -> Any:
    """A copy of ``graph_def`` whose top-level While ops carry no dead loop variables.

    Args:
        graph_def: A ``tf.compat.v1.GraphDef`` (e.g. a frozen serving graph).
        outputs: Tensor names (``"node:k"``) read from the graph; a loop
            output named here is live.

    Returns:
        The pruned copy (``graph_def`` itself is not changed). Producers of
        removed loop inputs stay in it; extract the serving sub-graph again
        to drop them.
    """
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    functions = {f.signature.name: f for f in out.library.function}
    taken = set(functions)
    for node in out.node:
        if node.op not in _WHILE_OPS:
            continue
        refs = [ref for other in out.node for ref in other.input] + list(outputs)
        used = {
            _graph_output_index(ref) for ref in refs if not ref.startswith("^") and _source(ref) == node.name
        }
        _prune_one(out, node, used, functions, taken)
    return out


def keep_functional_control_flow(graph_def: Any) -> None:
    """Clears ``_lower_using_switch_merge`` on every op of ``graph_def`` (in place),
    its function library included, so grappler keeps ``While``/``If`` functional."""
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    for node in nodes:
        if _LOWER_ATTR in node.attr:
            node.attr[_LOWER_ATTR].b = False


__all__ = ["keep_functional_control_flow", "prune_dead_loop_vars"]
