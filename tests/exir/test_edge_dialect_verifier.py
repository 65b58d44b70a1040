"""EXIREdgeDialectVerifier: config-bound Edge checks (ops, dim order), and preserve_ops refusing views."""

from __future__ import annotations

import pytest
import torch
from torch._export.verifier import SpecViolationError as TorchSpecViolationError

from edgetorch.exir import EdgeCompileConfig, to_edge
from edgetorch.exir.dialects._ops import ops
from edgetorch.exir.verification.verifier import EXIREdgeDialectVerifier


class _ToDouble(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.double) + 1


def test_dim_order_mode_must_match_the_lowering():
    ep = torch.export.export(_ToDouble(), (torch.ones(2, 3),))
    dim_order, stride = EdgeCompileConfig(_skip_dim_order=False), EdgeCompileConfig(_skip_dim_order=True)
    a = to_edge(ep, compile_config=dim_order).exported_program()
    b = to_edge(ep, compile_config=stride).exported_program()
    EXIREdgeDialectVerifier(dim_order)(a)
    EXIREdgeDialectVerifier(stride)(b)
    assert EXIREdgeDialectVerifier(dim_order).is_valid(a.graph_module)
    with pytest.raises(TorchSpecViolationError, match="non-dim_order"):
        EXIREdgeDialectVerifier(stride)(a)
    with pytest.raises(TorchSpecViolationError, match="dim_order mode"):
        EXIREdgeDialectVerifier(dim_order)(b)
    assert not EXIREdgeDialectVerifier(stride).is_valid(a.graph_module)
    EXIREdgeDialectVerifier(EdgeCompileConfig(_check_ir_validity=False))(a)  # checks nothing


def test_check_valid_op():
    verifier = EXIREdgeDialectVerifier()
    verifier.check_valid_op(ops.edge.aten.add.Tensor)
    verifier.check_valid_op(ops.edge.quantized_decomposed.quantize_per_tensor.default)
    with pytest.raises(TorchSpecViolationError, match="not an Edge operator"):
        verifier.check_valid_op(torch.ops.aten.add.Tensor)
    cls = EXIREdgeDialectVerifier(class_only=True, core_aten_ops_exception_list=[torch.ops.aten.add.Tensor])
    cls().check_valid_op(torch.ops.aten.add.Tensor)  # listed exception


def test_preserving_a_view_is_refused():
    class Expand(torch.nn.Module):
        def forward(self, x):
            return x.expand(2, 2, 2)

    ep = torch.export.export(Expand(), (torch.ones(2, 2),))
    with pytest.raises(RuntimeError, match="view"):
        to_edge(ep, compile_config=EdgeCompileConfig(preserve_ops=[torch.ops.aten.expand.default]))
