"""EdgeOpArgValidator: records every Edge call whose dtypes the op does not allow, with those dtypes."""

from __future__ import annotations

import pytest
import torch

from edgetorch.exir import EdgeCompileConfig, to_edge
from edgetorch.exir.dialects._ops import ops
from edgetorch.exir.verification.arg_validator import EdgeOpArgValidator


class _M(torch.nn.Module):
    def forward(self, x):
        return (x + x).abs()


def _gm(x):
    config = EdgeCompileConfig(_check_ir_validity=False)
    return to_edge(torch.export.export(_M(), (x,)), compile_config=config).exported_program().graph_module


def test_allowed_dtypes_record_nothing():
    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    validator = EdgeOpArgValidator(_gm(x))
    (out,) = validator.run(x)
    assert validator.violating_ops == {} and torch.equal(out, (x + x).abs())


def test_complex_add_is_recorded_with_its_dtypes():
    x = torch.ones(2, 3, dtype=torch.complex64)
    validator = EdgeOpArgValidator(_gm(x))
    validator.run(x)
    assert ops.edge.aten.add.Tensor in validator.violating_ops
    types, node = validator.violating_ops[ops.edge.aten.add.Tensor]
    assert types == {"self": torch.complex64, "other": torch.complex64, "__ret_0": torch.complex64}
    assert node.target == ops.edge.aten.add.Tensor


def test_wrong_input_is_an_internal_error():
    from edgetorch.exir.error import InternalError

    x = torch.ones(2, 3)
    with pytest.raises(InternalError, match="failed"):
        EdgeOpArgValidator(_gm(x)).run(None)
