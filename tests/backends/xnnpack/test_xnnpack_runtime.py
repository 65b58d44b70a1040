"""XNNPACK delegate blobs written by the real ExecuTorch 1.5.1: schema round trips and the NumPy runtime vs eager."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import build_blob, parse_blob
from edgetorch.backends.xnnpack.runtime import XnnpackBackend
from edgetorch.errors import DelegateLoadError, InvalidInputError
from edgetorch.format.flatbuffer import decode, encode
from edgetorch.format.program import DataLocation
from edgetorch.format.pte import load_pte, save_pte
from tests.oracle import assert_close, eager, executorch_pte, run_executorch


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8), nn.Sigmoid())

    def forward(self, x):
        return self.net(x)


class ConvNet(nn.Module):
    """Strided, dilated depthwise, grouped and transposed convolutions, max/avg pooling, fused activations."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1, stride=2)
        self.dw = nn.Conv2d(16, 32, 3, padding=2, dilation=2, groups=16)
        self.g = nn.Conv2d(32, 32, 3, padding=1, groups=4)
        self.t = nn.ConvTranspose2d(32, 8, 3, stride=2, padding=1, output_padding=1)
        self.t2 = nn.ConvTranspose2d(8, 8, 4, stride=2, padding=1, groups=2)

    def forward(self, x):
        y = F.max_pool2d(F.relu6(self.c1(x)), 3, stride=1, padding=1)
        y = self.g(F.hardswish(self.dw(y)))
        y = F.leaky_relu(self.t(F.avg_pool2d(y, 2)), 0.1)
        y = F.elu(self.t2(y))
        return torch.cat([y, torch.sigmoid(y)], 1).mean((2, 3), keepdim=True)


class InvertedResidual(nn.Module):
    """A MobileNetV2 block (batch norm folded by the lowering) and a classifier head."""

    def __init__(self, c=16, e=4):
        super().__init__()
        h = c * e
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c),
        )  # fmt: skip
        self.head = nn.Linear(c, 10)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(x + self.block(x), 1).flatten(1))


class TransformerBlock(nn.Module):
    """Pre-norm attention and GELU MLP: layer norm, batch matmul, softmax, reshapes and permutes."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln1, self.ln2, self.heads = nn.LayerNorm(d), nn.LayerNorm(d), heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, -1))
        a = ((q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Elementwise(nn.Module):
    """PReLU, bilinear resize (both corner modes), constant pad, slice, permute and the unary/binary node family."""

    def __init__(self):
        super().__init__()
        self.c, self.p = nn.Conv2d(3, 8, 1), nn.PReLU(8)

    def forward(self, x):
        y = self.p(self.c(x))
        z = F.interpolate(y, size=(9, 13), mode="bilinear", align_corners=True)
        y = F.pad(F.interpolate(y, scale_factor=2, mode="bilinear"), (1, 2, 3, 0), value=0.5)[:, 2:6, 1:-1, :]
        y = torch.clamp(y, -0.5, 0.7) + y.abs() * torch.neg(y) - torch.floor(y) / (torch.ceil(y).abs() + 1)
        y = torch.maximum(y, torch.minimum(y.square(), y.abs().sqrt())) + torch.rsqrt(y.abs() + 1)
        y = y + torch.exp(-y.abs()) + torch.log(y.abs() + 1) + torch.tanh(y)
        return y.permute(0, 2, 3, 1), z


class MatmulCat(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b), torch.cat([a, a * 2, a * 3, a * 4, a * 5], -1)


class DynamicBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x, image):
        return self.mlp(x).softmax(-1), self.conv(image).relu()


MODELS = {
    "mlp": (MLP, lambda: (torch.randn(4, 16),)),
    "convnet": (ConvNet, lambda: (torch.randn(2, 3, 32, 32),)),
    "inverted_residual": (InvertedResidual, lambda: (torch.randn(1, 16, 20, 20),)),
    "transformer_block": (TransformerBlock, lambda: (torch.randn(2, 8, 32),)),
    "elementwise": (Elementwise, lambda: (torch.randn(2, 3, 8, 10),)),
    "matmul_cat": (MatmulCat, lambda: (torch.randn(3, 4, 5), torch.randn(3, 5, 6))),
}


@functools.cache
def _lowered(name: str) -> tuple[nn.Module, tuple, bytes]:
    factory, make_args = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    args = make_args()
    return model, args, executorch_pte(model, args, xnnpack=True)


def _delegates(pte_bytes: bytes) -> list[tuple[memoryview, dict]]:
    """Every XNNPACK delegate blob in a program, with the program's named data."""
    pte = load_pte(pte_bytes)
    program = pte.program
    named = {nd.key: pte.segment(nd.segment_index) for nd in program.named_data or []}
    blobs = []
    for d in program.execution_plan[0].delegates:
        assert d.id == "XnnpackBackend"
        ref = d.processed
        inline = ref.location == DataLocation.INLINE
        blobs.append((program.backend_delegate_data[ref.index].data if inline else pte.segment(ref.index), named))
    return blobs


