"""Memory plans: no two live-at-once tensors share bytes, greedy never loses to naive, hooks and pools work."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim, export

from edgetorch.exir.memory_planning import (
    MemoryAlgoResult,
    MemoryPlan,
    MemoryPlanError,
    MemoryPlanningAlgorithmSuite,
    SpecAllocResult,
    greedy,
    lower_bound,
    naive,
    run_algorithm,
    verify_plan,
)
from edgetorch.exir.passes.memory_planning_pass import MemoryPlanningPass
from edgetorch.exir.tensor import TensorSpec
from edgetorch.exir.to_executorch import ExecutorchBackendConfig, ExecutorchProgramManager
from edgetorch.format.pte import load_pte
from tests.exir.test_to_executorch import (
    MLP,
    Block,
    Cond,
    ConvNet,
    Counter,
    KVCache,
    Recurrent,
    assert_close,
    run_et,
)  # fmt: skip

MODELS = [
    (MLP, (torch.randn(2, 8),)),
    (ConvNet, (torch.randn(1, 3, 8, 8),)),
    (Block, (torch.randn(2, 5, 16),)),
    (Recurrent, (torch.randn(2, 3, 4),)),
    (Counter, (torch.ones(3),)),
    (KVCache, (torch.tensor([1]), torch.ones(1, 4))),
    (Cond, (torch.randn(4),)),
]


class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def edge(model: torch.nn.Module, args: tuple, **kwargs) -> torch.export.ExportedProgram:
    with torch.no_grad():
        return export(model.eval(), args, **kwargs).run_decompositions()


def plan_with(ep: torch.export.ExportedProgram, planner: MemoryPlanningPass) -> ExecutorchProgramManager:
    return ExecutorchProgramManager({"forward": ep}, config=ExecutorchBackendConfig(memory_planning_pass=planner))


@pytest.mark.parametrize("cls,args", MODELS, ids=[m.__name__ for m, _ in MODELS])
def test_plan_invariants_and_greedy_not_worse_than_naive(cls, args):
    ep = edge(cls(), args)
    greedy_plan = plan_with(ep, MemoryPlanningPass("greedy")).memory_plans["forward"]
    naive_plan = plan_with(ep, MemoryPlanningPass("naive")).memory_plans["forward"]
    for memory_plan in (greedy_plan, naive_plan):
        verify_plan(memory_plan)
        assert memory_plan.bufsizes[0] == 0 and all(s.mem_id == 1 for s in memory_plan.specs)
    assert naive_plan.bufsizes[1] == sum(s.aligned_nbytes(16) for s in naive_plan.specs)
    assert lower_bound(greedy_plan.specs) <= greedy_plan.bufsizes[1] <= naive_plan.bufsizes[1]


def test_greedy_reuses_memory_on_a_linear_chain():
    ep = edge(Chain(), (torch.randn(2, 8),))
    greedy_plan = plan_with(ep, MemoryPlanningPass("greedy")).memory_plans["forward"]
    naive_plan = plan_with(ep, MemoryPlanningPass("naive")).memory_plans["forward"]
    assert greedy_plan.bufsizes[1] < naive_plan.bufsizes[1]
    assert "arena sizes" in str(greedy_plan) and "relu" in str(greedy_plan)


def test_checker_rejects_overlapping_live_tensors():
    a = TensorSpec(torch.float32, (4,), (0,), name="a", shape=(4,), lifetime=[0, 3], mem_id=1, mem_offset=0)
    b = TensorSpec(torch.float32, (4,), (0,), name="b", shape=(4,), lifetime=[2, 5], mem_id=1, mem_offset=0)
    with pytest.raises(MemoryPlanError, match="live together"):
        verify_plan(MemoryPlan([a, b], [0, 16]))
    b.lifetime = [4, 5]
    verify_plan(MemoryPlan([a, b], [0, 16]))
    b.mem_offset = 8
    with pytest.raises(MemoryPlanError, match="aligned"):
        verify_plan(MemoryPlan([a, b], [0, 32]))


def test_lower_bound_is_the_peak_of_live_bytes():
    specs = [
        TensorSpec(torch.float32, (n,), (0,), shape=(n,), lifetime=life)
        for n, life in [(4, [0, 1]), (8, [1, 2]), (8, [3, 4])]
    ]
    assert lower_bound(specs) == 16 + 32


def test_custom_algorithm_hook_is_used_and_program_still_runs():
    def reverse_slots(alignment, specs, graph_module, graph_signature, extra_padding):
        return naive(alignment, list(reversed(list(specs))), graph_module, graph_signature, extra_padding)

    model, x = Chain().eval(), torch.randn(2, 8)
    prog = plan_with(edge(model, (x,)), MemoryPlanningPass(reverse_slots))
    plan = prog.memory_plans["forward"]
    verify_plan(plan)
    assert plan.specs[-1].mem_offset == 0 and plan.specs[0].mem_offset > 0
    assert_close(run_et(prog.buffer, [x]), model(x), atol=1e-4)


class AddsInPool2(MemoryPlanningPass):
    def run(self, graph_module, graph_signature=None):
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and str(node.target) == "aten.add.out":
                node.kwargs["out"].meta["spec"].mem_id = 2
        return super().run(graph_module, graph_signature)


def test_custom_pools_give_two_arenas():
    class AddMul(torch.nn.Module):
        def forward(self, x, y):
            return (x + y) * y + x

    x, y = torch.randn(1, 3), torch.randn(1, 3)
    prog = plan_with(edge(AddMul(), (x, y)), AddsInPool2())
    plan = prog.memory_plans["forward"]
    verify_plan(plan)
    assert {s.mem_id for s in plan.specs} == {1, 2} and plan.bufsizes[1] > 0 and plan.bufsizes[2] > 0
    assert_close(run_et(prog.buffer, [x, y]), AddMul()(x, y))


def test_unplanned_inputs_have_no_allocation():
    model, x = MLP().eval(), torch.randn(2, 8)
    prog = plan_with(edge(model, (x,)), MemoryPlanningPass(alloc_graph_input=False))
    plan = load_pte(prog.buffer).program.execution_plan[0]
    assert plan.values[plan.inputs[0]].val.allocation_info is None
    assert all(plan.values[i].val.allocation_info is not None for i in plan.outputs)
    assert [s.name for s in prog.memory_plans["forward"].unplanned] == ["x"]


def test_dynamic_shapes_are_planned_at_the_upper_bound():
    ep = edge(MLP(), (torch.randn(2, 8),), dynamic_shapes={"x": {0: Dim("b", max=64)}})
    plan = plan_with(ep, MemoryPlanningPass("naive")).memory_plans["forward"]
    assert {s.shape[0] for s in plan.specs if s.dynamic} == {64}
    assert plan.bufsizes[1] >= 64 * 8 * 4


def test_bad_algorithm_and_alignment_are_rejected():
    with pytest.raises(ValueError, match="unknown memory planning algorithm"):
        MemoryPlanningPass("best")
    with pytest.raises(ValueError, match="power of two"):
        MemoryPlanningPass(alignment=12)


@pytest.mark.parametrize("seed", range(5))
def test_greedy_on_random_lifetimes(seed):
    gen = torch.Generator().manual_seed(seed)

    def random_specs() -> list[TensorSpec]:
        specs = []
        for i in range(60):
            start = int(torch.randint(0, 50, (1,), generator=gen))
            end = start + int(torch.randint(0, 10, (1,), generator=gen))
            n = int(torch.randint(1, 100, (1,), generator=gen))
            specs.append(TensorSpec(torch.float32, (n,), (0,), name=f"t{i}", shape=(n,), lifetime=[start, end]))
        return specs

    specs = random_specs()
    greedy_plan = MemoryPlan(specs, run_algorithm(greedy, 16, specs))
    verify_plan(greedy_plan)
    naive_size = sum(s.aligned_nbytes(16) for s in specs)
    assert lower_bound(specs) <= greedy_plan.bufsizes[1] <= naive_size


def test_an_algorithm_written_to_executorchs_signature_plans_the_program():
    """One arena per dtype-agnostic size class, placed by hand: ExecuTorch's documented custom-algorithm shape."""
    calls = []

    def one_slot_each(alignment, specs, graph_module, graph_signature, extra_padding):
        calls.append((alignment, isinstance(graph_module, torch.fx.GraphModule), extra_padding))
        result, offset = MemoryAlgoResult({}, [0, 0]), 0
        for i, spec in enumerate(specs):
            result.spec_dict[spec] = SpecAllocResult(mem_id=1, mem_obj_id=i, mem_offset=offset)
            offset += spec.realign(alignment)
        result.bufsizes[1] = offset
        return result

    model, x = Chain().eval(), torch.randn(2, 8)
    suite = MemoryPlanningAlgorithmSuite(algo_list=[one_slot_each, greedy])
    prog = plan_with(edge(model, (x,)), MemoryPlanningPass(memory_planning_algo=suite, alignment=32))
    plan = prog.memory_plans["forward"]
    verify_plan(plan)
    assert calls == [(32, True, 0)]
    assert plan.bufsizes[1] < sum(s.aligned_nbytes(32) for s in plan.specs)  # greedy won the suite
    assert_close(run_et(prog.buffer, [x]), model(x), atol=1e-4)

    only_mine = plan_with(edge(model, (x,)), MemoryPlanningPass(MemoryPlanningAlgorithmSuite([one_slot_each])))
    mine = only_mine.memory_plans["forward"]
    assert [s.mem_obj_id for s in mine.specs] == list(range(len(mine.specs)))
    assert_close(run_et(only_mine.buffer, [x]), model(x), atol=1e-4)


