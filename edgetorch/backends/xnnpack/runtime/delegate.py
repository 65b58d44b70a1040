"""The XNNPACK delegate: compiles a blob's nodes into planners at init, builds the schedule (the bound steps)
for each set of input shapes and runs it; ``XnnpackBackend`` is the BackendInterface the program calls.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import BlobError, XnnpackBlob, parse_blob
from edgetorch.backends.xnnpack.runtime.blocks import fuse_blocks
from edgetorch.backends.xnnpack.runtime.chains import fuse_chains
from edgetorch.backends.xnnpack.runtime.clamps import fuse_clamps, fuse_float_clamps
from edgetorch.backends.xnnpack.runtime.epilogues import min_max, with_activation
from edgetorch.backends.xnnpack.runtime.float_layers import packs_in_place
from edgetorch.backends.xnnpack.runtime.memory import RUN, Env, Planner
from edgetorch.backends.xnnpack.runtime.pads import fold_pads
from edgetorch.backends.xnnpack.runtime.planners import APPLY_ACTIVATION, FLOAT_PLANNERS
from edgetorch.backends.xnnpack.runtime.quantized_nodes import quantized_node
from edgetorch.backends.xnnpack.runtime.values import Graph, Unsupported, read_ids
from edgetorch.errors import DelegateLoadError, InvalidInputError
from edgetorch.runtime import etdump, policy
from edgetorch.runtime.backends import BackendInterface
from edgetorch.runtime.kernels import blas_threads
from edgetorch.runtime.kernels import compiled as compiled_kernels
from edgetorch.runtime.memory import resize
from edgetorch.runtime.plan_analysis import last_reads

_MAX_SCHEDULES = 8


def _kind(node: xs.XNode) -> str:
    n = node.xnode_union
    return type(n).__name__ if n is not None else "an empty node"


def _compile_node(index: int, node: xs.XNode, g: Graph) -> Planner:
    n, kind = node.xnode_union, _kind(node)
    if n is not None and any(v in g.quant for v in read_ids(n) + [getattr(n, "output_id", xs.INVALID_VALUE_ID)]):
        try:
            return quantized_node(n, node, g)
        except Unsupported as e:
            raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    compiler = FLOAT_PLANNERS.get(type(n))
    if compiler is None:
        raise DelegateLoadError(
            f"XNNPACK node {index} ({kind}) is not supported by edgetorch's XNNPACK runtime; "
            "run this program with ExecuTorch or lower the model without this operator in the partition"
        )
    try:
        if type(n) in APPLY_ACTIVATION:  # the layer clamps its own output, with its bias where it can
            return compiler(n, node, g, min_max(node))  # type: ignore[call-arg]
        planner = compiler(n, node, g)
    except Unsupported as e:
        raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    return with_activation(n, node, planner)


class _ScheduleError(Exception):
    """Building a schedule failed; the message names the node. Raised as a load or an input error by the caller."""


@dataclass
class _Schedule:
    """The bound steps for one set of input shapes."""

    inputs: list  # arrays the external inputs are copied into
    steps: list
    outputs: list  # arrays holding the external outputs after the steps run
    ends: list = field(default_factory=list)  # per node: the index after its last step (for traced runs)
    own_threads: bool = False  # whether BLAS keeps to one thread while the steps run (compiled.own_threads)
    blas: blas_threads.Adaptive = field(default_factory=blas_threads.Adaptive)  # else: its threads or one, as timed


class XnnpackDelegate:
    """One initialised delegate: its graph, its compiled nodes and a schedule per input-shape set."""

    def __init__(self, blob: XnnpackBlob, named_data: Mapping[str, memoryview]):
        self.graph = Graph(blob, named_data)
        self.xnodes = fold_pads(self.graph, list(blob.graph.xnodes))
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
        self.graph.packs_in_place = packs_in_place(self.graph, self.xnodes)
        self.reads = [read_ids(node.xnode_union) for node in self.xnodes]
        fuse_clamps(self.graph, self.xnodes, self.reads)
        compiled = fuse_chains(self.graph, fuse_float_clamps(self.graph, self.xnodes, self.reads), self.reads)
        # The nodes as compiled, after the load-time fusions (a fused node at its last node, Absorbed before it).
        self.compiled_nodes = fuse_blocks(self.graph, compiled, self.reads)
        self.planners = [_compile_node(i, node, self.graph) for i, node in enumerate(self.compiled_nodes)]
        self.last_use = last_reads(self.reads)
        # Per node, the values it is the last to read: the only ones whose memory can go back to the pool after it.
        self.dying = [[v for v in dict.fromkeys(r) if self.last_use[v] == i] for i, r in enumerate(self.reads)]
        self.external = {vid for _, vid in self.graph.inputs + self.graph.outputs}
        self.schedules: OrderedDict[tuple, _Schedule] = OrderedDict()
        declared = tuple(tuple(self.graph.value(vid).dims) for _, vid in self.graph.inputs)
        try:
            with RUN:
                self.schedule(declared)
        except _ScheduleError as e:
            raise DelegateLoadError(str(e)) from None

    def schedule(self, shapes: tuple) -> _Schedule:
        """The steps for external inputs of ``shapes``, built on first use and cached."""
        schedule = self.schedules.get(shapes)
        if schedule is not None:
            return schedule
        env = Env(self.graph, self.last_use, self.external)
        inputs = [env.empty(vid, shape) for (_, vid), shape in zip(self.graph.inputs, shapes)]
        # On the tier the delegate loaded with (Graph.compiled), also for the op layer's step builders, which
        # ask the policy: a policy changed since the load does not mix tiers within the delegate.
        with policy.using(compiled=self.graph.compiled):
            steps, ends = self._steps(env)
        outputs = [env[vid] for _, vid in self.graph.outputs]
        schedule = _Schedule(inputs, steps, outputs, ends, compiled_kernels.own_threads(steps))
        self.schedules[shapes] = schedule
        if len(self.schedules) > _MAX_SCHEDULES:
            self.schedules.popitem(last=False)
        return schedule

    def _steps(self, env: Env) -> tuple[list, list]:
        """Every node's steps on ``env``'s arrays, and per node the index after its last step."""
        steps: list = []
        ends: list = []
        index = 0
        try:
            for index, (planner, dying) in enumerate(zip(self.planners, self.dying)):
                steps += planner(env)
                ends.append(len(steps))
                if dying or env.working:
                    env.release(index, dying)
        except (ValueError, Unsupported) as e:  # named after the node it comes from
            raise _ScheduleError(f"XNNPACK node {index} ({_kind(self.compiled_nodes[index])}): {e}") from None
        return steps, ends

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
                schedule = self.schedule(shapes)
            except _ScheduleError as e:
                raise InvalidInputError(
                    f"the XNNPACK delegate cannot run inputs of shapes {list(shapes)}: {e}"
                ) from None
            for dst, src in zip(schedule.inputs, ins):
                np.copyto(dst, src)
            with blas_threads.held(schedule.own_threads, schedule.blas):
                if etdump.tracing():
                    self._traced(schedule)
                else:
                    for step in schedule.steps:
                        step()
            return self._write_outputs(schedule, args)

    def _traced(self, schedule: _Schedule) -> None:
        """Run the steps node by node, logging each node as a delegate event keyed by its debug handle
        (the identifier the delegate map of the ETRecord resolves), named after its node kind."""
        start = 0
        for node, end in zip(self.xnodes, schedule.ends):
            t0 = etdump.clock_ns()
            for step in schedule.steps[start:end]:
                step()
            kind = type(node.xnode_union).__name__
            etdump.event_tracer_log_profiling_delegate(kind, node.debug_handle, t0, etdump.clock_ns())
            start = end

    def _write_outputs(self, schedule: _Schedule, args: Sequence[Any]) -> list | None:
        results, resized = [], False
        for (ext, _), value in zip(self.graph.outputs, schedule.outputs):
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
