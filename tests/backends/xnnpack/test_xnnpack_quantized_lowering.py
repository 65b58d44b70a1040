"""Quantized graphs lowered by edgetorch's XnnpackPartitioner: static int8 (QS8 activations, per-channel QC8
weights, int32 bias), dynamic int8 (QD8 converts) and 8da4w (QD8 input, 4-bit blockwise QB4 weights with bfloat16
scales). The q/dq ops become value types inside the blob; the
blob's nodes and values are the ones ExecuTorch's partitioner writes for the same program; both runtimes run
edgetorch's .pte within one quantization step of the eager (reference q/dq) model and of each other."""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pytest

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.partition import XnnpackPartitioner
from edgetorch.backends.xnnpack.validate import XnnpackGraphError, validate_graph
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime
from tests.backends.xnnpack.test_xnnpack_lowering import delegate_graphs
from tests.backends.xnnpack.test_xnnpack_quantized_runtime import executorch_xnnpack_pte
from tests.interop.quantized_models import output_step, quantized, sqnr
from tests.oracle import eager, run_executorch

CASES = [
    ("mlp", "static"),
    ("cnn", "static"),
    ("ops", "static"),
    ("mlp", "dynamic"),
    ("cnn", "dynamic"),
    ("mlp", "8da4w"),
]
# Lowest SQNR (dB) of the quantized delegate's output against the float model's.
MIN_SQNR = {"static": 25, "dynamic": 25, "8da4w": 12}


@functools.cache
def lowered(model: str, scheme: str):
    """(float model, inputs, quantized program, lowered Edge program, .pte) with our partitioner."""
    fp32, args, ep = quantized(model, scheme)
    low = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    return fp32, args, ep, low, low.to_executorch().buffer


def run_ours(pte: bytes, args: tuple) -> np.ndarray:
    return Runtime.get().load_program(pte).load_method("forward").execute([a.numpy() for a in args])[0]


@pytest.mark.parametrize(("model", "scheme"), CASES)
def test_no_quantize_op_is_left_outside_the_delegate(model: str, scheme: str):
    _, _, _, low, pte = lowered(model, scheme)
    targets = [str(n.target) for n in low.exported_program().graph.nodes if n.op == "call_function"]
    assert "executorch_call_delegate" in " ".join(targets)
    assert not [t for t in targets if "quantize" in t or "choose_qparams" in t], targets
    (graph,) = delegate_graphs(pte)
    kinds = {xs.tensor_value(v).datatype for v in graph.xvalues}
    weights = xs.XNNDatatype.xnn_datatype_qbint4 if scheme == "8da4w" else xs.XNNDatatype.xnn_datatype_qcint8
    assert weights in kinds


@pytest.mark.parametrize(("model", "scheme"), CASES)
def test_quantized_delegate_matches_eager_and_executorch(model: str, scheme: str):
    fp32, args, ep, _, pte = lowered(model, scheme)
    want = eager(ep.module(), args)[0]
    ours = run_ours(pte, args)
    step = output_step(ep, want)
    if scheme == "dynamic":
        # XNNPACK quantizes a dynamic input per row (ExecuTorch's blob asks for per-token parameters), the
        # eager PT2E graph per tensor: close, not within one step. ExecuTorch's own lowering differs the same way.
        assert sqnr(want, ours) > 30
    else:  # static, and 8da4w, whose eager graph quantizes per token as XNNPACK does
        np.testing.assert_allclose(ours, want, rtol=0, atol=step * 1.001)
    theirs = np.asarray(run_executorch(pte, list(args))[0])
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=step * 1.001)
    assert sqnr(eager(fp32, args)[0], ours) > MIN_SQNR[scheme]


def _signature(graph: xs.XNNGraph) -> tuple[list, list]:
    """The blob's node kinds (with fused clamps) in order, and its values' datatypes, dims and quant params."""
    nodes = []
    for xnode in graph.xnodes:
        mm = xnode.output_min_max
        nodes.append((type(xnode.xnode_union).__name__, None if mm is None else (mm.output_min, mm.output_max)))
    values = []
    for value in graph.xvalues:
        tv, params = xs.tensor_value(value), getattr(value.xvalue_union, "quant_params", None)
        described = None
        if isinstance(params, xs.PerTensorQuant):
            described = ("tensor", round(params.scale, 7), params.zero_point)
        elif isinstance(params, xs.PerChannelQuant):
            described = ("channel", params.channel_dim, params.num_scales)
        elif isinstance(params, xs.PerTokenDynamicQuant):
            described = ("token", params.num_nonbatch_dims)
        values.append((tv.datatype.name, tuple(tv.dims), tv.flags, described))
    return nodes, sorted(values, key=repr)


# Lowering with ExecuTorch costs 10-40 s a case (plus ~20 s of imports once): two run by default, all with --slow.
BLOB_CASES = [
    pytest.param("mlp", "static", marks=pytest.mark.slow),
    ("cnn", "static"),
    pytest.param("ops", "static", marks=pytest.mark.slow),
    ("mlp", "dynamic"),
    pytest.param("cnn", "dynamic", marks=pytest.mark.slow),
    pytest.param("mlp", "8da4w", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("model", "scheme"), BLOB_CASES)
def test_blob_matches_executorchs(model: str, scheme: str):
    *_, pte = lowered(model, scheme)
    *_, their_pte = executorch_xnnpack_pte(model, scheme)
    ours, theirs = delegate_graphs(pte), delegate_graphs(their_pte)
    assert [_signature(g) for g in ours] == [_signature(g) for g in theirs]


def _break_first(graph: xs.XNNGraph, datatype: xs.XNNDatatype, change) -> xs.XNNGraph:
    graph = copy.deepcopy(graph)
    value = next(v for v in graph.xvalues if xs.tensor_value(v).datatype == datatype)
    change(value.xvalue_union)
    return graph


BROKEN = {
    "per-tensor params on QC8 weights": (
        xs.XNNDatatype.xnn_datatype_qcint8,
        lambda v: setattr(v, "quant_params", xs.PerTensorQuant(scale=0.1, zero_point=0)),
    ),
    "channel dim past the dims": (
        xs.XNNDatatype.xnn_datatype_qcint8,
        lambda v: setattr(v.quant_params, "channel_dim", 2),
    ),
    "scale count not the channel count": (
        xs.XNNDatatype.xnn_datatype_qcint32,
        lambda v: setattr(v.quant_params, "num_scales", v.quant_params.num_scales + 1),
    ),
    "NaN activation scale": (xs.XNNDatatype.xnn_datatype_qint8, lambda v: setattr(v.quant_params, "scale", math.nan)),
    "zero point out of int8": (xs.XNNDatatype.xnn_datatype_qint8, lambda v: setattr(v.quant_params, "zero_point", 200)),
    "QS8 value without params": (
        xs.XNNDatatype.xnn_datatype_qint8,
        lambda v: setattr(v, "quant_params", None),
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_validator_refuses_broken_quantized_values(case: str):
    *_, pte = lowered("mlp", "static")
    (graph,) = delegate_graphs(pte)
    validate_graph(graph, num_inputs=1, num_outputs=1)
    datatype, change = BROKEN[case]
    with pytest.raises(XnnpackGraphError):
        validate_graph(_break_first(graph, datatype, change), num_inputs=1, num_outputs=1)
