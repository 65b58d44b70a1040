"""The XNNPACK backend's runtime half: runs ExecuTorch XNNPACK delegate blobs with NumPy.

``init`` parses the blob, resolves constants as zero-copy views (of the blob or
of the program's named data), prepacks weights, and compiles the node list into
planners. A planner, given the arrays of its inputs at concrete shapes,
allocates its outputs and returns bound steps (BLAS calls and ufuncs writing
into preallocated memory). A plan (the steps for one set of input shapes) is
built once and reused; a call with new input shapes builds a new one, which is
how XNNPACK graphs reshape at run time. Inside the graph, convolutions and
pooling work on NHWC tensors; ExecuTorch's lowering inserts the transposes from
and to the NCHW tensors the delegate exchanges with the program.

Imports only the standard library, NumPy and the format code; registers itself
as ``XnnpackBackend`` at import.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import BlobError, XnnpackBlob, parse_blob
from edgetorch.backends.xnnpack.runtime.epilogues import clamp_steps, min_max
from edgetorch.backends.xnnpack.runtime.memory import RUN, Env, Planner
from edgetorch.backends.xnnpack.runtime.planners import APPLY_ACTIVATION, FLOAT_PLANNERS
from edgetorch.backends.xnnpack.runtime.quantization import qbounds, same_tensor_params
from edgetorch.backends.xnnpack.runtime.quantized_nodes import quantized_node
from edgetorch.backends.xnnpack.runtime.values import Graph, Unsupported, read_ids
from edgetorch.errors import DelegateLoadError, InvalidInputError
from edgetorch.runtime import etdump
from edgetorch.runtime.backends import BackendInterface, register_backend
from edgetorch.runtime.kernels import blas_threads
from edgetorch.runtime.kernels import compiled as compiled_kernels
from edgetorch.runtime.memory import resize

_MAX_PLANS = 8


def _reader_counts(reads: list) -> Counter:
    """Value id -> how many nodes read it (``reads``: each node's read value ids)."""
    return Counter(vid for r in reads for vid in set(r))


def fuse_clamps(g: Graph, xnodes: list, reads: list) -> None:
    """Record in ``g.narrow`` each quantized clamp that is the only reader of its input, between equal
    per-tensor parameters: the input's producer clips to the clamp's bounds when it rounds, and the
    clamp passes its input on (ExecuTorch's static int8 lowering keeps ReLU6 as a node of its own)."""
    readers = _reader_counts(reads)
    for node in xnodes:
        n = node.xnode_union
        if not isinstance(n, xs.XNNClamp) or readers.get(n.input_id) != 1 or n.input_id in g.needs_int8:
            continue
        qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)
        if qin is not None and qout is not None and same_tensor_params(qin, qout):
            lo, hi = min_max(node)
            g.narrow[n.input_id] = qbounds(g.dtype(n.output_id), qout.scale, qout.zero_point, lo, hi)


def _compile_node(index: int, node: xs.XNode, g: Graph) -> Planner:
    n = node.xnode_union
    kind = type(n).__name__ if n is not None else "an empty node"
    if n is not None and any(v in g.quant for v in read_ids(n) + [getattr(n, "output_id", xs.INVALID_VALUE_ID)]):
        try:
            return _named_planner(index, kind, quantized_node(n, node, g))
        except Unsupported as e:
            raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    compiler = FLOAT_PLANNERS.get(type(n))
    if compiler is None:
        raise DelegateLoadError(
            f"XNNPACK node {index} ({kind}) is not supported by edgetorch's XNNPACK runtime; "
            "run this program with ExecuTorch or lower the model without this operator in the partition"
        )
    lo, hi = min_max(node)
    try:
        if type(n) in APPLY_ACTIVATION:  # the layer clamps its own output, with its bias where it can
            return _named_planner(index, kind, compiler(n, node, g, (lo, hi)))  # type: ignore[call-arg]
        planner = compiler(n, node, g)
    except Unsupported as e:
        raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    if isinstance(n, xs.XNNClamp) or (lo == -math.inf and hi == math.inf):
        return _named_planner(index, kind, planner)

    def with_activation(env: Env) -> list:
        steps = planner(env)
        y = env[n.output_id]
        return steps + clamp_steps(y, y, lo, hi)

    return _named_planner(index, kind, with_activation)


