"""Memory planning: tensor lifetimes, the naive and greedy placement algorithms, and plan checks.

Every non-constant tensor of a method gets a ``mem_id`` (an arena; 0 is
reserved, 1 is the default) and an offset inside that arena. Lifetimes are
steps in the flattened instruction order (control-flow branches inline). Two
tensors may share bytes only when their lifetimes do not overlap. May import
torch (through the specs).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch.export.graph_signature import ExportGraphSignature

from edgetorch.errors import EdgetorchError
from edgetorch.exir.passes.spec_prop import CONTROL_FLOW_OPS, MAP, SCAN, graph_specs, subgraphs
from edgetorch.exir.tensor import TensorSpec, spec_leaves
from edgetorch.format.program import DeviceType, NonConstBufferDevice, TensorShapeDynamism

DEFAULT_MEM_ID = 1


class MemoryPlanError(EdgetorchError):
    """A memory plan places two simultaneously live tensors in the same bytes, or misaligns one."""


@dataclass
class MemoryPlan:
    """The outcome of planning one method: the planned specs and the size of each arena (index = mem_id)."""

    specs: list[TensorSpec]
    bufsizes: list[int]
    alignment: int = 16
    unplanned: list[TensorSpec] = field(default_factory=list)

    def __str__(self) -> str:
        rows = [f"{'tensor':<40} {'lifetime':>12} {'mem_id':>6} {'offset':>10} {'size':>10}"]
        for s in sorted(self.specs, key=lambda s: (s.mem_id, s.mem_offset)):
            life = f"[{s.lifetime[0]}, {s.lifetime[1]}]"
            rows.append(
                f"{s.name:<40} {life:>12} {s.mem_id:>6} {s.mem_offset:>10} {s.aligned_nbytes(self.alignment):>10}"
            )
        rows.append(f"arena sizes: {self.bufsizes}; lower bound {lower_bound(self.specs, self.alignment)}")
        return "\n".join(rows)


def assign_lifetimes(gm: torch.fx.GraphModule) -> int:
    """Set ``spec.lifetime`` for every spec of ``gm`` (outputs live to the end); returns the number of steps."""
    for spec in graph_specs(gm):
        spec.lifetime = [None, None]
    end = _walk(gm, 0)
    output = gm.graph.output_node()
    for spec in spec_leaves([a.meta.get("spec") for a in output.all_input_nodes]):
        spec.lifetime[1] = end
    _tie_branch_outputs(gm)
    return end + 1


def _tie_branch_outputs(gm: torch.fx.GraphModule) -> None:
    """A cond's result is its branch's output moved in (a MoveCall moves the value, so the result then *is* the
    branch output's tensor, in the branch output's bytes): those bytes must stay live as long as the result."""
    for node in gm.graph.nodes:
        if not (node.op == "call_function" and node.target in CONTROL_FLOW_OPS):
            continue
        if node.target in (MAP, SCAN):
            continue  # a map's or scan's results are their own tensors, copied into, not moved outputs
        results = spec_leaves(node.meta.get("spec"))
        for branch in subgraphs(node):
            sub = getattr(gm, branch.target)
            outputs = spec_leaves(
                [a.meta.get("spec") if isinstance(a, torch.fx.Node) else None for a in sub.graph.output_node().args[0]]
            )
            for result, out in zip(results, outputs):
                if result is not out and None not in (*result.lifetime, *out.lifetime):
                    out.lifetime = [out.lifetime[0], max(out.lifetime[1], result.lifetime[1])]
            _tie_branch_outputs(sub)  # after the extension: an inner cond's result may be this branch's output


def _walk(gm: torch.fx.GraphModule, step: int) -> int:
    """Mark each node's definition and uses at its step; branches of a cond take the steps inside it."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in CONTROL_FLOW_OPS:
            _touch(node, step)
            for branch in subgraphs(node):
                step = _walk(getattr(gm, branch.target), step + 1)
        _touch(node, step)
        step += 1
    return step - 1


def _touch(node: torch.fx.Node, step: int) -> None:
    specs = spec_leaves(node.meta.get("spec")) + spec_leaves([a.meta.get("spec") for a in node.all_input_nodes])
    for spec in specs:
        start, end = spec.lifetime
        spec.lifetime = [step if start is None else min(start, step), step if end is None else max(end, step)]


def _naive_offsets(specs: list[TensorSpec], alignment: int) -> list[int]:
    """Each tensor its own bytes, one after another: no reuse, the baseline."""
    offsets, offset = [], 0
    for spec in specs:
        offsets.append(offset)
        offset += spec.aligned_nbytes(alignment)
    return offsets


def _greedy_offsets(specs: list[TensorSpec], alignment: int, allow_overlapping_allocations: bool = True) -> list[int]:
    """The smaller of two largest-first plans: shared slots (best fit) and first-fit offsets.

    Slots never exceed the naive arena; first-fit offsets usually come closer to the
    lower bound because a tensor may straddle the spans of several shorter-lived ones.
    Without ``allow_overlapping_allocations`` only whole slots are shared.
    """
    by_slots = _slot_offsets(specs, alignment)
    if not allow_overlapping_allocations:
        return by_slots
    by_offsets = _first_fit_offsets(specs, alignment)
    return min((by_slots, by_offsets), key=lambda offsets: _arena_size(specs, offsets, alignment))