def test_greedy_without_overlapping_allocations_shares_whole_slots_only():
    specs = [
        TensorSpec(torch.float32, (n,), (0,), shape=(n,), lifetime=life)
        for n, life in [(8, [0, 1]), (4, [2, 3]), (4, [2, 3])]
    ]
    slots = greedy(16, specs, allow_overlapping_allocations=False)
    assert sorted(r.mem_offset for r in slots.spec_dict.values()) == [0, 0, 32]
    assert slots.bufsizes == [0, 48]
    assert greedy(16, specs, extra_padding=8).bufsizes == [0, 40]  # first fit packs both 16-byte tensors in 32


def test_algorithms_that_misplan_are_refused_with_their_name():
    spec = TensorSpec(torch.float32, (4,), (0,), name="t", shape=(4,), lifetime=[0, 0])

    def forgets(alignment, specs, graph_module, graph_signature, extra_padding):
        return [0, 0]

    def wrong_type(alignment, specs, graph_module, graph_signature, extra_padding):
        return "all good"

    with pytest.raises(MemoryPlanError, match="forgets left t without a place"):
        run_algorithm(forgets, 16, [spec])
    with pytest.raises(MemoryPlanError, match="wrong_type returned str"):
        run_algorithm(wrong_type, 16, [spec])
    with pytest.raises(MemoryPlanError, match="expected a MemoryAlgoResult"):
        MemoryPlanningAlgorithmSuite([forgets])(16, [spec], None, None, 0)
    with pytest.raises(TypeError, match="ExecuTorch's algorithm signature"):
        MemoryPlanningPass(lambda specs, alignment: None)


class CondReadLater(torch.nn.Module):
    """A cond's result read after later tensors are made: the MoveCall that ends each branch hands the result the
    branch output's bytes, which must not be planned for those later tensors (found by the differential fuzzer)."""

    def forward(self, x):
        y = torch.cond(x.sum() > 0, lambda t: torch.relu(t) - 0.5, lambda t: torch.relu(t) - 0.5, (x,))
        z = torch.nn.functional.silu(torch.nn.functional.leaky_relu(y, 0.1))
        return (z == y,)


def test_a_cond_result_keeps_its_branch_output_bytes():
    from edgetorch.runtime import Runtime

    x = torch.randn(1, 1, 2, 4)
    manager = plan_with(edge(CondReadLater(), (x,)), MemoryPlanningPass("greedy"))
    got = Runtime.get().load_program(manager.buffer).load_method("forward").execute([x.numpy()])
    assert not got[0].any()  # silu(leaky_relu(y)) equals y nowhere; reading z's bytes as y would say True