# Float nodes that write a fresh output buffer, so that a clamp reading only them can clamp it in place.
_CLAMP_FUSABLE = (*APPLY_ACTIVATION, xs.XNNConvTranspose2d, xs.XNNBatchMatrixMultiply)


def fuse_float_clamps(g: Graph, xnodes: list, reads: list) -> list:
    """The nodes to compile: ``xnodes`` with each float clamp that is the only reader of a fresh-output
    node's (with no activation of its own) moved into that node's output bounds, and the clamp itself made a
    copy (which shares its input's memory). ExecuTorch fuses ReLU/ReLU6 into the layer when it lowers;
    edgetorch's lowering keeps a clamp node, which costs a pass over the layer's output and, in the fast
    tier, is free inside the layer's own last pass."""
    readers = _reader_counts(reads)
    producer = {getattr(node.xnode_union, "output_id", None): i for i, node in enumerate(xnodes)}
    external = {vid for _, vid in g.inputs + g.outputs}
    nodes = list(xnodes)
    for i, node in enumerate(xnodes):
        n: Any = node.xnode_union
        if not isinstance(n, xs.XNNClamp) or readers.get(n.input_id) != 1 or n.input_id in external:
            continue
        p = producer.get(n.input_id)
        if p is None or p > i or not isinstance(nodes[p].xnode_union, _CLAMP_FUSABLE):
            continue
        if nodes[p].output_min_max is not None or n.input_id in g.quant or n.output_id in g.quant:
            continue
        if g.dtype(n.input_id).kind != "f":
            continue
        nodes[p] = dataclasses.replace(nodes[p], output_min_max=node.output_min_max)
        copy = xs.XNNCopy(n.input_id, n.output_id, n.flags)
        nodes[i] = dataclasses.replace(node, xnode_union=copy, output_min_max=None)
    return nodes


def _named_planner(index: int, kind: str, planner: Planner) -> Planner:
    """Make plan-time failures name the node they come from."""

    def plan(env: Env) -> list:
        try:
            return planner(env)
        except (ValueError, Unsupported) as e:
            raise _PlanError(f"XNNPACK node {index} ({kind}): {e}") from None

    return plan


class _PlanError(Exception):
    """Building a plan failed; the message names the node. Raised as a load or an input error by the caller."""


@dataclass
class _Plan:
    """The bound steps for one set of input shapes."""

    inputs: list  # arrays the external inputs are copied into
    steps: list
    outputs: list  # arrays holding the external outputs after the steps run
    ends: list = field(default_factory=list)  # per node: the index after its last step (for traced runs)


