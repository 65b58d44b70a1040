"""The "Exporting custom LLMs" guide (seeds/002-exporting-custom-llms-nanogpt.txt) with ``edgetorch`` for ``executorch``.

A nanoGPT written here (Karpathy's model.py structure: tied embeddings, causal SDPA, GELU MLP, logits of the last
position only) with random weights and a small config is exported as the guide says, with a dynamic token
dimension, through the basic flow (``to_edge`` + ``to_executorch``, lines 20-55 of the guide) and the XNNPACK flow
(``to_edge_transform_and_lower`` + ``XnnpackPartitioner``, lines 76-118). Each ``.pte`` runs on our runtime at
several sequence lengths against eager; ExecuTorch's runtime runs both programs too.

Left out of the guide, and why:

* lines 8-11 and 27/88 (``curl``/``wget`` of model.py and vocab.json, ``GPT.from_pretrained('gpt2')``): no
  network in tests; the model below follows model.py with random weights;
* lines 24/44/85/107 (``torch.export.export_for_training``): torch 2.13 removed it; ``torch.export.export(...)
  .module()`` is its replacement and is used in its place;
* lines 252-300 (the C++ runner's ETDump and CMake options): our runtime writes the ETDump in its place.

The developer-tools section (lines 167-315) runs on the XNNPACK flow as written: ``get_delegation_info`` and
``format_delegated_graph`` on the lowered Edge program, ``generate_etrecord`` from the Edge manager copied right
after lowering (its graph holds the delegate calls), then ``Inspector(etdump_path=..., etrecord=...)`` and
``print_data_tabular``. ExecuTorch's ``parse_etrecord`` and Inspector read the same ETRecord and ETDump, in a
fresh interpreter (tests/interop/etrecord_worker.py).

The quantization section (lines 119-166) runs below as written: dynamic per-channel PT2E with edgetorch's
XNNPACKQuantizer and DuplicateDynamicQuantChainPass, then the XNNPACK flow. Our partitioner does not yet put
quantized patterns in XNNPACK blobs, so the quantize/dequantize ops run as portable kernels around the float
delegates. ExecuTorch's runtime is not asked to run it: with ``fold_quantize=False`` (as the guide writes) its
``quantize_per_channel`` kernel aborts on float32 scales.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import export
from torch.nn.attention import SDPBackend, sdpa_kernel

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from edgetorch.backends.xnnpack.utils.configs import get_xnnpack_edge_compile_config
from edgetorch.devtools import Inspector, generate_etrecord, parse_etrecord
from edgetorch.devtools.backend_debug import get_delegation_info
from edgetorch.exir import EdgeCompileConfig, to_edge, to_edge_transform_and_lower
from edgetorch.exir.backend.utils import format_delegated_graph
from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime
from tests.interop.etrecord_worker import assert_same, run_worker, summary
from tests.oracle import assert_close, run_executorch_calls


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias, as in nanoGPT."""

    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return self.lm_head(x[:, [-1], :]), None  # inference: the last position's logits only


LENGTHS = [1, 2, 9, 33, 63]  # tokens per call; the XNNPACK export's bound is block_size - 1 = 63


@functools.cache
def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig()).eval()


def _trace(example_inputs: tuple, dynamic_shape: tuple) -> torch.export.ExportedProgram:
    """The guide's two-step trace, with ``export(...).module()`` standing in for ``export_for_training``."""
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        m = export(_model(), example_inputs, dynamic_shapes=dynamic_shape).module()
        return export(m, example_inputs, dynamic_shapes=dynamic_shape)


@functools.cache
def _basic_pte() -> bytes:
    model = _model()
    example_inputs = (torch.randint(0, 100, (1, model.config.block_size), dtype=torch.long),)
    dynamic_shape = ({1: torch.export.Dim("token_dim", max=model.config.block_size)},)
    traced_model = _trace(example_inputs, dynamic_shape)
    edge_config = EdgeCompileConfig(_check_ir_validity=False)
    edge_manager = to_edge(traced_model, compile_config=edge_config)
    et_program = edge_manager.to_executorch()
    return et_program.buffer


@functools.cache
def _xnnpack_export() -> tuple:
    """The XNNPACK flow: (a copy of the Edge manager taken right after lowering, the executorch program)."""
    model = _model()
    example_inputs = (torch.randint(0, 100, (1, model.config.block_size - 1), dtype=torch.long),)
    dynamic_shape = ({1: torch.export.Dim("token_dim", max=model.config.block_size - 1)},)
    traced_model = _trace(example_inputs, dynamic_shape)
    edge_config = get_xnnpack_edge_compile_config()
    edge_manager = to_edge_transform_and_lower(
        traced_model, partitioner=[XnnpackPartitioner()], compile_config=edge_config
    )
    edge_manager_copy = copy.deepcopy(edge_manager)
    et_program = edge_manager.to_executorch()
    return edge_manager_copy, et_program


def _xnnpack_pte() -> bytes:
    return _xnnpack_export()[1].buffer


def _tokens(length: int) -> torch.Tensor:
    return torch.randint(0, _model().config.vocab_size, (1, length), generator=torch.Generator().manual_seed(length))


def _eager(length: int) -> list:
    with torch.no_grad():
        logits, loss = _model()(_tokens(length))
    return [logits.numpy(), loss]


