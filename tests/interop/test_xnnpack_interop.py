"""edgetorch's XNNPACK lowering against the real ExecuTorch 1.5.1: its runtime runs our blobs, and our blobs
hold the same XNNPACK node kinds ExecuTorch's own lowering writes for the model.

The models and their lowering come from ``tests/backends/xnnpack/test_xnnpack_lowering.py``.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import pkgutil
import re

import pytest
import torch

from edgetorch.backends.xnnpack import operators, serialize
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.validate import validate_graph
from tests.backends.xnnpack.test_xnnpack_lowering import CASES, delegate_graphs, lowered
from tests.oracle import assert_close, eager, executorch_pte, run_executorch


@pytest.mark.parametrize("name", sorted(CASES))
def test_executorch_runs_our_xnnpack_program(name):
    low = lowered(name)
    got = run_executorch(low.pte, [x.numpy() for x in low.inputs])
    assert_close(got, eager(low.model, low.inputs), rtol=1e-4, atol=1e-4)


def emitted_node_kinds() -> set[str]:
    """Every XNNPACK node kind our serializer can write: the node classes the graph builder and the node
    visitors (``operators/``) name."""
    node_kinds = {kind.__name__ for kind in xs.XNODE_UNION.members}
    sources = [
        serialize,
        *(importlib.import_module(f"{operators.__name__}.{m.name}") for m in pkgutil.iter_modules(operators.__path__)),
    ]
    return node_kinds & {k for module in sources for k in re.findall(r"xs\.(XNN\w+)", inspect.getsource(module))}


def test_the_cases_cover_every_node_kind_we_emit():
    """So that ExecuTorch's runtime runs each kind of node we write (a new visitor needs a case here)."""
    seen = {
        type(n.xnode_union).__name__ for name in CASES for g in delegate_graphs(lowered(name).pte) for n in g.xnodes
    }
    # Convert nodes appear only in quantized blobs, which ExecuTorch runs in test_xnnpack_quantized_lowering.py.
    quantized_only = {"XNNConvert"}
    assert len(emitted_node_kinds()) > 40
    assert emitted_node_kinds() - seen - quantized_only == set()


@pytest.mark.parametrize("name", ["dynamic_conv", "dynamic_conv1d", "dynamic_mlp"])
def test_executorch_resizes_our_dynamic_batch(name):
    low = lowered(name)
    for batch in (1, 8):
        x = torch.randn(batch, *low.inputs[0].shape[1:])
        assert_close(run_executorch(low.pte, [x.numpy()]), eager(low.model, (x,)), rtol=1e-4, atol=1e-4)


HEAVY = {
    "XNNFullyConnected",
    "XNNConv2d",
    "XNNDepthwiseConv2d",
    "XNNConvTranspose2d",
    "XNNMaxPooling2d",
    "XNNAvgPooling2d",
    "XNNGlobalAvgPooling2d",
    "XNNBatchMatrixMultiply",
    "XNNSoftmax",
}


def blob_summary(pte: bytes) -> tuple[collections.Counter, list]:
    """The compute-heavy XNNPACK node kinds of all delegates, and each delegate's external value shapes."""
    kinds: collections.Counter = collections.Counter()
    externals = []
    for graph in delegate_graphs(pte):
        kinds.update(k for k in (type(n.xnode_union).__name__ for n in graph.xnodes) if k in HEAVY)
        values = [v.xvalue_union for v in graph.xvalues]
        externals.append(sorted((v.external_id, list(v.dims)) for v in values if v.flags))
    return kinds, externals


# Models ExecuTorch 1.5.1 lowers the same way (others differ on purpose: e.g. we delegate a mean without keepdim,
# and ExecuTorch's own batch-norm fusion fails on a batch norm after a non-conv op).
SAME_AS_EXECUTORCH = ["mlp", "mobile_block", "conv1d", "dynamic_mlp"]


@pytest.mark.parametrize("name", SAME_AS_EXECUTORCH)
def test_blobs_match_executorch_lowering(name):
    low, case = lowered(name), CASES[name]
    theirs = executorch_pte(low.model, low.inputs, dynamic_shapes=case.dynamic_shapes, xnnpack=True)
    assert blob_summary(low.pte) == blob_summary(theirs)
    for graph in delegate_graphs(theirs):
        validate_graph(graph)  # the validator accepts what ExecuTorch itself writes