def _node_types(pte_bytes: bytes) -> set[str]:
    return {type(n.xnode_union).__name__ for blob, _ in _delegates(pte_bytes) for n in parse_blob(blob).graph.xnodes}


def _numpy(args):
    return [a.numpy() for a in args]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_through_runtime_matches_eager(name):
    from edgetorch.runtime import Runtime

    model, args, pte = _lowered(name)
    assert _node_types(pte), "the lowering delegated nothing; the test would not exercise the backend"
    method = Runtime.get().load_program(pte).load_method("forward")
    assert_close(method.execute(_numpy(args)), eager(model, args), rtol=1e-4, atol=1e-5)


def test_models_cover_the_node_family():
    seen = set().union(*(_node_types(_lowered(name)[2]) for name in MODELS))
    want = {
        "XNNFullyConnected", "XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d", "XNNMaxPooling2d",
        "XNNAvgPooling2d", "XNNGlobalAvgPooling2d", "XNNAdd", "XNNSubtract", "XNNMultiply", "XNNDiv",
        "XNNMinimum", "XNNMaximum", "XNNClamp", "XNNLeakyReLU", "XNNPReLU", "XNNHardswish",
        "XNNSigmoid", "XNNTanh", "XNNGelu", "XNNExp", "XNNLog", "XNNSquareRoot", "XNNReciprocalSquareRoot",
        "XNNAbs", "XNNNegate", "XNNFloor", "XNNCeiling", "XNNSquare", "XNNSoftmax", "XNNStaticTranspose",
        "XNNStaticReshape", "XNNStaticConstantPad", "XNNConcatenate2", "XNNConcatenate5", "XNNStaticSlice",
        "XNNBatchMatrixMultiply", "XNNStaticResizeBilinear2D",
    }  # fmt: skip
    assert want <= seen, f"not exercised: {sorted(want - seen)}"


def test_backend_directly_on_a_single_delegate():
    model, args, pte = _lowered("mlp")
    [(blob, named)] = _delegates(pte)
    backend = XnnpackBackend()
    handle = backend.init(blob, {}, named)
    out = np.zeros((4, 8), np.float32)
    assert backend.execute(handle, _numpy(args) + [out]) is None
    assert_close([out], eager(model, args))


def test_dynamic_batch_replans_and_resizes_outputs():
    from edgetorch.runtime import Runtime

    torch.manual_seed(0)
    model = DynamicBatch().eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    args = (torch.randn(8, 16), torch.randn(8, 4, 6, 6))
    pte = executorch_pte(model, args, dynamic_shapes=({0: batch}, {0: batch}), xnnpack=True)
    method = Runtime.get().load_program(pte).load_method("forward")
    for b in (4, 2, 8, 1, 2):
        inputs = (torch.randn(b, 16), torch.randn(b, 4, 6, 6))
        assert_close(method.execute(_numpy(inputs)), eager(model, inputs), rtol=1e-4, atol=1e-5)

    # Called directly, the backend writes resized outputs into the planned (upper-bound) output memory.
    [(blob, named)] = _delegates(pte)
    backend = XnnpackBackend()
    handle = backend.init(blob, {}, named)
    planned = [np.zeros((8, 4), np.float32), np.zeros((8, 4, 6, 6), np.float32)]
    inputs = (torch.randn(3, 16), torch.randn(3, 4, 6, 6))
    got = backend.execute(handle, _numpy(inputs) + planned)
    assert [g.shape for g in got] == [(3, 4), (3, 4, 6, 6)]
    assert all(np.shares_memory(g, p) for g, p in zip(got, planned))
    assert_close(got, eager(model, inputs), rtol=1e-4, atol=1e-5)


def test_intermediates_share_memory_once_dead():
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(16, 16), nn.ReLU())]).eval()
    x = torch.randn(4, 16)
    [(blob, named)] = _delegates(executorch_pte(model, (x,), xnnpack=True))
    backend = XnnpackBackend()
    handle = backend.init(blob, {}, named)
    [plan] = handle.schedules.values()
    outs = [s.keywords.get("out", s.args[0]) for s in plan.steps]  # the fast tier's bias + clamp: in place
    written = {id(o.base if o.base is not None else o) for o in outs}
    assert len(written) <= 3, f"six layer outputs use {len(written)} buffers; dead intermediates should be reused"
    for _ in range(2):
        out = np.zeros((4, 16), np.float32)
        backend.execute(handle, [x.numpy(), out])
        assert_close([out], eager(model, (x,)))


