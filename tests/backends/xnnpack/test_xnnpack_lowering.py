"""XnnpackPartitioner + XnnpackBackend: lowered programs run on edgetorch's runtime and match eager.

Each model is exported, lowered with ``to_edge_transform_and_lower(ep,
partitioner=[XnnpackPartitioner()])`` and run by ``edgetorch.runtime`` (whose
XNNPACK runtime half executes the blob). The same programs run on the real
ExecuTorch in ``tests/interop/test_xnnpack_interop.py``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from edgetorch.backends.xnnpack import XnnpackPartitioner, get_xnnpack_edge_compile_config
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import parse_blob
from edgetorch.backends.xnnpack.serialize import XnnpackLoweringError
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.exir.backend import to_backend
from edgetorch.exir.dialects import to_aten
from edgetorch.exir.program import ops_to_keep
from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime
from tests.interop import models
from tests.oracle import assert_close, eager


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class MobileBlock(nn.Module):
    """Strided conv + batch norm (folded), depthwise and dilated grouped convs, pooling, transposed conv, head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Hardswish())
        self.grouped = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.head = nn.Sequential(nn.ConvTranspose2d(8, 4, 2, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = F.max_pool2d(self.grouped(self.depthwise(self.stem(x))), 2, ceil_mode=True)
        x = F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)
        return self.fc(self.head(x))


class BatchNorms(nn.Module):
    """One batch norm folds into its conv; one after a relu runs as a per-channel multiply-add."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)
        self.bn, self.bn2 = nn.BatchNorm2d(4), nn.BatchNorm2d(4)
        for bn in (self.bn, self.bn2):
            bn.running_mean.uniform_()
            bn.running_var.uniform_(1, 2)

    def forward(self, x):
        y = self.c(x)
        return self.bn(y), self.bn2(torch.relu(y)).mean((2, 3))


class TransposedConvBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.bn = nn.BatchNorm2d(6)
        self.bn.running_mean.uniform_()
        self.bn.running_var.uniform_(1, 2)

    def forward(self, x):
        return F.max_pool2d(self.bn(self.t(x)), 3, stride=2, padding=1) + 1.0


class Elementwise(nn.Module):
    """Binary ops with scalars and broadcasting, unary math, activations, softmax and log-softmax."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))
        self.prelu = nn.PReLU(3)

    def forward(self, x, y):
        a = torch.minimum(x + y * 2.0, x - y) / (y.abs() + 1.0)
        b = torch.maximum(F.elu(a, 0.5), F.leaky_relu(a, 0.2)) * self.w
        c = torch.exp(-b.abs()) + torch.log(b.abs() + 1) + torch.sqrt(b.abs()) + torch.rsqrt(b.abs() + 1)
        d = torch.floor(c) + torch.ceil(c) + torch.square(c) + torch.clamp(c, -1, 3) + F.hardtanh(c)
        e = torch.sigmoid(d) + torch.tanh(d) + F.gelu(d) + F.hardswish(d) + F.relu(d)
        return e, torch.softmax(e, -1), torch.log_softmax(e, -1), self.prelu(d)


class Shapes(nn.Module):
    def forward(self, x, y):
        p = x.permute(0, 2, 1)
        c = torch.cat([p, y, p * 2], dim=1)
        s = c[:, 4:20, 1:5]
        v = s.reshape(2, 4, 16).unsqueeze(1).squeeze(1)
        return F.pad(v, (1, 2, 0, 1), value=0.5), torch.cat([x] * 8, dim=2)


class Spatial(nn.Module):
    """Channels-last chains: a cat, PReLU, bilinear resizes, padding and a permute read straight from NHWC."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(4, 4, 1)
        self.prelu = nn.PReLU(4)

    def forward(self, x):
        a = self.c(x)
        b = torch.cat([a, torch.relu(a)], 1)
        u = F.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False)
        v = F.interpolate(b, size=(5, 7), mode="bilinear", align_corners=True)
        return self.prelu(a) * 2, u.mean((2, 3), keepdim=True), v, F.pad(a, (1, 1, 1, 1)), a.permute(0, 2, 3, 1)


class Attention(nn.Module):
    def forward(self, q, k, v, mask):
        scores = torch.bmm(q, k.transpose(1, 2)) / 4.0
        masked = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)
        return torch.bmm(torch.softmax(scores, -1), v), masked


class TransformerBlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class DynamicConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.bn(self.c(x))), 2)
        return self.fc(y.mean((2, 3))), torch.softmax(y.flatten(1), -1)


class DynamicMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).reshape(x.shape[0], 2, 2).permute(0, 2, 1)


class UnsupportedInMiddle(nn.Module):
    """cumsum has no XNNPACK node: the linears on either side become two delegates."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.cumsum(self.a(x), dim=-1)) + x[:, :4]


class Int64InMiddle(nn.Module):
    """int64 arithmetic stays with the portable runtime; its float result joins the delegate."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x, idx):
        k = (idx * 3 + 1) % 8
        return self.b(torch.relu(self.a(x)) + k.to(torch.float32)), k


class Activations(nn.Module):
    """Every activation a user reaches for, in one program (one ExecuTorch run covers them all)."""

    def __init__(self):
        super().__init__()
        self.prelu = nn.PReLU(8)

    def forward(self, x):
        return (
            torch.softmax(x, -1),
            torch.log_softmax(x, -1),
            F.gelu(x),
            F.gelu(x, approximate="tanh"),
            F.silu(x),
            F.hardswish(x),
            F.hardsigmoid(x),
            F.elu(x),
            F.leaky_relu(x),
            torch.sigmoid(x),
            torch.tanh(x),
            F.softplus(x),
            torch.erf(x),
            F.mish(x),
            self.prelu(x),
            F.relu6(x),
            torch.sin(x) + torch.cos(x),
        )


class LinearClamp(nn.Module):
    """The export tutorial's model: a linear layer, then a clamp."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return torch.clamp(self.linear(x), min=-0.25, max=0.25)


class CausalAttention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def encoder_layer() -> nn.Module:
    return nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)


