"""The glue steps between an LLM's delegates (edgetorch.runtime.fusion: copy_view, copy_slice, index_select,
put_row): bound once at load, bit-identical to the kernels' steps across prefill and decode shapes, on both
kernel tiers, with the kernels' errors for what lies outside their fast path."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

from edgetorch.errors import ExecutionError
from edgetorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
from edgetorch.extension.llm.export import export_llm
from edgetorch.runtime import Runtime
from tests.extension.llm.conftest import random_checkpoint
from tests.runtime.test_copy_elision import assert_same_llm_steps


def _load(pte: bytes, fused: bool = True):
    method = Runtime.get().load_program(pte).load_method("forward")
    if not fused:
        method._executor.fused = None
    return method


def _step_counts(method) -> collections.Counter:
    return collections.Counter(step.__name__ for step in method._executor.fused[0])


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-tier", "numpy-tier"])
@pytest.mark.parametrize(
    "backend, sdpa", [("xnnpack", True), ("portable", True), ("portable", False)], ids=["xnnpack", "portable", "eager"]
)
def test_llm_glue_steps_give_the_unfused_bits(backend, sdpa, compiled, set_policy):
    set_policy(compiled=compiled)
    checkpoint = random_checkpoint(seed=3, max_seq_len=8, max_context_len=32)
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=32, use_sdpa_with_kv_cache=sdpa, backend=backend)
    fused, plain = _load(pte), _load(pte, fused=False)
    counts = _step_counts(fused)
    layers = checkpoint.args.n_layers
    assert counts["put_row"] == 2 * layers  # the K and V cache writes
    assert counts["index_select"] >= 1
    if backend == "xnnpack":  # the q/k/v product leaves its delegate: cut into heads by one step a layer
        assert counts["split_heads"] == layers
    else:
        assert counts["copy_view"] >= 1 and counts["copy_slice"] >= 1
    # a prefill of 5 rows (several positions: the kernel's index_put_), decodes of 1 row, a prefill of the most
    assert_same_llm_steps(fused, plain, (5, 1, 1, 3, 1, 8, 1))


class _Glue(torch.nn.Module):
    """A product cut into heads, a rotation of one part by a constant permutation and a write of the other into
    a cache at the given positions, as an LLM's attention prologue (``accumulate`` adds instead)."""

    def __init__(self, accumulate: bool = False, perm: tuple[int, ...] = (2, 3, 0, 1)):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 8, 1, 4), persistent=False)
        self.register_buffer("perm", torch.tensor(perm))
        self.weight = torch.nn.Parameter(torch.randn(12, 12, generator=torch.Generator().manual_seed(0)))
        self.accumulate = accumulate

    def forward(self, x, pos):
        h = (x @ self.weight).view(1, x.shape[0], 3, 4)
        a, b = h[:, :, :2], h[:, :, 2:]
        r = torch.index_select(a, -1, self.perm)
        torch.ops.aten.index_put_(self.cache, [None, pos], b, self.accumulate)
        return r * 2, self.cache + 0


def _glue(**kwargs) -> bytes:
    rows = torch.export.Dim("rows", min=1, max=4)
    args = (torch.ones(2, 12), torch.tensor([1, 2]))
    ep = torch.export.export(_Glue(**kwargs), args, dynamic_shapes=({0: rows}, {0: rows}), strict=False)
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch(ExecutorchBackendConfig(run_reinplace_pass=True)).buffer


def _same_runs(pte: bytes, runs: list[tuple[int, list[int]]]) -> None:
    fused, plain = _load(pte), _load(pte, fused=False)
    rng = np.random.default_rng(2)
    for rows, pos in runs:
        x = rng.standard_normal((rows, 12)).astype(np.float32)
        for got, want in zip(fused.execute([x, np.array(pos)]), plain.execute([x, np.array(pos)])):
            np.testing.assert_array_equal(got, want)


def test_one_position_writes_a_row_and_several_take_the_kernel():
    pte = _glue()
    counts = _step_counts(_load(pte))
    assert counts["put_row"] == 1 and counts["index_select"] == 1
    # The planner gives both heads' outs memory of the product they are cut from: cutting them straight from it
    # would overwrite what the second one reads, so the view stays a copy and each slice copies from it.
    assert "split_heads" not in counts and counts["copy_view"] == 1 and counts["copy_slice"] == 2
    # several positions, one, a negative one (counted from the end, as the kernel does), the last row
    _same_runs(pte, [(3, [0, 1, 2]), (1, [3]), (1, [-1]), (1, [7]), (4, [4, 5, 6, 7]), (1, [-8])])


def test_accumulating_index_put_and_a_negative_permutation_keep_the_kernels_steps():
    pte = _glue(accumulate=True, perm=(-1, 2, 1, 0))
    counts = _step_counts(_load(pte))
    assert "put_row" not in counts
    assert counts["index_select"] == 1  # bound, but a negative entry takes the kernel's checked np.take
    _same_runs(pte, [(2, [0, 0]), (1, [3]), (1, [3])])


@pytest.mark.parametrize("pos", [8, -9], ids=["past-the-end", "before-the-start"])
def test_a_position_out_of_range_fails_as_the_kernel_fails(pos):
    pte = _glue()
    errors = []
    for method in (_load(pte), _load(pte, fused=False)):
        with pytest.raises(ExecutionError) as info:
            method.execute([np.ones((1, 12), np.float32), np.array([pos])])
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert "index_put_" in errors[0] and "out of bounds" in errors[0]