def _arena_size(specs: list[TensorSpec], offsets: list[int], alignment: int) -> int:
    return max((o + s.aligned_nbytes(alignment) for s, o in zip(specs, offsets)), default=0)


def _slot_offsets(specs: list[TensorSpec], alignment: int) -> list[int]:
    """Best fit: largest first, each tensor joins the slot of closest size among slots whose lifetimes it avoids."""
    slots: list[_Slot] = []
    for spec in sorted(specs, key=lambda s: -s.aligned_nbytes(alignment)):
        size = spec.aligned_nbytes(alignment)
        free = [slot for slot in slots if slot.fits(spec)]
        best = min(free, key=lambda slot: abs(slot.size - size)) if free else None
        if best is None:
            best = _Slot()
            slots.append(best)
        best.add(spec, size)
    where, offset = {}, 0
    for slot in slots:
        for spec in slot.members:
            where[id(spec)] = offset
        offset += slot.size
    return [where[id(spec)] for spec in specs]


def _first_fit_offsets(specs: list[TensorSpec], alignment: int) -> list[int]:
    """Largest first, each tensor at the lowest offset clear of every placed tensor alive at the same time."""
    placed: list[tuple[int, int, int, int]] = []  # (first step, last step, low byte, high byte)
    where: dict[int, int] = {}
    for spec in sorted(specs, key=lambda s: (-s.aligned_nbytes(alignment), s.lifetime[0])):
        size = spec.aligned_nbytes(alignment)
        start, end = spec.lifetime
        offset = 0
        for lo, hi in sorted((lo, hi) for a, b, lo, hi in placed if a <= end and start <= b):
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((start, end, offset, offset + size))
        where[id(spec)] = offset
    return [where[id(spec)] for spec in specs]


class _Slot:
    """Tensors sharing one span of memory; their lifetimes are disjoint and kept sorted by start."""

    def __init__(self) -> None:
        self.size = 0
        self.starts: list[int] = []
        self.members: list[TensorSpec] = []

    def fits(self, spec: TensorSpec) -> bool:
        i = bisect.bisect_left(self.starts, spec.lifetime[0])
        before_ok = i == 0 or self.members[i - 1].lifetime[1] < spec.lifetime[0]
        after_ok = i == len(self.members) or self.members[i].lifetime[0] > spec.lifetime[1]
        return before_ok and after_ok

    def add(self, spec: TensorSpec, size: int) -> None:
        i = bisect.bisect_left(self.starts, spec.lifetime[0])
        self.starts.insert(i, spec.lifetime[0])
        self.members.insert(i, spec)
        self.size = max(self.size, size)


def _overlap(a: TensorSpec, b: TensorSpec) -> bool:
    return a.lifetime[0] <= b.lifetime[1] and b.lifetime[0] <= a.lifetime[1]


@dataclass
class SpecAllocResult:
    """Where one algorithm placed one tensor: arena, shared memory object, byte offset."""

    mem_id: int
    mem_obj_id: int
    mem_offset: int


@dataclass
class MemoryAlgoResult:
    """One algorithm's placement of every tensor it was given, and each arena's size (index = mem_id)."""

    spec_dict: dict[TensorSpec, SpecAllocResult]
    bufsizes: list[int]


def _place(
    offsets_of: Callable[[list[TensorSpec], int], list[int]],
    alignment: int,
    specs: Iterable[TensorSpec],
    extra_padding: int,
) -> MemoryAlgoResult:
    """Run ``offsets_of`` arena by arena (a spec's preset ``mem_id``, else 1); each used arena grows by the padding."""
    given = list(specs)
    backed = [s for s in given if s.storage_base is not None]
    specs = [s for s in given if s.storage_base is None]
    for spec in backed:  # a tensor stored in another's bytes is placed with its root: plan the root
        root = _storage_root(spec)[0]
        if all(root is not s for s in specs):
            specs.append(root)
    result = MemoryAlgoResult({}, [0] * (max((s.mem_id or DEFAULT_MEM_ID for s in specs), default=DEFAULT_MEM_ID) + 1))
    for mem_id in sorted({s.mem_id or DEFAULT_MEM_ID for s in specs}):
        group = [s for s in specs if (s.mem_id or DEFAULT_MEM_ID) == mem_id]
        offsets = offsets_of(group, alignment)
        objects = _shared_objects(group, offsets)
        for spec, offset, obj in zip(group, offsets, objects):
            spec.realign(alignment)
            result.spec_dict[spec] = SpecAllocResult(mem_id, obj, offset)
        result.bufsizes[mem_id] = max(o + s.allocated_memory for s, o in zip(group, offsets)) + extra_padding
    for spec in backed:
        root, offset = _storage_root(spec)
        spec.realign(alignment)
        where = result.spec_dict[root]
        result.spec_dict[spec] = SpecAllocResult(where.mem_id, where.mem_obj_id, where.mem_offset + offset)
    return result


