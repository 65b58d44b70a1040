"""Element-wise chains of a language model's layers, each run as one step.

* **RMSNorm.** The six nodes ExecuTorch's XNNPACK partitioner lowers ``w * (x * rsqrt(mean(x ** 2, -1) + eps))`` to
  in edgetorch's LLMs (square, a fully connected layer whose weights are all 1 / K for the mean, add, reciprocal
  square root, multiply, multiply) become one node whose step is the op layer's RMSNorm
  (runtime/ops/normalization.py: one compiled pass on the fast tier). The result differs from the unfused
  nodes' by rounding only: the mean is the row's sum divided by K, where the fully connected layer summed the
  squares times 1 / K.
* **SwiGLU.** ``silu(g) * u`` (sigmoid, multiply by g, multiply by u) becomes one node whose step is the op
  layer's (runtime/ops/activation.py).

A decode step of SmolLM2 runs 61 norms and 30 gates on one row each, where a dozen NumPy calls cost more than
their arithmetic. A chain is fused only where each intermediate value is read by the next node alone and is
neither an external value nor quantized, every value is float32, no node has a clamp, and the constants are what
the pattern says; anything else keeps its nodes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.memory import Env, Planner
from edgetorch.backends.xnnpack.runtime.values import Graph, Unsupported, readers_of
from edgetorch.runtime.ops import activation, normalization


@dataclasses.dataclass(frozen=True)
class RmsNorm:
    """``output = input2 * (input * rsqrt(mean(input ** 2, -1) + input3))``: ``input2_id`` the weight [K],
    ``input3_id`` the one-element epsilon (field names as the schema's, so ``read_ids`` reads them)."""

    input_id: int
    input2_id: int
    input3_id: int
    output_id: int
    flags: int = 0


@dataclasses.dataclass(frozen=True)
class SwiGlu:
    """``output = silu(input1) * input2`` (field names as the schema's, so ``read_ids`` reads them)."""

    input1_id: int
    input2_id: int
    output_id: int
    flags: int = 0


@dataclasses.dataclass(frozen=True)
class Absorbed:
    """A node whose work a fused node later in the graph does: it has no step and its output is never made."""

    output_id: int
    flags: int = 0


def _other(n: Any, vid: int) -> int | None:
    """The other input of binary node ``n``, one of whose inputs is ``vid``."""
    if n.input1_id == vid:
        return n.input2_id  # type: ignore[no-any-return]
    return n.input1_id if n.input2_id == vid else None  # type: ignore[no-any-return]


def fuse_chains(g: Graph, nodes: list, reads: list) -> list:
    """``nodes`` with every RMSNorm and SwiGLU chain made one node (``RmsNorm``, ``SwiGlu``) at the chain's last
    node and ``Absorbed`` nodes before it; ``reads`` is updated to match (the fused node reads the chain's
    inputs)."""
    readers = readers_of(reads)
    external = {vid for _, vid in g.inputs + g.outputs}
    out = list(nodes)

    def only_reader(vid: int, kind: type) -> tuple[int, Any] | None:
        users = readers.get(vid, [])
        if len(users) != 1 or vid in external or vid in g.quant or g.dtype(vid) != np.float32:
            return None
        node = out[users[0]]
        n = node.xnode_union
        if not isinstance(n, kind) or node.output_min_max is not None or n.output_id in g.quant:
            return None
        return users[0], n

    for i, node in enumerate(nodes):
        sq = node.xnode_union
        if not isinstance(sq, xs.XNNSquare) or node.output_min_max is not None:
            continue
        x = sq.input_id
        if x in g.quant or g.dtype(x) != np.float32 or not g.value(x).dims:
            continue
        k = int(g.value(x).dims[-1])
        chain = [i]
        step = only_reader(sq.output_id, xs.XNNFullyConnected)
        if step is None:
            continue
        j, fc = step
        w_mean = g.constants.get(fc.filter_id)
        if (
            fc.input1_id != sq.output_id
            or fc.bias_id != xs.INVALID_VALUE_ID
            or w_mean is None
            or w_mean.shape != (1, k)
            or w_mean.dtype != np.float32
            or not np.all(w_mean == np.float32(1 / k))
        ):
            continue
        chain.append(j)
        found = only_reader(fc.output_id, xs.XNNAdd)
        if found is None:
            continue
        j, add = found
        eps = _other(add, fc.output_id)
        if eps is None or eps not in g.constants or g.constants[eps].size != 1 or g.dtype(eps) != np.float32:
            continue
        chain.append(j)
        found = only_reader(add.output_id, xs.XNNReciprocalSquareRoot)
        if found is None:
            continue
        j, rsqrt = found
        chain.append(j)
        found = only_reader(rsqrt.output_id, xs.XNNMultiply)
        if found is None or _other(found[1], rsqrt.output_id) != x:
            continue
        j, scaled = found
        chain.append(j)
        found = only_reader(scaled.output_id, xs.XNNMultiply)
        if found is None:
            continue
        j, last = found
        w = _other(last, scaled.output_id)
        if w is None or w not in g.constants or g.constants[w].shape != (k,) or g.dtype(w) != np.float32:
            continue
        for a in chain:
            out[a] = dataclasses.replace(out[a], xnode_union=Absorbed(out[a].xnode_union.output_id))
            reads[a] = []
        out[j] = dataclasses.replace(out[j], xnode_union=RmsNorm(x, w, eps, last.output_id))
        reads[j] = [x, w, eps]

    for i, node in enumerate(nodes):
        sig = node.xnode_union
        if not isinstance(sig, xs.XNNSigmoid) or node.output_min_max is not None or out[i].xnode_union is not sig:
            continue
        gate = sig.input_id
        if gate in g.quant or g.dtype(gate) != np.float32:
            continue
        found = only_reader(sig.output_id, xs.XNNMultiply)
        if found is None or _other(found[1], sig.output_id) != gate:
            continue
        j, silu = found
        found = only_reader(silu.output_id, xs.XNNMultiply)
        if found is None:
            continue
        end, last = found
        up = _other(last, silu.output_id)
        if up is None or up in g.quant or g.dtype(up) != np.float32 or g.value(up).dims != g.value(gate).dims:
            continue
        for a in (i, j):
            out[a] = dataclasses.replace(out[a], xnode_union=Absorbed(out[a].xnode_union.output_id))
            reads[a] = []
        out[end] = dataclasses.replace(out[end], xnode_union=SwiGlu(gate, up, last.output_id))
        reads[end] = [gate, up]
    return out


def _rms_norm(n: RmsNorm, node: xs.XNode, g: Graph) -> Planner:
    def plan(env: Env) -> list:
        x, w, eps = env[n.input_id], env[n.input2_id], env[n.input3_id]
        if not x.ndim or x.shape[-1] != w.shape[0]:  # what the fully connected mean and the multiplies checked
            raise Unsupported(f"its input {list(x.shape)} does not end in the weight's {w.shape[0]} channels")
        return [normalization.rms_norm(x, w, eps, env.empty(n.output_id, x.shape))]

    return plan


def _swiglu(n: SwiGlu, node: xs.XNode, g: Graph) -> Planner:
    def plan(env: Env) -> list:
        gate, up = env[n.input1_id], env[n.input2_id]
        if gate.shape != up.shape:
            raise Unsupported(f"its gate {list(gate.shape)} and up {list(up.shape)} differ in shape")
        return [activation.swiglu(gate, up, env.empty(n.output_id, gate.shape))]

    return plan


def _absorbed(n: Absorbed, node: xs.XNode, g: Graph) -> Planner:
    return lambda env: []


PLANNERS = {RmsNorm: _rms_norm, SwiGlu: _swiglu, Absorbed: _absorbed}
