"""Banked memory planning: tensors fill the fastest bank that has room, spill to the next, never overflow."""

from __future__ import annotations

import pytest
import torch

from edgetorch.exir.banked_memory_planning import (
    Bank,
    BankedGreedy,
    BankPlacementError,
    TargetMemoryMap,
    banked_memory_planning_pass,
    format_placement_report,
)
from edgetorch.exir.memory_planning import greedy, verify_plan
from edgetorch.exir.tensor import TensorSpec
from tests.exir.test_memory_planning import Chain, edge, plan_with
from tests.exir.test_to_executorch import assert_close, load_method
from tests.oracle import assert_close as oracle_close
from tests.oracle import eager, run_executorch


def spec(nbytes: int, start: int, end: int) -> TensorSpec:
    made = TensorSpec(dtype=torch.uint8, shape=[nbytes])
    made.lifetime = [start, end]
    return made


def two_banks(fast: int, slow: int) -> TargetMemoryMap:
    return TargetMemoryMap([Bank("fast", fast, 1), Bank("slow", slow, 2)])


def test_spills_to_the_next_bank_and_respects_capacity():
    specs = [spec(256, 0, 3), spec(256, 1, 4), spec(64, 2, 5)]  # all live at step 2
    result = BankedGreedy(two_banks(320, 4096))(16, specs)
    placed = [result.spec_dict[s].mem_id for s in specs]
    assert placed == [1, 2, 1]  # the second 256 B buffer cannot join the first in 320 B; the 64 B one can
    assert result.bufsizes == [0, 320, 256]


def test_reuse_inside_a_bank_follows_lifetimes():
    specs = [spec(256, 0, 1), spec(256, 2, 3)]
    result = BankedGreedy(two_banks(256, 256))(16, specs)
    assert [result.spec_dict[s].mem_id for s in specs] == [1, 1] and result.bufsizes[1] == 256


def test_single_bank_plans_exactly_like_greedy():
    sizes = [899, 534, 508, 696, 940, 910, 331]
    mine, theirs = ([spec(n, i, i + 3) for i, n in enumerate(sizes)] for _ in range(2))
    banked = BankedGreedy(TargetMemoryMap([Bank("sram", 1 << 20, 1)]))(64, mine)
    expected = greedy(64, theirs)
    assert banked.bufsizes == expected.bufsizes
    assert [banked.spec_dict[s].mem_offset for s in mine] == [expected.spec_dict[s].mem_offset for s in theirs]


def test_a_tensor_fitting_no_bank_is_an_error_naming_the_banks():
    with pytest.raises(BankPlacementError, match="fast .* slow"):
        BankedGreedy(two_banks(64, 128))(16, [spec(512, 0, 1)])


def test_a_pin_has_no_fallback():
    pinned = spec(512, 0, 1)
    pinned.mem_id = 1
    with pytest.raises(BankPlacementError, match="pinned to bank fast"):
        BankedGreedy(two_banks(256, 4096))(16, [pinned])


def test_bad_maps_are_rejected():
    with pytest.raises(ValueError, match="unique"):
        TargetMemoryMap([Bank("a", 64, 1), Bank("a", 64, 2)])
    with pytest.raises(ValueError, match="arena 0"):
        TargetMemoryMap([Bank("a", 64, 0)])
    with pytest.raises(BankPlacementError, match="multiple of"):
        BankedGreedy(TargetMemoryMap([Bank("a", 4096, 1, alignment=24)]))(16, [spec(8, 0, 1)])


def test_spilled_program_runs_like_eager_on_both_runtimes():
    model, x = Chain().eval(), torch.randn(2, 8)
    target = two_banks(96, 4096)  # room for one 64 B activation: the rest spills
    prog = plan_with(edge(model, (x,)), banked_memory_planning_pass(target))
    plan = prog.memory_plans["forward"]
    verify_plan(plan)
    assert {s.mem_id for s in plan.specs} == {1, 2}
    assert plan.bufsizes[1] <= 96 and plan.bufsizes[2] > 0
    assert "fast" in format_placement_report(target, plan.bufsizes, [s.mem_id for s in plan.specs])
    assert_close(load_method(prog.buffer, "edgetorch")([x]), model(x), atol=1e-4)
    pytest.importorskip("executorch")
    got = run_executorch(prog.buffer, [x.numpy()])  # ExecuTorch's runtime, in a subprocess
    oracle_close(got, eager(model, (x,)))