def _storage_root(spec: TensorSpec) -> tuple[TensorSpec, int]:
    """The spec owning ``spec``'s bytes, and where in them ``spec`` starts."""
    root, offset, seen = spec, 0, {id(spec)}
    while root.storage_base is not None:
        offset += root.storage_base_offset
        root = root.storage_base
        if id(root) in seen:
            raise MemoryPlanError(f"storage_base of {spec} leads back to itself; expected a chain ending in a root")
        seen.add(id(root))
    return root, offset


def _shared_objects(specs: list[TensorSpec], offsets: list[int]) -> list[int]:
    """A shared object id per spec: specs whose byte spans overlap (directly or through others) share one."""
    order = sorted(range(len(specs)), key=lambda i: offsets[i])
    ids = [0] * len(specs)
    obj, end = -1, -1
    for i in order:
        size = max(specs[i].allocated_memory, 1)
        if offsets[i] >= end:
            obj += 1
        end = max(end, offsets[i] + size)
        ids[i] = obj
    return ids


def naive(
    alignment: int,
    specs: Iterable[TensorSpec],
    graph_module: torch.fx.GraphModule | None = None,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
) -> MemoryAlgoResult:
    """Give each tensor its own bytes: no reuse, the baseline (ExecuTorch's algorithm signature)."""
    return _place(_naive_offsets, alignment, specs, extra_padding)


def greedy(
    alignment: int,
    specs: Iterable[TensorSpec],
    graph_module: torch.fx.GraphModule | None = None,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
    *,
    allow_overlapping_allocations: bool = True,
) -> MemoryAlgoResult:
    """Reuse the bytes of dead tensors, largest tensors first (ExecuTorch's algorithm signature).

    With ``allow_overlapping_allocations=False`` tensors share only whole slots, never part of one.
    """
    return _place(
        lambda group, align: _greedy_offsets(group, align, allow_overlapping_allocations),
        alignment,
        specs,
        extra_padding,
    )


class MemoryPlanningAlgorithmSuite:
    """Run several planning algorithms and keep the placement with the smallest total size.

    Each algorithm has ExecuTorch's signature ``algo(alignment, specs, graph_module,
    graph_signature, extra_padding) -> MemoryAlgoResult``; the suite itself is what
    ``MemoryPlanningPass`` calls, and returns the arena sizes.
    """

    def __init__(self, algo_list: list[Callable[..., MemoryAlgoResult]] | None = None) -> None:
        self.algo_list = [greedy] if algo_list is None else list(algo_list)
        if not self.algo_list:
            raise ValueError("MemoryPlanningAlgorithmSuite needs at least one algorithm; found an empty algo_list")

    def __call__(
        self,
        alignment: int,
        specs: Iterable[TensorSpec],
        graph_module: torch.fx.GraphModule | None,
        graph_signature: ExportGraphSignature | None,
        extra_padding: int = 0,
    ) -> list[int]:
        specs = list(specs)
        results = []
        for algo in self.algo_list:
            result = algo(alignment, specs, graph_module, graph_signature, extra_padding)
            if not isinstance(result, MemoryAlgoResult):
                raise MemoryPlanError(
                    f"memory planning algorithm {_name(algo)} returned {type(result).__name__}; expected a "
                    "MemoryAlgoResult(spec_dict, bufsizes)"
                )
            results.append(result)
        best = min(results, key=lambda r: sum(r.bufsizes))
        return apply_result(best)


def apply_result(result: MemoryAlgoResult) -> list[int]:
    """Write ``result``'s placements into its specs; returns its arena sizes."""
    for spec, where in result.spec_dict.items():
        spec.mem_id, spec.mem_obj_id, spec.mem_offset = where.mem_id, where.mem_obj_id, where.mem_offset
    return list(result.bufsizes)


def run_algorithm(
    algo: Callable[..., MemoryAlgoResult | list[int]],
    alignment: int,
    specs: list[TensorSpec],
    graph_module: torch.fx.GraphModule | None = None,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
) -> list[int]:
    """Plan ``specs`` with ``algo`` (an algorithm or a suite); returns the arena sizes, every spec placed.

    Raises MemoryPlanError when the algorithm leaves a tensor without a place or an arena too small for it.
    """
    answer = algo(alignment, specs, graph_module, graph_signature, extra_padding)
    if isinstance(answer, MemoryAlgoResult):
        bufsizes = apply_result(answer)
    elif isinstance(answer, (list, tuple)) and all(isinstance(size, int) for size in answer):
        bufsizes = list(answer)
    else:
        raise MemoryPlanError(
            f"memory planning algorithm {_name(algo)} returned {type(answer).__name__}; expected a "
            "MemoryAlgoResult or a list of arena sizes"
        )
    for spec in specs:
        if spec.mem_id is None or spec.mem_offset is None:
            raise MemoryPlanError(
                f"memory planning algorithm {_name(algo)} left {spec.name or spec} without a place "
                f"(mem_id={spec.mem_id}, mem_offset={spec.mem_offset}); it must place every spec it is given"
            )
        if spec.mem_id >= len(bufsizes) or spec.mem_offset + spec.aligned_nbytes(alignment) > bufsizes[spec.mem_id]:
            raise MemoryPlanError(
                f"memory planning algorithm {_name(algo)} put {spec.name or spec} at arena {spec.mem_id} offset "
                f"{spec.mem_offset}, beyond the arena sizes it returned ({bufsizes})"
            )
    return bufsizes + [0] * (2 - len(bufsizes))


