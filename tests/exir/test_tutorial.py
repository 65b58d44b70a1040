"""The export tutorial's code paths (seeds/000) with edgetorch imports, up to and through to_executorch."""

import pytest
import torch

# Imported before any edgetorch lowering so both define the shared dim_order_ops library once.
et_runtime = pytest.importorskip("executorch.runtime")

from edgetorch.exir import EdgeProgramManager, ExecutorchBackendConfig, to_edge  # noqa: E402
from edgetorch.exir.capture import capture_pre_autograd_graph, export  # noqa: E402
from edgetorch.exir.dialects._ops import exir_ops  # noqa: E402
from edgetorch.exir.pass_base import ExportPass  # noqa: E402
from edgetorch.exir.passes import MemoryPlanningPass  # noqa: E402


class SimpleConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(in_channels=3, out_channels=16, kernel_size=3, padding=1)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.conv(x)
        return self.relu(a)


class ConvertReluToSigmoid(ExportPass):
    def call_operator(self, op, args, kwargs, meta):
        if op == exir_ops.edge.aten.relu.default:
            return super().call_operator(exir_ops.edge.aten.sigmoid.default, args, kwargs, meta)
        else:
            return super().call_operator(op, args, kwargs, meta)


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.param = torch.nn.Parameter(torch.rand(3, 4))
        self.linear = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.linear(x + self.param).clamp(min=0.0, max=1.0)


def test_simple_conv_to_edge_and_transform():
    model = SimpleConv()
    example_args = (torch.randn(1, 3, 16, 16),)
    pre_autograd_aten_dialect = capture_pre_autograd_graph(model, example_args)
    aten_dialect = export(pre_autograd_aten_dialect, example_args)
    edge_program: EdgeProgramManager = to_edge(aten_dialect)
    assert "convolution" in str(edge_program.exported_program())

    transformed_edge_program = edge_program.transform((ConvertReluToSigmoid(),))
    printed = str(transformed_edge_program.exported_program())
    assert "aten_sigmoid_default" in printed and "aten_relu_default" not in printed
    x = example_args[0]
    torch.testing.assert_close(
        transformed_edge_program.exported_program().module()(x), torch.sigmoid(model.conv(x)), atol=1e-5, rtol=1e-5
    )


def test_encode_decode_methods():
    torch.manual_seed(0)
    w_encode, w_decode = torch.randn(5, 10), torch.randn(10, 5)

    def encode(x):
        return torch.nn.functional.linear(x, w_encode)

    def decode(x):
        return torch.nn.functional.linear(x, w_decode)

    encode_args = (torch.randn(1, 10),)
    aten_encode = export(capture_pre_autograd_graph(encode, encode_args), encode_args)
    decode_args = (torch.randn(1, 5),)
    aten_decode = export(capture_pre_autograd_graph(decode, decode_args), decode_args)
    edge_program = to_edge({"encode": aten_encode, "decode": aten_decode})
    assert edge_program.methods == {"encode", "decode"}
    for method, fn, args in (("encode", encode, encode_args), ("decode", decode, decode_args)):
        torch.testing.assert_close(edge_program.exported_program(method).module()(*args), fn(*args))


def _run_pte(buffer: bytes, inputs):
    program = et_runtime.Runtime.get().load_program(buffer)
    return program.load_method("forward").execute(list(inputs))


def test_end_to_end_program_runs_in_executorch():
    torch.manual_seed(0)
    model = M()
    example_args = (torch.randn(3, 4),)
    aten_dialect = export(capture_pre_autograd_graph(model, example_args), example_args)
    edge_program = to_edge(aten_dialect)
    executorch_program = edge_program.to_executorch(
        ExecutorchBackendConfig(passes=[], memory_planning_pass=MemoryPlanningPass("greedy"))
    )
    (out,) = _run_pte(executorch_program.buffer, example_args)
    torch.testing.assert_close(out, model(*example_args), atol=1e-5, rtol=1e-5)


def test_transformed_program_runs_in_executorch():
    model = SimpleConv()
    x = torch.randn(1, 3, 8, 8)
    edge_program = to_edge(torch.export.export(model, (x,))).transform([ConvertReluToSigmoid()])
    (out,) = _run_pte(edge_program.to_executorch().buffer, (x,))
    torch.testing.assert_close(out, torch.sigmoid(model.conv(x)), atol=1e-4, rtol=1e-4)


class TinyGPT(torch.nn.Module):
    """A one-block nanoGPT (seeds/002): embeddings, causal SDPA attention, GELU MLP, last-token head."""

    def __init__(self, vocab=50, block=8, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(block, dim)
        self.ln, self.qkv, self.proj = torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(0, t, dtype=torch.long))
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in self.qkv(self.ln(x)).split(x.shape[2], dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, -1))
        x = x + self.mlp(x)
        return self.head(x[:, [-1], :])


def test_nanogpt_with_dynamic_tokens_matches_executorch():
    import collections

    et_exir = pytest.importorskip("executorch.exir")
    torch.manual_seed(0)
    model = TinyGPT().eval()
    example = (torch.randint(0, 50, (1, 4)),)
    dynamic_shape = ({1: torch.export.Dim("token_dim", max=8)},)

    def op_counts(manager):
        nodes = manager.exported_program().graph_module.graph.nodes
        return collections.Counter(
            str(n.target if isinstance(n.target, torch._ops.OpOverload) else getattr(n.target, "_op", n.target))
            for n in nodes
            if n.op == "call_function"
        )

    edge = to_edge(torch.export.export(model, example, dynamic_shapes=dynamic_shape))
    reference = et_exir.to_edge(torch.export.export(model, example, dynamic_shapes=dynamic_shape))
    assert op_counts(edge) == op_counts(reference)

    edge = edge.transform([ConvertReluToSigmoid()])  # an ExportPass re-trace under symbolic shapes
    pte = edge.to_executorch().buffer
    for tokens in (1, 6):
        idx = torch.randint(0, 50, (1, tokens))
        torch.testing.assert_close(edge.exported_program().module()(idx), model(idx))
        (out,) = _run_pte(pte, (idx,))
        torch.testing.assert_close(out, model(idx), atol=1e-4, rtol=1e-4)