@dataclass
class Case:
    make: Any
    inputs: tuple
    dynamic_shapes: Any = None
    delegates: int = 1
    undelegated: tuple = ()  # op names expected outside the delegates


# Embedding, layer norm and the boolean attention mask's arithmetic stay with the portable runtime.
MHA_UNDELEGATED = (
    "full",
    "arange",
    "scalar_tensor",
    "embedding",
    "unsqueeze_copy",
    "native_layer_norm",
    "sub",
    "ge",
    "logical_and",
    "full_like",
    "select_copy",
    "where",
)
BATCH = torch.export.Dim("batch", min=1, max=8)

CASES = {
    "mlp": Case(MLP, (torch.randn(3, 16),)),
    "mobile_block": Case(MobileBlock, (torch.randn(2, 3, 16, 16),)),
    "conv1d": Case(models.Conv1d, (torch.randn(2, 4, 10),)),
    "convnet_padded_avg_pool": Case(
        models.ConvNet, (torch.randn(1, 3, 32, 32),), delegates=2, undelegated=("avg_pool2d",)
    ),
    "mha_transformer": Case(
        models.TransformerBlock,
        (torch.randint(0, 50, (2, 6)),),
        delegates=3,
        undelegated=MHA_UNDELEGATED,
    ),
    "batch_norms": Case(BatchNorms, (torch.randn(2, 3, 8, 8),)),
    "transposed_conv_bn": Case(TransposedConvBatchNorm, (torch.randn(1, 4, 5, 5),)),
    "elementwise": Case(Elementwise, (torch.randn(2, 3, 8), torch.rand(2, 3, 8)), undelegated=("gt", "where")),
    "shapes": Case(Shapes, (torch.randn(2, 6, 8), torch.randn(2, 8, 6)), delegates=2),
    "spatial": Case(Spatial, (torch.randn(1, 4, 6, 6),)),
    "attention": Case(
        Attention, (torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(2, 7, 8), torch.randn(5, 7)), delegates=2
    ),
    "transformer_block": Case(
        TransformerBlock,
        (torch.randn(2, 6, 32),),
        delegates=3,
        undelegated=("native_layer_norm", "split_with_sizes_copy"),
    ),
    # Unconnected outputs make one delegate each; tanh-approximated GELU, erf and softplus's pieces stay portable.
    "activations": Case(
        Activations, (torch.randn(2, 8),), delegates=16, undelegated=("erf", "gelu", "gt", "log1p", "where")
    ),
    "linear_clamp": Case(LinearClamp, (torch.randn(2, 4),)),
    "causal_attention": Case(CausalAttention, tuple(torch.randn(1, 2, 5, 8) for _ in range(3))),
    "encoder_layer": Case(
        encoder_layer, (torch.randn(2, 6, 32),), delegates=3, undelegated=("native_layer_norm", "select_copy")
    ),
    "dynamic_conv": Case(DynamicConv, (torch.randn(3, 3, 8, 8),), {"x": {0: BATCH}}, 2, ("sym_size", "view_copy")),
    "dynamic_conv1d": Case(models.Conv1d, (torch.randn(3, 4, 10),), {"x": {0: BATCH}}),
    "dynamic_mlp": Case(DynamicMLP, (torch.randn(3, 16),), {"x": {0: BATCH}}, 2, ("sym_size", "view_copy")),
    "unsupported_in_middle": Case(UnsupportedInMiddle, (torch.randn(3, 8),), delegates=2, undelegated=("cumsum",)),
    "int64_in_middle": Case(
        Int64InMiddle,
        (torch.randn(3, 8), torch.arange(8)),
        undelegated=("mul", "add", "remainder", "_to_dim_order_copy"),
    ),
}