class DevicePoolsNotSupportedError(MemoryPlanError, NotImplementedError):
    """Preset arenas (``spec.mem_id``) together with per-device planning, which numbers arenas itself."""


def plan_per_device(
    algo: Callable[..., MemoryAlgoResult | list[int]],
    alignment: int,
    specs: list[TensorSpec],
    graph_module: torch.fx.GraphModule,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
    enable_non_cpu_memory_planning: bool = False,
) -> list[int]:
    """Plan ``specs`` with ``algo``: as one CPU plan, or (``enable_non_cpu_memory_planning``) one plan per
    device, CPU first, each device's arenas after the previous device's. Records the arena sizes in
    ``graph_module.meta["non_const_buffer_sizes"]`` and, when some arena is not host memory, which device each
    such arena belongs to in ``meta["non_const_buffer_device"]``; returns the sizes."""
    cpu = (DeviceType.CPU, 0)
    groups: dict[tuple[DeviceType, int], list[TensorSpec]] = {cpu: []}
    for spec in specs:
        key = (spec.device, spec.device_index) if enable_non_cpu_memory_planning else cpu
        groups.setdefault(key, []).append(spec)
    if len(groups) > 1 and any(s.mem_id is not None for s in specs):
        raise DevicePoolsNotSupportedError(
            "a pass preset arenas (spec.mem_id) on a method that also has device tensors; per-device planning "
            "numbers the arenas itself: drop the preset arenas or set enable_non_cpu_memory_planning=False"
        )
    sizes, devices = [0], [cpu]
    for key in sorted(groups, key=lambda k: (k != cpu, int(k[0]), k[1])):
        group = groups[key]
        if not group and (key != cpu or len(groups) > 1):
            continue  # no arena for a device without tensors (the host's only when nothing else has one)
        local = run_algorithm(algo, alignment, group, graph_module, graph_signature, extra_padding)
        base = len(sizes)
        sizes += local[1:]
        devices += [key] * (len(local) - 1)
        for spec in group:
            spec.mem_id += base - 1
    graph_module.meta["non_const_buffer_sizes"] = sizes
    on_devices = [NonConstBufferDevice(i, t, d) for i, (t, d) in enumerate(devices) if (t, d) != cpu]
    if on_devices:
        graph_module.meta["non_const_buffer_device"] = on_devices
    else:
        graph_module.meta.pop("non_const_buffer_device", None)
    return sizes


def _name(algo: Callable[..., object]) -> str:
    inner = getattr(algo, "func", algo)
    return getattr(inner, "__name__", type(inner).__name__)


ALGORITHMS: dict[str, Callable[..., MemoryAlgoResult]] = {"naive": naive, "greedy": greedy}


def lower_bound(specs: Iterable[TensorSpec], alignment: int = 16) -> int:
    """The most bytes live at any one step: no plan of one arena can be smaller."""
    events = sorted(
        [(s.lifetime[0], s.aligned_nbytes(alignment)) for s in specs]
        + [(s.lifetime[1] + 1, -s.aligned_nbytes(alignment)) for s in specs],
        key=operator.itemgetter(0, 1),
    )
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def verify_plan(memory_plan: MemoryPlan) -> None:
    """Raise MemoryPlanError if two live-at-once tensors share bytes, or a tensor is misaligned or out of its arena."""
    specs, alignment = memory_plan.specs, memory_plan.alignment
    for spec in specs:
        end = spec.mem_offset + spec.aligned_nbytes(alignment)
        if spec.mem_offset % alignment or end > memory_plan.bufsizes[spec.mem_id]:
            raise MemoryPlanError(
                f"{spec.name} spans {spec.mem_offset}..{end} of arena {spec.mem_id} "
                f"(size {memory_plan.bufsizes[spec.mem_id]}); expected a {alignment}-aligned span inside the arena"
            )
    ordered = sorted(specs, key=lambda s: (s.mem_id, s.mem_offset))
    for i, a in enumerate(ordered):
        a_end = a.mem_offset + a.aligned_nbytes(alignment)
        for b in ordered[i + 1 :]:
            if b.mem_id != a.mem_id or b.mem_offset >= a_end:
                break
            if _overlap(a, b) and a.nbytes and b.nbytes:
                raise MemoryPlanError(
                    f"{a.name} (lifetime {a.lifetime}, bytes {a.mem_offset}..{a_end}) and {b.name} "
                    f"(lifetime {b.lifetime}, offset {b.mem_offset}) are live together but share memory"
                )


# --- ExecuTorch's graph-level planning helpers -------------------------------------------------
# The functions below work on an fx graph the way ExecuTorch's planner does: lifetimes are node
# indices of the top graph, specs are gathered node by node with filters for graph inputs,
# outputs, mutable buffers and constants, and ``Verifier`` checks a finished plan.


