"""edgetorch and the real ExecuTorch 1.5.1 compile the same model in one process without upsetting each other.

Both compilers share torch's process-wide registries (operator libraries, fake kernels, decomposition
tables). Here edgetorch lowers first, from the very ``ExportedProgram`` ExecuTorch lowers next, so a
change edgetorch leaves behind in torch, or in the program it was given, shows up in ExecuTorch's
program. All four programs run on both runtimes and must match eager.
"""

from __future__ import annotations

import pytest
import torch

import edgetorch.exir
from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.runtime import Runtime
from tests.interop.models import MODELS
from tests.oracle import assert_close, eager, run_executorch

# A conv net (batch norm, pooling, channels-last-friendly XNNPACK convs) and a dynamic-batch MLP.
CASES = ["convnet", "dynamic_mlp"]


def _edgetorch(ep: torch.export.ExportedProgram, xnnpack: bool) -> bytes:
    if xnnpack:
        manager = edgetorch.exir.to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    else:
        manager = edgetorch.exir.to_edge(ep)
    return manager.to_executorch().buffer


def _executorch(ep: torch.export.ExportedProgram, xnnpack: bool) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner as EtPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower

    if xnnpack:
        return to_edge_transform_and_lower(ep, partitioner=[EtPartitioner()]).to_executorch().buffer
    return to_edge(ep).to_executorch().buffer


def _numpy(args: tuple) -> list:
    return [a.numpy() for a in args]


@pytest.mark.parametrize("name", CASES)
def test_edgetorch_then_executorch_from_one_export(name):
    factory, make_args, dynamic = MODELS[name]
    model, args = factory().eval(), make_args()
    ep = torch.export.export(model, args, dynamic_shapes=dynamic, strict=False)
    signature_before = str(ep.graph_signature)
    programs = {f"edgetorch-{kind}": _edgetorch(ep, kind == "xnnpack") for kind in ("portable", "xnnpack")}
    assert str(ep.graph_signature) == signature_before, "edgetorch changed the ExportedProgram it was given"
    programs.update({f"executorch-{kind}": _executorch(ep, kind == "xnnpack") for kind in ("portable", "xnnpack")})
    # A dynamic batch also runs at other sizes: a wrongly static tensor would fail to resize.
    batches = [args] + ([(torch.randn(b, *args[0].shape[1:]),) for b in (1, 16)] if dynamic else [])
    for pte in programs.values():
        method = Runtime.get().load_program(pte).load_method("forward")
        for inputs in batches:
            want = eager(model, inputs)
            assert_close(run_executorch(pte, _numpy(inputs)), want, rtol=1e-4, atol=1e-4)
            assert_close(method.execute(_numpy(inputs)), want, rtol=1e-4, atol=1e-4)