@pytest.mark.parametrize("flow", ["basic", "xnnpack"])
def test_guide_program_runs_at_every_sequence_length(flow: str, tmp_path):
    pte = _basic_pte() if flow == "basic" else _xnnpack_pte()
    delegates = sum(len(p.delegates) for p in load_pte(pte).program.execution_plan)
    assert (delegates > 0) == (flow == "xnnpack"), f"{delegates} XNNPACK delegates in the {flow} program"
    path = tmp_path / "nanogpt.pte"
    with open(path, "wb") as file:
        file.write(pte)
    method = Runtime.get().load_program(path).load_method("forward")
    for length in LENGTHS + LENGTHS[::-1]:
        assert_close(method.execute([_tokens(length).numpy()]), _eager(length), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("flow", ["basic", "xnnpack"])
def test_guide_program_runs_on_executorch(flow: str):
    """ExecuTorch's runtime runs our program at every sequence length, XNNPACK delegates resized each call."""
    pte = _basic_pte() if flow == "basic" else _xnnpack_pte()
    got = run_executorch_calls(pte, [[_tokens(n).numpy()] for n in LENGTHS + LENGTHS[::-1]])
    for outputs, length in zip(got, LENGTHS + LENGTHS[::-1]):
        assert_close(outputs, _eager(length), rtol=1e-4, atol=1e-5)


def test_a_sequence_above_the_block_size_is_refused():
    method = Runtime.get().load_program(_basic_pte()).load_method("forward")
    with pytest.raises(ValueError, match="above its upper bound 64"):
        method.execute([np.zeros((1, 65), np.int64)])


def test_guide_quantization_section_runs_at_every_sequence_length():
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.transforms.duplicate_dynamic_quant_chain import DuplicateDynamicQuantChainPass
    from edgetorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    model = _model()
    example_inputs = (torch.randint(0, 100, (1, model.config.block_size - 1), dtype=torch.long),)
    dynamic_shape = ({1: torch.export.Dim("token_dim", max=model.config.block_size - 1)},)
    xnnpack_quant_config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    xnnpack_quantizer = XNNPACKQuantizer()
    xnnpack_quantizer.set_global(xnnpack_quant_config)
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        m = export(model, example_inputs, dynamic_shapes=dynamic_shape).module()
        m = prepare_pt2e(m, xnnpack_quantizer)
        m(*example_inputs)
        m = convert_pt2e(m, fold_quantize=False)
        DuplicateDynamicQuantChainPass()(m)
        traced_model = export(m, example_inputs, dynamic_shapes=dynamic_shape)
    edge_config = get_xnnpack_edge_compile_config()
    edge_manager = to_edge_transform_and_lower(
        traced_model, partitioner=[XnnpackPartitioner()], compile_config=edge_config
    )
    method = Runtime.get().load_program(edge_manager.to_executorch().buffer).load_method("forward")
    for length in LENGTHS:
        got, want = method.execute([_tokens(length).numpy()])[0], _eager(length)[0]
        sqnr = 10 * np.log10(np.mean(want**2) / np.mean((got - want) ** 2))
        assert got.shape == want.shape and sqnr > 30, f"length {length}: SQNR {sqnr:.1f} dB against fp32 eager"


def test_guide_developer_tools_section(tmp_path):
    """Delegation info, the delegated ETRecord, an ETDump and the Inspector, as the guide runs them (lines 167-315)."""
    from tabulate import tabulate

    edge_manager_copy, et_program = _xnnpack_export()
    graph_module = edge_manager_copy.exported_program().graph_module
    delegation_info = get_delegation_info(graph_module)
    assert "Total delegated subgraphs" in delegation_info.get_summary()
    df = delegation_info.get_operator_delegation_dataframe()
    assert "aten_view_copy_default" in tabulate(df, headers="keys", tablefmt="fancy_grid")
    assert "backend_id: XnnpackBackend" in format_delegated_graph(graph_module)

    etrecord_path = tmp_path / "etrecord.bin"
    generate_etrecord(etrecord_path, edge_manager_copy, et_program)
    record = parse_etrecord(etrecord_path)
    assert summary(record.edge_dialect_program) == summary(edge_manager_copy.exported_program())
    with torch.no_grad():  # the recorded program runs eagerly, each delegate through its original program
        logits, _ = record.edge_dialect_program.module()(_tokens(9))
    assert_close([logits.numpy()], _eager(9)[:1], rtol=1e-4, atol=1e-5)

    program = Runtime.get().load_program(et_program.buffer, enable_etdump=True)
    program.load_method("forward").execute([_tokens(9).numpy()])
    program.write_etdump_result_to_file(tmp_path / "etdump.etdp")
    inspector = Inspector(etdump_path=str(tmp_path / "etdump.etdp"), etrecord=str(etrecord_path))
    with open(tmp_path / "inspector_out.txt", "w") as file:
        inspector.print_data_tabular(file)
    table = (tmp_path / "inspector_out.txt").read_text()
    assert "XnnpackBackend" in table and "native_call_" in table
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    assert any(e.op_types and e.stack_traces for e in block.events if e.name.startswith("native_call_"))

    np.savez(tmp_path / "inputs.npz", _tokens(9).numpy())
    parsed, events = run_worker(
        tmp_path,
        [
            {"task": "parse", "etrecord": str(etrecord_path), "inputs": str(tmp_path / "inputs.npz")},
            {"task": "inspect", "etrecord": str(etrecord_path), "etdump": str(tmp_path / "etdump.etdp")},
        ],
    )
    assert_same(parsed, summary(edge_manager_copy.exported_program()))
    with np.load(tmp_path / "etrecord.bin.outputs.npz") as outputs:
        assert_close([outputs["arr_0"]], _eager(9)[:1], rtol=1e-4, atol=1e-5)
    assert {e["delegate_backend_name"] for e in events} >= {"XnnpackBackend"}
    operators = [e for e in events if e["name"].startswith("native_call_")]
    assert [e["name"] for e in operators] == [e.name for e in block.events if e.name.startswith("native_call_")]
    assert all(e["op_types"] and e["stack_traces"] for e in operators if e["name"] != "native_call_sym_size.int")