def get_node_tensor_specs(node: torch.fx.Node) -> list[TensorSpec]:
    """The tensor specs a node carries (a ``memory.view`` carries its base's); scalars and None dropped."""
    from edgetorch.exir import memory

    source = node.args[0] if node.target is memory.view else node
    specs = source.meta.get("spec") if isinstance(source, torch.fx.Node) else None
    if specs is None and node.op == "output":  # the output returns its arguments' tensors
        specs = spec_leaves([a.meta.get("spec") for a in filter_nodes(node.args)])
    if isinstance(specs, TensorSpec):
        return [specs]
    if not isinstance(specs, (list, tuple)):
        return []
    return [s for s in specs if isinstance(s, TensorSpec)]


def filter_nodes(inputs: Iterable[object]) -> list[torch.fx.Node]:
    """The fx nodes inside ``inputs``, looking through nested lists, tuples and dicts."""
    leaves, _ = torch.utils._pytree.tree_flatten(list(inputs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.fx.Node)]


def _is_mutable_buffer(node: torch.fx.Node, graph_signature: ExportGraphSignature | None = None) -> bool:
    """A placeholder that feeds a buffer the program writes back (only knowable with a signature)."""
    if graph_signature is None or node.op != "placeholder" or not isinstance(node.target, str):
        return False
    fqn = graph_signature.inputs_to_buffers.get(node.target)
    return fqn is not None and fqn in graph_signature.buffers_to_mutate.values()


def _get_mutable_buffer_specs(
    nodes: Iterable[torch.fx.Node], graph_signature: ExportGraphSignature | None
) -> set[TensorSpec]:
    return {spec for node in nodes if _is_mutable_buffer(node, graph_signature) for spec in get_node_tensor_specs(node)}


def _do_user_inputs_exist(graph_signature: ExportGraphSignature | None) -> bool:
    """True when the signature has a user input that is not a plain Python scalar or string."""
    from torch.export.graph_signature import ConstantArgument, InputKind

    if graph_signature is None:
        return False
    for spec in graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        if not (isinstance(spec.arg, ConstantArgument) and isinstance(spec.arg.value, (int, float, bool, str))):
            return True
    return False


def get_graph_input_tensors(
    nodes: Iterable[torch.fx.Node], graph_signature: ExportGraphSignature | None = None
) -> set[TensorSpec]:
    """Specs of the placeholders, mutable buffers excepted."""
    return {
        spec
        for node in nodes
        if node.op == "placeholder" and not _is_mutable_buffer(node, graph_signature)
        for spec in get_node_tensor_specs(node)
    }


def get_graph_output_tensors(nodes: Iterable[torch.fx.Node]) -> set[TensorSpec]:
    """Specs the output node returns."""
    return {spec for node in nodes if node.op == "output" for spec in get_node_tensor_specs(node)}


def _op_schema(node: torch.fx.Node) -> torch._C.FunctionSchema | None:
    if node.op != "call_function":
        return None
    target = node.target
    op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", None)
    return op._schema if isinstance(op, torch._ops.OpOverload) else None


def _is_out_var_node(node: torch.fx.Node) -> bool:
    """An out-variant call: a keyword-only argument the op writes into (its result is that argument)."""
    schema = _op_schema(node)
    return schema is not None and any(
        a.kwarg_only and a.alias_info is not None and a.alias_info.is_write for a in schema.arguments
    )


def _is_inplace_node(node: torch.fx.Node) -> bool:
    """An in-place call (``aten::add_``): it writes a positional argument and returns it, no ``out=``."""
    schema = _op_schema(node)
    if schema is None or _is_out_var_node(node):
        return False
    writes = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    return bool(writes) and not writes[0].kwarg_only and any(r.alias_info is not None for r in schema.returns)