def test_tanh_gelu_matches_executorch_not_eager():
    """XNNPACK runs every GELU as the exact (erf) GELU; we follow ExecuTorch, which differs from eager here."""
    from edgetorch.runtime import Runtime

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(approximate="tanh")).eval()
    x = torch.randn(8, 16) * 2
    pte = executorch_pte(model, (x,), xnnpack=True)
    assert "XNNGelu" in _node_types(pte)
    ours = Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])
    assert_close(ours, run_executorch(pte, [x]), rtol=1e-5, atol=2e-6)
    exact = nn.Sequential(model[0], nn.GELU())
    assert_close(ours, eager(exact, (x,)), rtol=1e-5, atol=2e-6)


def test_graph_round_trips_through_our_writer():
    for name in MODELS:
        for blob, _ in _delegates(_lowered(name)[2]):
            graph = parse_blob(blob).graph
            assert decode(encode(graph, xs.FILE_IDENTIFIER), xs.XNNGraph) == graph


def test_blob_header_matches_executorch():
    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader

    blob, _ = _delegates(_lowered("mlp")[2])[0]
    graph = parse_blob(blob).graph
    ours = build_blob(graph, b"\x01" * 40)
    header = XNNHeader.from_bytes(ours[: XNNHeader.EXPECTED_LENGTH])
    assert header.is_valid() and header.constant_data_size == 40
    assert ours[header.constant_data_offset :] == b"\x01" * 40
    assert header.constant_data_offset % 16 == 0
    parsed = parse_blob(ours)
    assert parsed.graph == graph and bytes(parsed.constant_data) == b"\x01" * 40


def test_rewritten_blob_runs_on_executorch():
    """Blobs re-encoded by our writer load in the real XnnpackBackend and give the same numbers."""
    model, args, pte_bytes = _lowered("convnet")
    pte = load_pte(pte_bytes)
    program = pte.program
    segments = [bytes(pte.segment(i)) for i in range(len(program.segments))]
    for d in program.execution_plan[0].delegates:
        assert d.processed.location == DataLocation.SEGMENT
        parsed = parse_blob(segments[d.processed.index])
        segments[d.processed.index] = build_blob(parsed.graph, parsed.constant_data)
    rewritten = save_pte(program, segments)
    assert_close(run_executorch(rewritten, list(args)), eager(model, args), rtol=1e-4, atol=1e-5)


def _value(vid: int, dims: list, external: int = xs.INVALID_VALUE_ID, flags: int = 0, const: int = 0) -> xs.XValue:
    return xs.XValue(
        xs.XNNTensorValue(
            datatype=xs.XNNDatatype.xnn_datatype_fp32, num_dims=len(dims), dims=dims,
            constant_buffer_idx=const, external_id=external, flags=flags, id_out=vid,
        )
    )  # fmt: skip


def _attention_blob(q, k, v, scale, mask) -> bytes:
    consts = np.concatenate([scale.reshape(-1), mask.reshape(-1)]).astype(np.float32).tobytes()
    values = [
        _value(0, list(q.shape), 0, xs.VALUE_FLAG_EXTERNAL_INPUT),
        _value(1, list(k.shape), 1, xs.VALUE_FLAG_EXTERNAL_INPUT),
        _value(2, list(v.shape), 2, xs.VALUE_FLAG_EXTERNAL_INPUT),
        _value(3, list(scale.shape), const=1),
        _value(4, list(mask.shape), const=2),
        _value(5, list(q.shape[:-1]) + [v.shape[-1]], 3, xs.VALUE_FLAG_EXTERNAL_OUTPUT),
    ]
    node = xs.XNNScaledDotProductAttention(query_id=0, key_id=1, value_id=2, scale_id=3, mask_id=4, output_id=5)
    graph = xs.XNNGraph(
        version="0",
        xnodes=[xs.XNode(node)],
        xvalues=values,
        num_externs=4,
        input_ids=[0, 1, 2],
        output_ids=[5],
        constant_data=[
            xs.ConstantDataOffset(0, 0, ""),
            xs.ConstantDataOffset(0, scale.nbytes, ""),
            xs.ConstantDataOffset(scale.nbytes, mask.nbytes, ""),
        ],
    )
    return build_blob(graph, consts)