@dataclass
class Lowered:
    model: nn.Module
    inputs: tuple
    pte: bytes
    delegates: int  # delegate calls in the lowered program
    delegated: int  # Edge operator nodes inside the delegates
    undelegated: list[str]  # operator names left to the portable runtime


def op_name(target: Any) -> str:
    """An operator's name without namespace or overload (``mul`` for ``aten.mul.Tensor``)."""
    op = to_aten(target)
    return getattr(op, "_opname", None) or op.__name__


@functools.cache
def lowered(name: str) -> Lowered:
    """Lower case ``name`` once per session (the ExecuTorch interop tests reuse it)."""
    case = CASES[name]
    torch.manual_seed(0)
    model = case.make().eval()
    ep = torch.export.export(model, case.inputs, dynamic_shapes=case.dynamic_shapes, strict=False)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    gm = edge.exported_program().graph_module
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target.__name__ != "getitem"]
    modules = [getattr(gm, n.args[0].target) for n in calls if n.target.__name__ == "executorch_call_delegate"]
    delegated = sum(1 for m in modules for n in m.original_module.graph.nodes if n.op == "call_function")
    others = [op_name(n.target) for n in calls if op_name(n.target) != "executorch_call_delegate"]
    return Lowered(model, case.inputs, edge.to_executorch().buffer, len(modules), delegated, others)