def collect_specs_from_nodes(
    nodes: Iterable[torch.fx.Node],
    graph_signature: ExportGraphSignature | None = None,
    ignore_graph_input: bool = False,
    ignore_graph_output: bool = False,
    ignore_mutable_buffers: bool = False,
    ignore_const: bool = True,
    ignore_out_var_node: bool = True,
    dedup: bool = True,
    do_assertion: bool = True,
    ignore_dynamic_unbound_tensor: bool = True,
) -> Iterable[TensorSpec]:
    """Yield the specs of ``nodes`` the planner should place, filtered as the flags say.

    Out-variant and in-place calls yield nothing (their results are argument tensors),
    nor do ``get_attr`` nodes. With ``do_assertion`` every other node must be a
    placeholder, the output, or an allocation, view, getitem, control-flow or delegate call.
    """
    import operator as _operator

    from edgetorch.exir import memory

    nodes = list(nodes)
    inputs = get_graph_input_tensors(nodes, graph_signature) if ignore_graph_input else set()
    outputs = get_graph_output_tensors(nodes) if ignore_graph_output else set()
    mutable = _get_mutable_buffer_specs(nodes, graph_signature) if ignore_mutable_buffers else set()
    seen: set[TensorSpec] = set()
    for node in nodes:
        if node.op == "get_attr" or (ignore_out_var_node and _is_out_var_node(node)):
            continue
        specs = get_node_tensor_specs(node)
        if not specs or _is_inplace_node(node):
            continue
        if ignore_mutable_buffers and _is_mutable_buffer(node, graph_signature):
            continue
        if do_assertion and not (
            node.op in ("placeholder", "output")
            or node.target in (memory.alloc, memory.view, _operator.getitem)
            or node.target in CONTROL_FLOW_OPS
            or getattr(node.target, "__name__", "") == "executorch_call_delegate"
        ):
            raise MemoryPlanError(
                f"unexpected node {node.name} ({node.op} {node.target}) while collecting planned specs; expected "
                "placeholders, the output, memory.alloc/view, getitem, control flow or delegate calls (run "
                "ToOutVarPass first)"
            )
        for spec in specs:
            if ignore_dynamic_unbound_tensor and spec.shape_dynamism == TensorShapeDynamism.DYNAMIC_UNBOUND:
                continue
            if spec in inputs or spec in outputs or spec in mutable:
                continue
            if ignore_const and spec.const and not node.meta.get("weight_has_gradient", False):
                continue
            if dedup:
                if spec in seen:
                    continue
                seen.add(spec)
            yield spec


def update_tensor_lifetime(
    node: torch.fx.Node,
    spec: TensorSpec,
    node_idx: int,
    max_node_idx: int,
    gs: ExportGraphSignature | None = None,
) -> None:
    """Stretch ``spec.lifetime`` to cover ``node_idx``; placeholders live from 0, mutable buffers to the end."""
    start, end = spec.lifetime
    start = 0 if node.op == "placeholder" else (node_idx if start is None else min(start, node_idx))
    if node.op == "placeholder" and _is_mutable_buffer(node, gs):
        end = max_node_idx
    else:
        end = node_idx if end is None else max(end, node_idx)
    spec.lifetime = [start, end]


def _extend_storage_base_lifetimes(specs: Iterable[TensorSpec]) -> None:
    """A tensor stored in another's bytes keeps that base (and its bases) alive as long as itself."""
    for spec in specs:
        if spec.storage_base is None:
            continue
        if None in spec.lifetime:
            raise MemoryPlanError(f"{spec} is stored in another tensor's bytes but has no lifetime; assign lifetimes")
        seen = {id(spec)}
        base = spec.storage_base
        while base is not None:
            if id(base) in seen:
                raise MemoryPlanError(f"storage_base of {spec} leads back to itself; expected a chain ending in a root")
            seen.add(id(base))
            if None in base.lifetime:
                raise MemoryPlanError(f"{base} backs another tensor's storage but has no lifetime; assign lifetimes")
            base.lifetime = [min(base.lifetime[0], spec.lifetime[0]), max(base.lifetime[1], spec.lifetime[1])]
            base = base.storage_base


def update_all_tensors_lifetime(
    graph_module: torch.fx.GraphModule, graph_signature: ExportGraphSignature | None = None
) -> set[TensorSpec]:
    """Set each spec's lifetime to the first and last top-graph node index that defines or uses it."""
    import itertools

    specs: set[TensorSpec] = set()
    last = len(graph_module.graph.nodes) - 1
    for index, node in enumerate(graph_module.graph.nodes):
        touched = filter_nodes(itertools.chain([node], node.args, node.kwargs.values()))
        for spec in collect_specs_from_nodes(
            touched,
            graph_signature,
            ignore_const=False,
            ignore_out_var_node=False,
            dedup=False,
            do_assertion=False,
            ignore_dynamic_unbound_tensor=False,
        ):
            update_tensor_lifetime(node, spec, index, last, graph_signature)
            specs.add(spec)
    _extend_storage_base_lifetimes(specs)
    return specs


