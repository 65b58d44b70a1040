"""Dynamic shapes below the upper bound, op family by op family.

Each case is a small model exported with one dynamic dimension (``torch.export.Dim`` from ``lo`` to ``hi``),
lowered by edgetorch (portable kernels, and through ``XnnpackPartitioner`` where that delegates), then run on one
loaded Method at the minimum, the bound and a middle size (in that order, so planned slots both grow and shrink
between calls) and compared with eager. One program per family also runs on ExecuTorch's runtime (a subprocess).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._higher_order_ops.map import map as map_rows
from torch.export import Dim

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.format.pte import load_pte, save_pte
from edgetorch.runtime import Runtime
from edgetorch.runtime.memory import TensorResizeError
from tests.oracle import assert_close, eager, executorch_pte, run_executorch_calls


class Fn(nn.Module):
    """A module around a function, so that a case reads as one line."""

    def __init__(self, fn: Callable, *layers: nn.Module):
        super().__init__()
        self.fn, self.layers = fn, nn.ModuleList(layers)

    def forward(self, *args):
        return self.fn(self, *args)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _ints(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape)


@dataclass(frozen=True)
class Case:
    model: Callable[[], nn.Module]
    inputs: Callable[[int], tuple]  # the example inputs with the dynamic dimension at size n
    dynamic: Callable[[Dim], tuple]  # dynamic_shapes for that Dim
    sizes: tuple[int, int, int] = (1, 3, 8)  # minimum, middle, bound
    xnnpack: bool = False  # XnnpackPartitioner delegates part of it
    executorch: bool = False  # the family's program that ExecuTorch's runtime also runs


def batch(n_inputs: int = 1) -> Callable[[Dim], tuple]:
    return lambda d: tuple({0: d} for _ in range(n_inputs))


def axis(dim: int) -> Callable[[Dim], tuple]:
    return lambda d: ({dim: d},)


def _layer_norm_all(m, x):
    ln = m.layers[0]
    return torch.ops.aten.native_layer_norm(x, [16], ln.weight, ln.bias, 1e-5)


def _group_norm_all(m, x):
    gn = m.layers[0]
    n, c = x.shape[0], x.shape[1]
    return torch.ops.aten.native_group_norm(x, gn.weight, gn.bias, n, c, x.shape[2] * x.shape[3], 2, 1e-5)


def _attention_block(m, x):
    qkv, proj = m.layers
    b, t, c = x.shape
    q, k, v = qkv(x).split(c, dim=2)
    q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return proj(y.transpose(1, 2).contiguous().view(b, t, c))


CASES: dict[str, Case] = {
    # ---------------------------------------------------------------- elementwise
    "elementwise/unary-binary": Case(
        lambda: Fn(lambda m, x: torch.relu(x) * 2 + torch.sin(x) - x.exp() / 3),
        lambda n: (_r(n, 8),),
        batch(),
        xnnpack=True,
        executorch=True,
    ),
    "elementwise/two-inputs": Case(
        lambda: Fn(lambda m, x, y: torch.where(x > y, x - y, x * y).clamp(-1, 1)),
        lambda n: (_r(n, 4, 8), _r(n, 4, 8)),
        batch(2),
    ),
    "elementwise/broadcast-parameter": Case(
        lambda: Fn(lambda m, x: x * m.layers[0].weight + m.layers[0].bias, nn.LayerNorm(8)),
        lambda n: (_r(2, n, 8),),
        axis(1),
        xnnpack=True,
    ),
    # ---------------------------------------------------------------- reductions
    "reduction/sum-mean-amax-argmax": Case(
        lambda: Fn(lambda m, x: (x.sum(-1), x.mean(0), x.amax(1, keepdim=True), x.argmax(-1))),
        lambda n: (_r(n, 6, 5),),
        batch(),
    ),
    "reduction/max-min-dim": Case(
        lambda: Fn(lambda m, x: (*x.max(dim=-1), x.min(dim=1).values + 1, x.min(dim=1).indices)),
        lambda n: (_r(n, 5, 7),),
        batch(),
        executorch=True,
    ),
    "reduction/var-std-mean": Case(
        lambda: Fn(lambda m, x: (*torch.var_mean(x, dim=-1), *torch.std_mean(x, dim=0))),
        lambda n: (_r(n, 6),),
        batch(),
        sizes=(2, 3, 8),
    ),
    "reduction/aminmax": Case(
        lambda: Fn(lambda m, x: torch.aminmax(x, dim=-1)),
        lambda n: (_r(n, 6),),
        batch(),
    ),
    "reduction/cumsum-logsumexp": Case(
        lambda: Fn(lambda m, x: (x.cumsum(0), x.logsumexp(-1))),
        lambda n: (_r(n, 6),),
        batch(),
    ),
    # ---------------------------------------------------------------- normalization
    "normalization/layer-all-outputs": Case(
        lambda: Fn(_layer_norm_all, nn.LayerNorm(16)),
        lambda n: (_r(n, 3, 16),),
        batch(),
    ),
    "normalization/layer-then-view": Case(
        lambda: Fn(lambda m, x: m.layers[0](x).view(x.shape[0], 48) * 2, nn.LayerNorm(16)),
        lambda n: (_r(n, 3, 16),),
        batch(),
        xnnpack=True,
    ),
    "normalization/group-all-outputs": Case(
        lambda: Fn(_group_norm_all, nn.GroupNorm(2, 4)),
        lambda n: (_r(n, 4, 3, 3),),
        batch(),
        executorch=True,
    ),
    "normalization/group-module": Case(
        lambda: Fn(lambda m, x: m.layers[0](x) + 1, nn.GroupNorm(2, 4)),
        lambda n: (_r(n, 4, 5),),
        batch(),
    ),
    "normalization/batch-eval": Case(
        lambda: Fn(lambda m, x: m.layers[0](x), nn.BatchNorm2d(4).eval()),
        lambda n: (_r(n, 4, 3, 3),),
        batch(),
    ),
    "normalization/batch-batch-statistics": Case(
        lambda: Fn(
            lambda m, x: F.batch_norm(x, None, None, m.layers[0].weight, m.layers[0].bias, True), nn.LayerNorm(4)
        ),
        lambda n: (_r(n, 4, 3),),
        batch(),
        sizes=(2, 3, 8),
    ),
    # ---------------------------------------------------------------- softmax
    "softmax/over-dynamic-and-static-dims": Case(
        lambda: Fn(lambda m, x: (x.softmax(-1), x.log_softmax(0))),
        lambda n: (_r(3, n),),
        axis(1),
        xnnpack=True,
        executorch=True,
    ),
    # ---------------------------------------------------------------- matmul / linear
    "linear/linear-dynamic-batch": Case(
        lambda: Fn(lambda m, x: torch.relu(m.layers[0](x)), nn.Linear(16, 8)),
        lambda n: (_r(n, 16),),
        batch(),
        xnnpack=True,
        executorch=True,
    ),
    "linear/linear-3d-dynamic-sequence": Case(
        lambda: Fn(lambda m, x: m.layers[1](m.layers[0](x)), nn.Linear(16, 8), nn.Linear(8, 4)),
        lambda n: (_r(2, n, 16),),
        axis(1),
        xnnpack=True,
    ),
    "linear/matmul-dynamic-both-sides": Case(
        lambda: Fn(lambda m, x: x @ x.transpose(-1, -2)),
        lambda n: (_r(2, n, 8),),
        axis(1),
        xnnpack=True,
    ),
    # ---------------------------------------------------------------- convolution
    "conv/conv1d-dynamic-batch": Case(
        lambda: Fn(lambda m, x: m.layers[0](x), nn.Conv1d(3, 4, 3, padding=1)),
        lambda n: (_r(n, 3, 10),),
        batch(),
        xnnpack=True,
        executorch=True,
    ),
    "conv/conv2d-dynamic-batch": Case(
        lambda: Fn(lambda m, x: torch.relu(m.layers[0](x)), nn.Conv2d(3, 4, 3, stride=2, padding=1)),
        lambda n: (_r(n, 3, 9, 9),),
        batch(),
        xnnpack=True,
    ),
    "conv/conv2d-channels-last-dynamic-batch": Case(
        lambda: Fn(lambda m, x: torch.relu(m.layers[0](x)) + 1, nn.Conv2d(3, 4, 3, padding=1)).to(
            memory_format=torch.channels_last
        ),
        lambda n: (_r(n, 3, 6, 6).to(memory_format=torch.channels_last),),
        batch(),
    ),
    "conv/conv1d-dynamic-length": Case(
        lambda: Fn(lambda m, x: m.layers[0](x), nn.Conv1d(3, 4, 3)),
        lambda n: (_r(2, 3, n),),
        axis(2),
        sizes=(4, 7, 16),  # export refuses a length of 3 (an output of length 1 would specialise)
    ),
    # ---------------------------------------------------------------- pooling
    "pool/max2d-with-indices": Case(
        lambda: Fn(lambda m, x: F.max_pool2d(x, 2, return_indices=True)),
        lambda n: (_r(n, 3, 8, 8),),
        batch(),
        executorch=True,
    ),
    "pool/avg-and-adaptive": Case(
        lambda: Fn(lambda m, x: (F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1))),
        lambda n: (_r(n, 3, 8, 8),),
        batch(),
        xnnpack=True,
    ),
    "pool/max2d": Case(
        lambda: Fn(lambda m, x: F.max_pool2d(torch.relu(x), 2)),
        lambda n: (_r(n, 3, 8, 8),),
        batch(),
        xnnpack=True,
    ),
    # ---------------------------------------------------------------- shape ops
    "shape/view-from-symbolic-sizes": Case(
        lambda: Fn(lambda m, x: ((x * 2).view(x.shape[0], 32) + 1).reshape(-1, 8)),
        lambda n: (_r(n, 4, 8),),
        batch(),
        xnnpack=True,
    ),
    "shape/view-of-view": Case(
        lambda: Fn(lambda m, x: (x + 1).view(-1, 8).view(x.shape[0] * 2, 2, 8).view(-1) * 3),
        lambda n: (_r(n, 4, 8),),
        batch(),
    ),
    "shape/view-of-multi-output": Case(
        lambda: Fn(lambda m, x: x.max(dim=-1).values.view(-1) + x.max(dim=-1).indices.view(-1)),
        lambda n: (_r(n, 4, 8),),
        batch(),
    ),
    "shape/permute-transpose": Case(
        lambda: Fn(lambda m, x: (x.permute(2, 0, 1) * 2, x.transpose(0, 1) + 1)),
        lambda n: (_r(n, 4, 5),),
        batch(),
        xnnpack=True,
    ),
    "shape/cat-split-unbind": Case(
        lambda: Fn(lambda m, x: (torch.cat([x, x * 2], dim=0), *torch.split(x, [3, 5], dim=-1), *x.unbind(1))),
        lambda n: (_r(n, 2, 8),),
        batch(),
        executorch=True,
    ),
    "shape/cat-on-dynamic-dim": Case(
        lambda: Fn(lambda m, x, y: torch.cat([x, y + 1], dim=1) * 2),
        lambda n: (_r(2, n, 4), _r(2, n, 4)),
        lambda d: ({1: d}, {1: d}),
        xnnpack=True,
    ),
    "shape/slice-expand-unsqueeze": Case(
        lambda: Fn(lambda m, x: (x[:, 1:] * 2, x[1:], x.unsqueeze(1).expand(-1, 3, -1) + 1, x[..., ::2])),
        lambda n: (_r(n, 6),),
        batch(),
        sizes=(3, 5, 8),  # export refuses 2 rows (x[1:] would have one)
    ),
    "shape/chunk-stack-flatten": Case(
        lambda: Fn(lambda m, x: (torch.stack([x, x + 1], dim=1), *torch.chunk(x, 2, dim=-1), x.flatten())),
        lambda n: (_r(n, 6),),
        batch(),
    ),
    # ---------------------------------------------------------------- index ops
    "index/select-dynamic-index": Case(
        lambda: Fn(lambda m, x, i: torch.index_select(x, 0, i) * 2),
        lambda n: (_r(10, 4), _ints(10, n)),
        lambda d: (None, {0: d}),
        executorch=True,
    ),
    "index/gather": Case(
        lambda: Fn(lambda m, x, i: torch.gather(x, 1, i)),
        lambda n: (_r(n, 6), _ints(6, n, 3)),
        batch(2),
    ),
    "index/embedding": Case(
        lambda: Fn(lambda m, i: m.layers[0](i) * 2, nn.Embedding(20, 8)),
        lambda n: (_ints(20, 2, n),),
        axis(1),
    ),
    "index/tensor": Case(
        lambda: Fn(lambda m, x, i: x[i] + 1),
        lambda n: (_r(10, 3), _ints(10, n)),
        lambda d: (None, {0: d}),
    ),
    # ---------------------------------------------------------------- sort / topk
    "sort/sort-dynamic-dim": Case(
        lambda: Fn(lambda m, x: (*torch.sort(x, dim=-1, descending=True), x.argsort(dim=0))),
        lambda n: (_r(3, n),),
        axis(1),
    ),
    "sort/topk-dynamic-batch": Case(
        lambda: Fn(lambda m, x: torch.topk(x, 3, dim=-1)),
        lambda n: (_r(n, 8),),
        batch(),
        executorch=True,
    ),
    # ---------------------------------------------------------------- attention
    "attention/sdpa-causal": Case(
        lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        lambda n: (_r(1, 2, n, 8), _r(1, 2, n, 8), _r(1, 2, n, 8)),
        lambda d: ({2: d}, {2: d}, {2: d}),
        sizes=(1, 5, 16),
        executorch=True,
    ),
    "attention/block": Case(
        lambda: Fn(_attention_block, nn.Linear(16, 48), nn.Linear(16, 16)),
        lambda n: (_r(2, n, 16),),
        axis(1),
        sizes=(1, 5, 16),
        xnnpack=True,
    ),
}


def _order(case: Case) -> list[int]:
    lo, mid, hi = case.sizes
    return [lo, hi, mid]  # grows from the minimum to the bound, then shrinks


def _export_args(name: str) -> tuple[nn.Module, tuple, tuple]:
    case = CASES[name]
    torch.manual_seed(0)
    lo, mid, hi = case.sizes
    return case.model().eval(), case.inputs(mid), (case.dynamic(Dim("n", min=lo, max=hi)),)


@functools.cache
def _lowered(name: str, flavour: str) -> tuple[nn.Module, bytes]:
    model, example, dynamic = _export_args(name)
    ep = torch.export.export(model, example, dynamic_shapes=dynamic, strict=False)
    if flavour == "xnnpack":
        return model, to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return model, to_edge(ep).to_executorch().buffer


def _calls(name: str) -> list[tuple]:
    case = CASES[name]
    torch.manual_seed(1)
    return [case.inputs(n) for n in _order(case)]


def _numpy(args: tuple) -> list:
    return [a.numpy() for a in args]


@pytest.mark.parametrize("flavour", ["portable", "xnnpack"])
@pytest.mark.parametrize("name", list(CASES))
def test_sizes_below_the_bound_match_eager(name: str, flavour: str):
    case = CASES[name]
    if flavour == "xnnpack" and not case.xnnpack:
        pytest.skip("XnnpackPartitioner delegates nothing of this model")
    model, pte = _lowered(name, flavour)
    delegates = sum(len(p.delegates) for p in load_pte(pte).program.execution_plan)
    assert (delegates > 0) == (flavour == "xnnpack"), f"{delegates} delegates in the {flavour} program"
    method = Runtime.get().load_program(pte).load_method("forward")
    for args in _calls(name):
        assert_close(method.execute(_numpy(args)), eager(model, args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.executorch])
def test_executorch_runs_our_program_at_every_size(name: str):
    model, pte = _lowered(name, "portable")
    calls = _calls(name)
    for got, args in zip(run_executorch_calls(pte, [_numpy(a) for a in calls]), calls):
        assert_close(got, eager(model, args), rtol=1e-4, atol=1e-5)


# ExecuTorch's emitter turns dynamic views into et_view calls (ours copies them): their programs run here too.
ET_VIEWS = [
    "shape/view-from-symbolic-sizes",
    "shape/view-of-view",
    "shape/view-of-multi-output",
    "normalization/layer-then-view",
    "attention/block",
]


@pytest.mark.parametrize("name", ET_VIEWS)
def test_executorch_written_views_run_at_every_size(name: str):
    model, example, dynamic = _export_args(name)
    pte = executorch_pte(model, example, dynamic_shapes=dynamic)
    assert b"et_view" in pte, "ExecuTorch emitted no et_view: the test no longer covers views"
    method = Runtime.get().load_program(pte).load_method("forward")
    for args in _calls(name):
        assert_close(method.execute(_numpy(args)), eager(model, args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "name", ["linear/linear-3d-dynamic-sequence", "conv/conv2d-dynamic-batch", "pool/max2d", "attention/block"]
)
def test_executorch_xnnpack_programs_run_at_every_size(name: str):
    """ExecuTorch's XNNPACK lowering of a few cases on our runtime (its own runtime is exercised elsewhere)."""
    model, example, dynamic = _export_args(name)
    pte = executorch_pte(model, example, dynamic_shapes=dynamic, xnnpack=True)
    method = Runtime.get().load_program(pte).load_method("forward")
    for args in _calls(name):
        assert_close(method.execute(_numpy(args)), eager(model, args), rtol=1e-4, atol=1e-5)


