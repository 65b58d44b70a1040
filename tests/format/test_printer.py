"""The program printer: one line per instruction, reads and writes split right, on ours and ExecuTorch's programs."""

from __future__ import annotations

import re

import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.format.printer import format_plan
from edgetorch.format.program import KernelCall
from edgetorch.runtime import Runtime
from tests.oracle import executorch_pte


class LinearNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(8, 4), torch.nn.LayerNorm(4)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(self.linear(x))) + 1.0


def _plan(pte: bytes):
    return Runtime.get().load_program(pte).program.execution_plan[0]


def _programs() -> dict[str, bytes]:
    model, args = LinearNorm().eval(), (torch.randn(2, 8),)
    ep = torch.export.export(model, args)
    return {
        "edgetorch": to_edge(ep).to_executorch().buffer,
        "executorch": executorch_pte(model, args),
        "edgetorch-xnnpack": to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer,
    }


PROGRAMS = _programs()


def test_multi_output_kernel_line():
    listing = format_plan(_plan(PROGRAMS["edgetorch"]))
    (line,) = [s for s in listing.splitlines() if "native_layer_norm" in s]
    assert re.search(r"%\d+, %\d+, %\d+ = aten::native_layer_norm\.out\(%\d+, \[4\], %\d+, %\d+, 1e-05\)", line), line
    assert line.count("arena 1 @") == 3 and "2x4 f32" in line and "2x1 f32" in line


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_value_written_once_and_outputs_defined(name):
    plan = _plan(PROGRAMS[name])
    lines = format_plan(plan).splitlines()
    assert lines[0].startswith(f"method {plan.name}(")
    body = lines[1:]
    assert len(body) == sum(len(c.instructions) for c in plan.chains)
    written = [int(v) for line in body if " = " in line for v in re.findall(r"%(\d+)", line.split(" = ")[0])]
    assert len(written) == len(set(written)), "a value is written twice"
    assert set(plan.outputs) <= set(written) | set(plan.inputs)
    for line, ins in zip(body, (i for c in plan.chains for i in c.instructions)):
        if isinstance(ins.instr_args, KernelCall):
            op = plan.operators[ins.instr_args.op_index]
            assert f"{op.name}.{op.overload}(" in line
    if name == "edgetorch-xnnpack":
        assert any("delegate XnnpackBackend#0(" in line for line in body)