class Verifier:
    """Checks a finished plan: live-together tensors never share bytes; inputs and outputs planned as asked."""

    def __init__(
        self,
        graph_module: torch.fx.GraphModule,
        alloc_graph_input: bool,
        alloc_graph_output: bool,
        alloc_mutable_buffers: bool,
        graph_signature: ExportGraphSignature | None = None,
    ) -> None:
        self.graph_module = graph_module
        self.graph_signature = graph_signature
        self.alloc_graph_input = alloc_graph_input
        self.alloc_graph_output = alloc_graph_output
        self.alloc_mutable_buffers = alloc_mutable_buffers

    @classmethod
    def mem_obj_id_match(cls, lhs_spec: TensorSpec, rhs_spec: TensorSpec, accept_both_none: bool = True) -> bool:
        """Same arena and same shared object; two unset objects match when ``accept_both_none``."""
        if lhs_spec.mem_id != rhs_spec.mem_id:
            return False
        if lhs_spec.mem_obj_id is None and rhs_spec.mem_obj_id is None:
            return accept_both_none
        return lhs_spec.mem_obj_id == rhs_spec.mem_obj_id

    @classmethod
    def has_overlap(cls, lhs_ivl: list[int], rhs_ivl: list[int]) -> bool:
        """Whether two closed intervals share a point (an empty interval shares none)."""
        if lhs_ivl[0] > lhs_ivl[1] or rhs_ivl[0] > rhs_ivl[1]:
            return False
        return lhs_ivl[0] <= rhs_ivl[1] and rhs_ivl[0] <= lhs_ivl[1]

    @classmethod
    def lifetime_overlap(cls, lhs_spec: TensorSpec, rhs_spec: TensorSpec) -> bool:
        for spec in (lhs_spec, rhs_spec):
            if None in spec.lifetime:
                raise MemoryPlanError(f"{spec} has no lifetime; expected [start, end] before verifying the plan")
        return cls.has_overlap(lhs_spec.lifetime, rhs_spec.lifetime)

    @classmethod
    def storage_overlap(cls, lhs_spec: TensorSpec, rhs_spec: TensorSpec) -> bool:
        if lhs_spec.mem_id != rhs_spec.mem_id:
            return False
        spans = []
        for spec in (lhs_spec, rhs_spec):
            if not isinstance(spec.mem_offset, int) or spec.mem_offset < 0:
                raise MemoryPlanError(f"{spec} has no memory offset; expected a planned spec")
            spans.append([spec.mem_offset, spec.mem_offset + spec.allocated_memory - 1])
        return cls.has_overlap(*spans)

    @staticmethod
    def _storage_chain(spec: TensorSpec) -> list[TensorSpec]:
        chain = [spec]
        while chain[-1].storage_base is not None:
            if any(chain[-1].storage_base is s for s in chain):
                raise MemoryPlanError(f"storage_base of {spec} leads back to itself")
            chain.append(chain[-1].storage_base)
        return chain

    def verify_storage_reuse(self, allow_lifetime_and_storage_overlap: bool = False) -> int:
        """The number of planned pairs sharing bytes; raises MemoryPlanError for a pair also live together
        (unless one is stored in the other, or ``allow_lifetime_and_storage_overlap``)."""
        specs = list(
            collect_specs_from_nodes(
                self.graph_module.graph.nodes,
                self.graph_signature,
                ignore_graph_input=not self.alloc_graph_input,
                ignore_graph_output=not self.alloc_graph_output,
                ignore_mutable_buffers=not self.alloc_mutable_buffers,
                ignore_const=True,
                ignore_out_var_node=False,
                dedup=True,
                do_assertion=False,
            )
        )
        pairs = 0
        for i, lhs in enumerate(specs):
            for rhs in specs[i + 1 :]:
                if (lhs.mem_obj_id is None) != (rhs.mem_obj_id is None):
                    raise MemoryPlanError(f"{lhs} and {rhs} disagree on whether a shared object id is set")
                if not self.storage_overlap(lhs, rhs):
                    continue
                if not allow_lifetime_and_storage_overlap and self.lifetime_overlap(lhs, rhs):
                    related = any(s is rhs for s in self._storage_chain(lhs)) or any(
                        s is lhs for s in self._storage_chain(rhs)
                    )
                    if not related:
                        raise MemoryPlanError(
                            f"unexpected storage overlap: lifetimes {lhs.lifetime} and {rhs.lifetime}, arena "
                            f"{lhs.mem_id} bytes from {lhs.mem_offset} ({lhs.allocated_memory}) and "
                            f"{rhs.mem_offset} ({rhs.allocated_memory})"
                        )
                if not self.mem_obj_id_match(lhs, rhs):
                    raise MemoryPlanError(f"{lhs} and {rhs} share bytes but not a shared object id")
                pairs += 1
        return pairs

    def verify_graph_input_output(self) -> None:
        """Graph inputs (when user inputs exist) and outputs are planned exactly when alloc_graph_* says so."""
        nodes = list(self.graph_module.graph.nodes)
        both = get_graph_input_tensors(nodes, self.graph_signature) & get_graph_output_tensors(nodes)
        if both and self.alloc_graph_input != self.alloc_graph_output:
            return  # a tensor both input and output cannot satisfy both flags
        mutable = _get_mutable_buffer_specs(nodes, self.graph_signature)
        planned: dict[str, bool | None] = {"placeholder": None, "output": None}
        unbound = {"placeholder": False, "output": False}
        for node in nodes:
            if node.op not in planned or _is_mutable_buffer(node, self.graph_signature):
                continue
            all_specs = get_node_tensor_specs(node)
            if not all_specs:
                continue
            specs = [s for s in all_specs if not s.const and s not in mutable]
            if not specs:
                planned["output"] = self.alloc_graph_output
                continue
            flags = {s.mem_offset is not None for s in specs}
            if len(flags) != 1:
                raise MemoryPlanError(
                    f"{node.name}: some of its tensors are planned and some not; expected all or none"
                )
            planned[node.op] = flags.pop()
            unbound[node.op] |= any(s.shape_dynamism == TensorShapeDynamism.DYNAMIC_UNBOUND for s in specs)
        wanted = {"placeholder": self.alloc_graph_input, "output": self.alloc_graph_output}
        checks = ["output"] + (["placeholder"] if _do_user_inputs_exist(self.graph_signature) else [])
        for op in checks:
            if op == "placeholder" and not any(n.op == "placeholder" for n in nodes):
                continue
            if planned[op] is None:
                raise MemoryPlanError(f"no planned {op} tensors found to verify; expected the graph to have some")
            if not unbound[op] and planned[op] != wanted[op]:
                raise MemoryPlanError(f"graph {op} tensors planned={planned[op]}; expected {wanted[op]}")


