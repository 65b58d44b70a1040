"""Registered edge dtype constraints (edge.yaml entry form), the any-dtype default, and to_out_variant."""

from __future__ import annotations

import pytest
import torch
from torch.library import Library

from edgetorch.exir.dialects._ops import ops
from edgetorch.exir.dialects.edge._ops import AllowedDtypeSet, FunctionDtypeConstraint, _edge_dialect_info

_lib = Library("et_dtype_reg", "DEF")
_lib.define("pair(Tensor a, Tensor? b) -> Tensor")
_lib.define("other(Tensor a) -> Tensor")


def test_allowed_dtype_set_binds_until_cleared():
    s = AllowedDtypeSet({torch.int8, torch.float32})
    assert s.reduce_to(torch.int8) and not s.reduce_to(torch.float32) and torch.float32 not in s
    s.clear()
    assert torch.float32 in s and not s.reduce_to(torch.int16)


def test_registered_entry_constrains_and_can_be_replaced():
    op = ops.edge.et_dtype_reg.pair.default
    _edge_dialect_info["et_dtype_reg::pair"] = {
        "type_alias": {"T0": ["Float"], "T1": ["Char"], "T2": ["Int"]},
        "type_constraint": [
            {"a": "T0", "b": "T0", "__ret_0": "T0"},
            {"a": "T1", "b": "T1", "__ret_0": "T2"},
        ],
    }
    try:
        c = op._schema.dtype_constraint
        assert isinstance(c, FunctionDtypeConstraint)
        assert c.validate({"a": torch.int8, "__ret_0": torch.int32})  # b optional
        assert not c.validate({"a": torch.int8, "b": torch.float32, "__ret_0": torch.int32})  # mixes rows
        assert not c.validate({"b": torch.int8, "__ret_0": torch.int32})  # a is essential
        assert op._schema.arguments[0].allowed_types == {torch.float32, torch.int8}
        _edge_dialect_info["et_dtype_reg::pair"] = {
            "type_alias": {"T0": ["Double"]},
            "type_constraint": [{"a": "T0", "b": "T0", "__ret_0": "T0"}],
        }
        assert op._schema.arguments[0].allowed_types == {torch.float64}
    finally:
        del _edge_dialect_info["et_dtype_reg::pair"]


def test_malformed_entry_is_rejected():
    _edge_dialect_info["et_dtype_reg::pair"] = {"type_alias": {"T0": ["Float"]}, "type_constraint": [{"a": "T0"}]}
    try:
        with pytest.raises(ValueError, match="name each tensor"):
            _ = ops.edge.et_dtype_reg.pair.default._schema
    finally:
        del _edge_dialect_info["et_dtype_reg::pair"]


def test_unconstrained_op_allows_any_dtype_but_needs_essential_tensors():
    c = ops.edge.et_dtype_reg.other.default._schema.dtype_constraint
    assert c.validate({"a": torch.int16, "__ret_0": torch.bool})
    assert not c.validate({"__ret_0": torch.bool}) and not c.validate({"a": torch.int16, "x": torch.int16})


def test_to_out_variant():
    assert ops.edge.aten.add.Tensor.to_out_variant() is torch.ops.aten.add.out
    with pytest.raises(RuntimeError, match="aten::view"):
        ops.edge.aten.view.default.to_out_variant()


def test_backend_dialect_refuses_non_backend_namespaces():
    from edgetorch.exir.dialects._ops import _DialectNamespace, _Ops

    assert isinstance(ops, _Ops) and isinstance(ops.edge, _DialectNamespace) and list(ops) == ["edge", "backend"]
    with pytest.raises(RuntimeError, match="does not belong to backend ops"):
        _ = ops.backend.aten