def run_edgetorch(pte: bytes, inputs: list) -> list:
    method = Runtime.get().load_program(pte).load_method("forward")
    return method.execute([np.asarray(x) for x in inputs])


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_program_matches_eager(name):
    case, low = CASES[name], lowered(name)
    assert low.delegates == case.delegates, f"{low.delegates} delegates; undelegated: {low.undelegated}"
    assert sorted(set(low.undelegated)) == sorted(case.undelegated)
    got = run_edgetorch(low.pte, [x.numpy() for x in low.inputs])
    assert_close(got, eager(low.model, low.inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["dynamic_conv", "dynamic_conv1d", "dynamic_mlp"])
def test_dynamic_batch_runs_at_every_size(name):
    low = lowered(name)
    method = Runtime.get().load_program(low.pte).load_method("forward")
    for batch in (1, 5, 8):
        x = torch.randn(batch, *low.inputs[0].shape[1:])
        assert_close(method.execute([x.numpy()]), eager(low.model, (x,)), rtol=1e-4, atol=1e-4)


def delegate_graphs(pte: bytes) -> list[xs.XNNGraph]:
    """The XNNGraph of every delegate in a .pte (blobs inline or in segments)."""
    pte_file = load_pte(pte)
    program = pte_file.program
    graphs = []
    for delegate in program.execution_plan[0].delegates:
        ref = delegate.processed
        data = program.backend_delegate_data[ref.index].data if ref.location == 0 else pte_file.segment(ref.index)
        graphs.append(parse_blob(data).graph)
    return graphs


def test_conv_chain_stays_channels_last():
    """Convs, pools and activations share NHWC values: one transpose in, one out."""
    (graph,) = delegate_graphs(lowered("mobile_block").pte)
    kinds = [type(n.xnode_union).__name__ for n in graph.xnodes]
    assert kinds.count("XNNStaticTranspose") == 2, kinds
    assert kinds[0] == "XNNStaticTranspose" and kinds.count("XNNConv2d") == 2 and "XNNDepthwiseConv2d" in kinds
    assert "XNNConvTranspose2d" in kinds and "XNNGlobalAvgPooling2d" in kinds


def test_constants_are_named_data_of_the_program_and_externals_are_ordered():
    # ExecuTorch frees the blob after compiling it; XNNPACK reads element-wise static operands at run time.
    pte = lowered("mlp").pte
    (graph,) = delegate_graphs(pte)
    assert len(graph.constant_data) == 7  # the reserved entry 0, then three weights and three biases
    named = {entry.key for entry in load_pte(pte).program.named_data}
    for entry in graph.constant_data[1:]:
        assert entry.offset == xs.NAMED_CONSTANT_OFFSET and entry.named_key in named
    values = [xs.tensor_value(v) for v in graph.xvalues]
    assert [values[i].external_id for i in graph.input_ids] == [0]
    assert [values[i].external_id for i in graph.output_ids] == [1]
    assert graph.num_externs == 2


def test_batch_norm_after_conv_is_folded():
    (graph,) = delegate_graphs(lowered("transposed_conv_bn").pte)
    kinds = [type(n.xnode_union).__name__ for n in graph.xnodes]
    assert "XNNConvTranspose2d" in kinds and "XNNMultiply" not in kinds, kinds


def test_linear_and_attention_reach_the_partitioner_whole():
    case = CASES["transformer_block"]
    ep = torch.export.export(case.make().eval(), case.inputs, strict=False)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    gm = edge.exported_program().graph_module
    ops = {
        op_name(n.target)
        for node in gm.graph.nodes
        if node.op == "get_attr"
        for n in getattr(gm, node.target).original_module.graph.nodes
        if n.op == "call_function"
    }
    assert {"linear", "scaled_dot_product_attention"} <= ops and "addmm" not in ops


def test_attention_with_dropout_is_decomposed():
    class Dropout(nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)

    ep = torch.export.export(Dropout(), (torch.randn(1, 2, 4, 8),), strict=False)
    assert torch.ops.aten.scaled_dot_product_attention.default in {n.target for n in ep.graph.nodes}
    kept = ops_to_keep(ep, [XnnpackPartitioner()])
    assert torch.ops.aten.scaled_dot_product_attention.default not in kept
    assert torch.ops.aten.linear.default in kept


def test_preprocess_names_an_unsupported_node():
    ep = torch.export.export(UnsupportedInMiddle().eval(), (torch.randn(3, 8),), strict=False)
    edge = to_edge(ep, compile_config=get_xnnpack_edge_compile_config())
    with pytest.raises(XnnpackLoweringError, match="cumsum"):
        to_backend("XnnpackBackend", edge.exported_program(), [])