class MapRows(nn.Module):
    def forward(self, xs, y):
        return map_rows(lambda x, y: x * 2 + y, xs, y) + 1


def test_executorch_written_map_returns_as_many_rows_as_it_ran():
    """``torch.map`` becomes a loop whose et_copy_index grows the result one row per iteration."""
    torch.manual_seed(0)
    model, y = MapRows(), _r(3)
    # ExecuTorch records the example's size as the input's bound here, so the example is the largest size.
    pte = executorch_pte(model, (_r(4, 3), y), dynamic_shapes=({0: Dim("n", min=1, max=6)}, None))
    assert b"et_copy_index" in pte
    method = Runtime.get().load_program(pte).load_method("forward")
    for n in (4, 2, 3, 1, 4):
        xs = _r(n, 3)
        assert_close(method.execute(_numpy((xs, y))), eager(model, (xs, y)))


def test_every_family_has_a_program_executorch_runs():
    families = {n.split("/")[0] for n in CASES}
    assert families == {n.split("/")[0] for n, c in CASES.items() if c.executorch}, "a family ExecuTorch never runs"


def _shrunk_output(pte: bytes) -> tuple[bytes, int]:
    """The program with its output tensor's planned sizes halved along dim 0: a file planned too small."""
    pte_file = load_pte(pte)
    program = pte_file.program
    plan = program.execution_plan[0]
    [out] = plan.outputs
    tensor = plan.values[out].val
    tensor.sizes = [tensor.sizes[0] // 4, *tensor.sizes[1:]]
    segments = [pte_file.segment(i) for i in range(len(program.segments))]
    return save_pte(program, segments), out


@pytest.mark.parametrize("flavour", ["portable", "xnnpack"])
def test_a_result_above_its_planned_slot_is_refused_with_the_tensor_named(flavour: str):
    _, pte = _lowered("linear/linear-dynamic-batch", flavour)
    shrunk, out = _shrunk_output(pte)
    method = Runtime.get().load_program(shrunk).load_method("forward")
    assert_close(method.execute([np.ones((2, 16), np.float32)]), method.execute([np.ones((2, 16), np.float32)]))
    with pytest.raises(TensorResizeError, match=rf"tensor value {out} is planned for at most 16 elements"):
        method.execute([np.ones((8, 16), np.float32)])