def test_hand_built_attention_blob():
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    scale = np.full(8, 8**-0.5, np.float32)
    mask = np.triu(np.full((5, 5), -np.inf, np.float32), 1)
    backend = XnnpackBackend()
    handle = backend.init(memoryview(_attention_blob(q, k, v, scale, mask)), {}, {})
    out = np.zeros((1, 2, 5, 8), np.float32)
    backend.execute(handle, _numpy((q, k, v)) + [out])
    assert_close([out], [F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()])


UNARY_NODES = {
    "elu": (xs.XNNELU(alpha=0.7), lambda x: F.elu(x, 0.7)),
    "sin": (xs.XNNSin(), torch.sin),
    "cos": (xs.XNNCos(), torch.cos),
    "copy": (xs.XNNCopy(), torch.clone),
    "leaky_relu_steep": (xs.XNNLeakyReLU(negative_slope=2.5), lambda x: F.leaky_relu(x, 2.5)),
}


@pytest.mark.parametrize("name", sorted(UNARY_NODES))
def test_hand_built_unary_node(name):
    """Nodes the 1.5.1 lowering never emits, in one-node graphs written with our schema."""
    node, reference = UNARY_NODES[name]
    node.input_id, node.output_id = 0, 1
    values = [
        _value(0, [2, 3, 4], 0, xs.VALUE_FLAG_EXTERNAL_INPUT),
        _value(1, [2, 3, 4], 1, xs.VALUE_FLAG_EXTERNAL_OUTPUT),
    ]
    graph = xs.XNNGraph(xnodes=[xs.XNode(node)], xvalues=values, num_externs=2, input_ids=[0], output_ids=[1])
    backend = XnnpackBackend()
    handle = backend.init(memoryview(build_blob(graph)), {}, {})
    x, out = torch.randn(2, 3, 4), np.zeros((2, 3, 4), np.float32)
    backend.execute(handle, [x.numpy(), out])
    assert_close([out], [reference(x).numpy()])


def test_unsupported_node_names_index_and_type():
    values = [
        _value(0, [1, 4, 4, 2], 0, xs.VALUE_FLAG_EXTERNAL_INPUT),
        _value(1, [1, 2, 2, 2], 1, 2),
        _value(2, [1, 2, 2, 2]),
    ]
    pool = xs.XNNArgMaxPooling2d(pooling_height=2, pooling_width=2, input_id=0, output_value_id=1, output_index_id=2)
    clamp = xs.XNNClamp(input_id=0, output_id=1)
    graph = xs.XNNGraph(xnodes=[xs.XNode(clamp), xs.XNode(pool)], xvalues=values, input_ids=[0], output_ids=[1])
    with pytest.raises(DelegateLoadError, match=r"node 1 \(XNNArgMaxPooling2d\)"):
        XnnpackBackend().init(memoryview(build_blob(graph)), {}, {})


def test_same_padding_flag_is_refused_at_init():
    values = [_value(0, [1, 4, 4, 2], 0, xs.VALUE_FLAG_EXTERNAL_INPUT), _value(1, [1, 2, 2, 2], 1, 2)]
    pool = xs.XNNMaxPooling2d(pooling_height=2, pooling_width=2, input_id=0, output_id=1, flags=0x4)
    graph = xs.XNNGraph(xnodes=[xs.XNode(pool)], xvalues=values, input_ids=[0], output_ids=[1])
    with pytest.raises(DelegateLoadError, match=r"node 0 \(XNNMaxPooling2d\).*SAME padding"):
        XnnpackBackend().init(memoryview(build_blob(graph)), {}, {})


def test_unsupported_quantized_datatype_is_refused_at_init():
    quantized = xs.XValue(
        xs.XNNQuantizedTensorValue(
            xs.XNNTensorValue(datatype=xs.XNNDatatype.xnn_datatype_qcint4, num_dims=1, dims=[4]),
            xs.PerChannelQuant(scale=[0.1] * 4, channel_dim=0),
        )
    )
    graph = xs.XNNGraph(xvalues=[quantized])
    with pytest.raises(DelegateLoadError, match="qcint4"):
        XnnpackBackend().init(memoryview(build_blob(graph)), {}, {})


def test_missing_named_constant_is_a_load_error():
    _, _, pte = _lowered("mlp")
    [(blob, _named)] = _delegates(pte)
    with pytest.raises(DelegateLoadError, match="named data"):
        XnnpackBackend().init(blob, {}, {})


def test_wrong_input_shape_is_an_input_error():
    _, _, pte = _lowered("convnet")
    blob, named = _delegates(pte)[0]
    backend = XnnpackBackend()
    handle = backend.init(blob, {}, named)
    with pytest.raises(InvalidInputError, match="XNNPACK node"):
        backend.execute(handle, [np.zeros((2, 5, 32, 32), np.float32), np.zeros((2, 16, 16, 16), np.float32)])