class XnnpackDelegate:
    """One initialised delegate: its graph, its compiled nodes and a plan per input-shape set."""

    def __init__(self, blob: XnnpackBlob, named_data: Mapping[str, memoryview]):
        self.graph = Graph(blob, named_data)
        self.xnodes = list(blob.graph.xnodes)
        self.graph.needs_int8 = {vid for _, vid in self.graph.outputs} | {
            vid
            for node in blob.graph.xnodes
            if isinstance(node.xnode_union, xs.XNNConvert)
            for vid in read_ids(node.xnode_union)
        }
        self.graph.fc_inputs = {
            node.xnode_union.input1_id
            for node in blob.graph.xnodes
            if isinstance(node.xnode_union, xs.XNNFullyConnected)
        }
        self.reads = [read_ids(node.xnode_union) for node in blob.graph.xnodes]
        fuse_clamps(self.graph, self.xnodes, self.reads)
        compiled = fuse_float_clamps(self.graph, self.xnodes, self.reads)
        self.planners = [_compile_node(i, node, self.graph) for i, node in enumerate(compiled)]
        self.last_use = {vid: i for i, reads in enumerate(self.reads) for vid in reads}
        self.external = {vid for _, vid in self.graph.inputs + self.graph.outputs}
        self.plans: OrderedDict[tuple, _Plan] = OrderedDict()
        declared = tuple(tuple(self.graph.value(vid).dims) for _, vid in self.graph.inputs)
        try:
            with RUN:
                self.plan(declared)
        except _PlanError as e:
            raise DelegateLoadError(str(e)) from None

    def plan(self, shapes: tuple) -> _Plan:
        """The steps for external inputs of ``shapes``, built on first use and cached."""
        plan = self.plans.get(shapes)
        if plan is not None:
            return plan
        env = Env(self.graph, self.last_use, self.external)
        inputs = [env.empty(vid, shape) for (_, vid), shape in zip(self.graph.inputs, shapes)]
        steps, ends = [], []
        for index, (planner, reads) in enumerate(zip(self.planners, self.reads)):
            steps += planner(env)
            ends.append(len(steps))
            env.release(index, reads)
        plan = _Plan(inputs, steps, [env[vid] for _, vid in self.graph.outputs], ends)
        if any(compiled_kernels.splits(step) for step in steps):  # numba's threads run: BLAS's pool waits
            self.graph.own_threads = True
        self.plans[shapes] = plan
        if len(self.plans) > _MAX_PLANS:
            self.plans.popitem(last=False)
        return plan

    def execute(self, args: Sequence[Any]) -> list | None:
        """Run on ``args`` (inputs then outputs); returns the outputs only when their shapes changed."""
        if len(args) < self.graph.arg_count:
            raise InvalidInputError(
                f"the XNNPACK delegate takes {self.graph.arg_count} arguments (inputs then outputs), got {len(args)}"
            )
        ins = [args[ext] for ext, _ in self.graph.inputs]
        shapes = tuple(np.shape(a) for a in ins)
        with RUN:
            try:
                plan = self.plan(shapes)
            except _PlanError as e:
                raise InvalidInputError(
                    f"the XNNPACK delegate cannot run inputs of shapes {list(shapes)}: {e}"
                ) from None
            for dst, src in zip(plan.inputs, ins):
                np.copyto(dst, src)
            with blas_threads.held(self.graph.own_threads):
                if etdump.tracing():
                    self._traced(plan)
                else:
                    for step in plan.steps:
                        step()
            return self._write_outputs(plan, args)

    def _traced(self, plan: _Plan) -> None:
        """Run the steps node by node, logging each node as a delegate event keyed by its debug handle
        (the identifier the delegate map of the ETRecord resolves), named after its node kind."""
        start = 0
        for node, end in zip(self.xnodes, plan.ends):
            t0 = etdump.clock_ns()
            for step in plan.steps[start:end]:
                step()
            kind = type(node.xnode_union).__name__
            etdump.event_tracer_log_profiling_delegate(kind, node.debug_handle, t0, etdump.clock_ns())
            start = end

    def _write_outputs(self, plan: _Plan, args: Sequence[Any]) -> list | None:
        results, resized = [], False
        for (ext, _), value in zip(self.graph.outputs, plan.outputs):
            dst = args[ext]
            if dst.shape != value.shape:
                resized = True
                dst = resize(dst, value.shape)
            np.copyto(dst, value)
            results.append(dst)
        return results if resized else None


class XnnpackBackend(BackendInterface):
    """ExecuTorch's XnnpackBackend, run with NumPy."""

    def init(
        self, processed: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
    ) -> XnnpackDelegate:
        try:
            blob = parse_blob(processed)
        except BlobError as e:
            raise DelegateLoadError(f"cannot load the XNNPACK delegate: {e}") from None
        return XnnpackDelegate(blob, named_data)

    def execute(self, handle: XnnpackDelegate, args: Sequence[Any]) -> list | None:
        return handle.execute(args)


register_backend("XnnpackBackend", XnnpackBackend())
