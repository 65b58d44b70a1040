"""bench/structure_mutation.py: a structural mutation decodes as its format again (so the case reaches past the
reader's structural checks) and differs from the file it came from; and a run of such cases on a real program
and its XNNPACK delegate ends, every one, in a result or one of edgetorch's typed errors."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from bench.structure_mutation import mutate_structure
from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.errors import EdgetorchError
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.format.pte import FormatError, load_pte
from edgetorch.runtime import Runtime


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).softmax(-1)


@pytest.fixture(scope="module", params=["portable", "xnnpack"])
def program(request) -> bytes:
    torch.manual_seed(0)
    ep = torch.export.export(_Net().eval(), (torch.randn(2, 6),))
    if request.param == "xnnpack":
        return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return to_edge(ep).to_executorch().buffer


def _run(data: bytes) -> str:
    try:
        method = Runtime(max_planned_bytes=1 << 26).load_program(data).load_method("forward")
        inputs = []
        for i in range(method.metadata.num_inputs()):
            info = method.metadata.input_tensor_meta(i)
            inputs.append(np.zeros(tuple(info.sizes()), info.numpy_dtype))
        method.execute(inputs)
        return "ok"
    except EdgetorchError as e:
        return type(e).__name__


def test_mutations_decode_and_differ(program):
    rng = random.Random(0)
    made = [mutate_structure("pte", program, rng) for _ in range(40)]
    built = [m for m in made if m is not None]
    assert len(built) >= 30, "most structural mutations of a real program should encode"
    assert sum(m != program for m in built) >= 0.8 * len(built)
    decoded = 0
    for m in built:
        try:
            load_pte(m)
            decoded += 1
        except FormatError as e:  # an enum field set out of its range on purpose: the reader refuses it, typed
            assert "not a valid" in str(e)
    assert decoded >= 0.7 * len(built), "most cases must get past the reader's structural checks"


def test_mutated_programs_give_results_or_typed_errors(program):
    rng = random.Random(1)
    outcomes = [_run(m) for m in (mutate_structure("pte", program, rng) for _ in range(60)) if m is not None]
    assert outcomes, "no mutation encoded"
    assert "ok" in outcomes or len(set(outcomes)) > 1  # the cases reach different places, not one early check