def apply_algo(
    algo: Callable[..., object],
    graph_module: torch.fx.GraphModule,
    alignment: int,
    graph_signature: ExportGraphSignature | None = None,
    alloc_graph_input: bool = True,
    alloc_graph_output: bool = True,
    alloc_mutable_buffers: bool = True,
    enable_non_cpu_memory_planning: bool = False,
) -> list[int]:
    """Plan the top graph with ``algo`` on node-index lifetimes; returns and records the arena sizes
    (per device with ``enable_non_cpu_memory_planning``: see :func:`plan_per_device`)."""
    update_all_tensors_lifetime(graph_module, graph_signature)
    specs = list(
        collect_specs_from_nodes(
            graph_module.graph.nodes,
            graph_signature,
            do_assertion=False,
            ignore_graph_input=not alloc_graph_input,
            ignore_graph_output=not alloc_graph_output,
            ignore_mutable_buffers=not alloc_mutable_buffers,
        )
    )
    roots = [s for s in specs if s.storage_base is None]
    extra_padding = 64 if _contains_xnnpack_delegate(graph_module) else 0
    bufsizes = plan_per_device(
        algo, alignment, roots, graph_module, graph_signature, extra_padding, enable_non_cpu_memory_planning
    )
    for spec in specs:
        if spec.storage_base is not None:
            root, offset = spec, 0
            while root.storage_base is not None:
                offset += root.storage_base_offset
                root = root.storage_base
            spec.mem_id, spec.mem_obj_id, spec.mem_offset = root.mem_id, root.mem_obj_id, root.mem_offset + offset
    return bufsizes


def _contains_xnnpack_delegate(graph_module: torch.fx.GraphModule) -> bool:
    """XNNPACK reads a little past its tensors, so a graph delegating to it pads each arena."""
    for node in graph_module.graph.nodes:
        if getattr(node.target, "__name__", "") == "executorch_call_delegate":
            lowered = getattr(graph_module, node.args[0].target, None)
            if "xnnpack" in str(getattr(lowered, "backend_id", "")).lower():
                return True
    return False


@dataclass
class AllocationSpec:
    """One tensor inside a shared object, at ``offset`` bytes from the object's start."""

    offset: int
    spec: TensorSpec


@dataclass
class SharedObject:
    """A span of an arena several tensors use in turn (or side by side while their lifetimes overlap)."""

    idx: int
    offset: int
    size: int
    first_used_index: int
    last_used_index: int
    allocations: list[AllocationSpec] = field(default_factory=list)


def _clear_of(sobj: SharedObject, spec: TensorSpec) -> bool:
    """No tensor already in ``sobj`` is live while ``spec`` is."""
    return all(not _overlap(alloc.spec, spec) for alloc in sobj.allocations)


def _top_of_live(sobj: SharedObject, spec: TensorSpec) -> int:
    """The first byte of ``sobj`` above every tensor in it that is live while ``spec`` is (0 if none)."""
    return max((a.offset + a.spec.allocated_memory for a in sobj.allocations if _overlap(a.spec, spec)), default=0)


def pick_shared_obj(
    shared_objects: list[SharedObject], spec: TensorSpec, allow_overlapping_allocations: bool = True
) -> SharedObject:
    """Put ``spec`` (offered largest first) into a shared object and return it.

    The first object with no live tensor takes it at offset 0; otherwise, with
    ``allow_overlapping_allocations``, the first object with room above its live
    tensors takes it there; otherwise a new object of ``spec``'s size is appended.
    """
    size = spec.allocated_memory
    for sobj in shared_objects:
        if _clear_of(sobj, spec):
            if sobj.size < size:
                raise MemoryPlanError(
                    f"{spec} ({size} bytes) offered after a smaller shared object ({sobj.size} bytes); "
                    "pick_shared_obj expects specs in decreasing size"
                )
            return _join(sobj, spec, 0)
    if allow_overlapping_allocations:
        for sobj in shared_objects:
            top = _top_of_live(sobj, spec)
            if top > 0 and top + size <= sobj.size:
                return _join(sobj, spec, top)
    sobj = SharedObject(len(shared_objects), -1, size, spec.lifetime[0], spec.lifetime[1])
    sobj.allocations.append(AllocationSpec(0, spec))
    shared_objects.append(sobj)
    return sobj


def _join(sobj: SharedObject, spec: TensorSpec, offset: int) -> SharedObject:
    sobj.first_used_index = min(sobj.first_used_index, spec.lifetime[0])
    sobj.last_used_index = max(sobj.last_used_index, spec.lifetime[1])
    sobj.allocations.append(AllocationSpec(offset, spec))
    return sobj
