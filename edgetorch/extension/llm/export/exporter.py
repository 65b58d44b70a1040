"""Export an LLM checkpoint to a ``.pte``: ExecuTorch's ``export_llm``, as one function (``export_llm``).

``export_llm(checkpoint, ...)`` loads a Hugging Face folder or a GGUF file into
:class:`~edgetorch.extension.llm.model.Transformer`, exports ``forward(tokens, input_pos)`` with a
dynamic prompt length and the KV cache as mutable buffers, lowers it (portable kernels or XNNPACK),
and writes the metadata methods the runner reads (``get_bos_id``, ``get_eos_ids``, ``get_max_seq_len``,
``get_max_context_len``, ``get_vocab_size``, ``use_kv_cache``, ``use_sdpa_with_kv_cache``,
``enable_dynamic_shape``). May import torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.embedding_quant import parse_embedding_quantize, quantize_embeddings
from edgetorch.extension.llm.export.checkpoint import Checkpoint, load_checkpoint
from edgetorch.extension.llm.model import ModelArgs, Transformer
from edgetorch.extension.llm.model.transformer import pack_for_decode

__all__ = ["export_llm", "build_model", "export_program", "load_checkpoint", "metadata_of", "quantize_model"]

BACKENDS = ("portable", "xnnpack")
QUANTIZE = ("none", "int8", "8da4w", "8da4w-q41")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def build_model(checkpoint: Checkpoint) -> Transformer:
    """The eval-mode model with the checkpoint's weights (every parameter must be present)."""
    args = checkpoint.args
    model = Transformer(args)
    state = dict(checkpoint.state_dict)
    if args.arch == "gpt2":
        positions = state["pos_embeddings.weight"]
        if positions.shape[0] < args.max_context_len:
            raise InvalidInputError(
                f"the checkpoint has {positions.shape[0]} learned positions; max_context_len "
                f"{args.max_context_len} needs as many, lower it"
            )
        state["pos_embeddings.weight"] = positions[: args.max_context_len]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise InvalidInputError(
            f"checkpoint weights do not match the {checkpoint.args.arch} model: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}; check that config.json describes these weights"
        )
    return model.eval()


def metadata_of(args: ModelArgs, bos_id: int | None, eos_ids: list[int]) -> dict[str, Any]:
    """The constant methods ExecuTorch's LLM runner reads, by name."""
    metadata: dict[str, Any] = {
        "get_max_seq_len": args.max_seq_len,
        "get_max_context_len": args.max_context_len,
        "get_vocab_size": args.vocab_size,
        "use_kv_cache": args.use_kv_cache,
        "use_sdpa_with_kv_cache": args.use_sdpa_with_kv_cache,
        "enable_dynamic_shape": True,
    }
    if bos_id is not None:
        metadata["get_bos_id"] = int(bos_id)
    if eos_ids:
        metadata["get_eos_ids"] = [int(i) for i in eos_ids]
    return metadata


def export_program(model: Transformer) -> torch.export.ExportedProgram:
    """``torch.export`` of ``forward(tokens [1, 1..max_seq_len], input_pos [1])``."""
    args = model.args
    tokens = torch.zeros((1, min(2, args.max_seq_len)), dtype=torch.long)
    if not args.use_kv_cache:
        dynamic = ({1: torch.export.Dim("seq_len", min=1, max=args.max_seq_len)},)
        with torch.no_grad():
            return torch.export.export(model, (tokens,), dynamic_shapes=dynamic, strict=False)
    input_pos = torch.zeros((1,), dtype=torch.long)
    dynamic = ({1: torch.export.Dim("seq_len", min=1, max=args.max_seq_len)}, None)
    with torch.no_grad():
        return torch.export.export(model, (tokens, input_pos), dynamic_shapes=dynamic, strict=False)


def quantize_model(
    model: Transformer,
    mode: str,
    group_size: int = 32,
    q4_1_blocks: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    tie_embedding: bool = True,
) -> None:
    """torchao's ``quantize_`` on the linears: ``int8`` weight-only per channel on every linear but the output,
    or ``8da4w`` (int8 dynamic activations, int4 weights in groups of ``group_size``).

    With 8da4w the output projection is quantized too, as ExecuTorch's 8da4w does, but with 8-bit
    per-channel weights (8da8w, ExecuTorch's ``8da4w_output_8da8w``): the vocabulary projection is the
    largest matrix of a small model (SmolLM2-135M: 28 M of 135 M weights) and read at every token, while its
    4-bit form costs the most accuracy. When the model ties its embedding to that projection
    (``tie_embedding`` and the same tensor), the table becomes the projection's int8 values and per-row
    scales (``embedding_byte``), so the program stores them once (see :func:`tied_embedding`).

    ``8da4w-q41`` (a Q4_1 GGUF checkpoint, ``q4_1_blocks`` from :class:`Checkpoint`): the Q4_1 linears
    become 8da4w linears on the file's own blocks plus a per-block offset term
    (:mod:`edgetorch.extension.llm.q4_1_linear`); any other linear but the output gets plain 8da4w.
    """
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    plain: set[str] | None = None  # with 8da4w-q41, the linears that have no Q4_1 blocks
    if mode == "8da4w-q41":
        from edgetorch.extension.llm.q4_1_linear import BLOCK, quantize_q4_1_linears

        if group_size != BLOCK:
            raise InvalidInputError(
                f"8da4w-q41 keeps Q4_1's blocks of {BLOCK} weights, so its group size is {BLOCK}, got "
                f"{group_size}; pass group_size={BLOCK} or use 8da4w"
            )
        plain = set(quantize_q4_1_linears(model, q4_1_blocks or {}))

    def wanted(module: torch.nn.Module, fqn: str) -> bool:
        return isinstance(module, torch.nn.Linear) and fqn != "output" and (plain is None or fqn in plain)

    if mode == "int8":
        quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)), filter_fn=wanted)
        return
    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size))
    quantize_(model, config, filter_fn=wanted)
    output = getattr(model, "output", None)
    if not isinstance(output, torch.nn.Linear):
        return
    # quantize_ gives the output a new weight; a tied table keeps the old one until it follows below.
    tied = tie_embedding and getattr(getattr(model, "tok_embeddings", None), "weight", None) is output.weight
    head = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    quantize_(model, head, filter_fn=lambda module, fqn: fqn == "output")
    if tied:
        from edgetorch.extension.llm.embedding_quant import tied_embedding

        model.tok_embeddings = tied_embedding(output)


_MERGED = {
    "attention.wqkv": ("attention.wq", "attention.wk", "attention.wv"),
    "feed_forward.w13": ("feed_forward.w1", "feed_forward.w3"),
}


def merged_blocks(
    blocks: dict[str, tuple[torch.Tensor, torch.Tensor]], layers: int, gate_up: bool = True
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``blocks`` (a Q4_1 checkpoint's per-block scale and min, by linear) for the linears that
    ``pack_for_decode(linears=True)`` stacks (q/k/v, and gate/up unless ``gate_up`` is False): the parts' rows
    stacked in the same order. Parts missing from ``blocks`` leave the merged linear out (it gets plain 8da4w)."""
    merged = dict(blocks)
    for i in range(layers):
        for into, parts in _MERGED.items():
            if into == "feed_forward.w13" and not gate_up:
                continue
            names = [f"layers.{i}.{part}" for part in parts]
            found = [merged.pop(name) for name in names if name in merged]
            if len(found) == len(names):
                merged[f"layers.{i}.{into}"] = (torch.cat([f[0] for f in found]), torch.cat([f[1] for f in found]))
    return merged


def export_llm(
    checkpoint: str | Path | Checkpoint,
    output: str | Path | None = None,
    *,
    backend: str = "portable",
    max_seq_len: int = 128,
    max_context_len: int = 128,
    dtype: str = "fp32",
    quantize: str = "none",
    group_size: int = 32,
    use_kv_cache: bool = True,
    use_sdpa_with_kv_cache: bool = False,
    embedding_quantize: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> bytes:
    """Export ``checkpoint`` (a model folder, a ``.gguf`` file, or a loaded :class:`Checkpoint`) to ``.pte`` bytes.

    Writes them to ``output`` too when given. ``metadata`` adds or replaces constant methods.
    ``embedding_quantize`` is ExecuTorch's ``"<bits>,<group size>"`` (``"8,0"``, ``"4,32"``): the token
    embedding table in 8 or 4 bits (``quantized_decomposed::embedding_byte`` / ``embedding_4bit``).
    ``quantize``: ``none``, ``int8`` (weight-only per channel), ``8da4w`` (ExecuTorch's: torchao int8
    dynamic activations, symmetric int4 weights in groups of ``group_size``) or ``8da4w-q41`` (a Q4_1
    GGUF checkpoint's own blocks as 8da4w weights plus a per-block offset term; see :func:`quantize_model`).
    """
    if backend not in BACKENDS:
        raise InvalidInputError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if embedding_quantize:
        parse_embedding_quantize(embedding_quantize)  # refuse a bad spec before the slow part
    if quantize not in QUANTIZE:
        raise InvalidInputError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
    if dtype not in DTYPES:
        raise InvalidInputError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if max_context_len < max_seq_len:
        raise InvalidInputError(
            f"max_context_len ({max_context_len}) must be at least max_seq_len ({max_seq_len}); raise it"
        )
    options = dict(
        max_seq_len=max_seq_len,
        max_context_len=max_context_len,
        use_kv_cache=use_kv_cache,
        use_sdpa_with_kv_cache=use_sdpa_with_kv_cache,
    )
    if isinstance(checkpoint, Checkpoint):
        for name, value in options.items():
            setattr(checkpoint.args, name, value)
    else:
        checkpoint = load_checkpoint(checkpoint, **options)
    model = build_model(checkpoint)
    if embedding_quantize:
        quantize_embeddings(model, embedding_quantize)
    blocks = checkpoint.q4_1_blocks
    if quantize == "none" and backend == "portable":
        pack_for_decode(model)
    elif quantize != "none" or backend == "xnnpack":  # q/k/v (and gate/up) as one linear each
        delegated = backend == "xnnpack"  # gate and up stay apart (see pack_for_decode)
        pack_for_decode(model, linears=True, delegated=delegated)
        blocks = merged_blocks(blocks, len(model.layers), gate_up=not delegated)
    # Weights, KV caches and RoPE tables in the export dtype; RMSNorm still reduces in float32.
    model.to(DTYPES[dtype])
    if quantize != "none":
        quantize_model(model, quantize, group_size, blocks)
    program = export_program(model)
    constants = metadata_of(checkpoint.args, checkpoint.bos_id, checkpoint.eos_ids) | (metadata or {})
    return lower_to_pte(program, backend, constants, output)


def lower_to_pte(
    programs: Any, backend: str, constant_methods: dict[str, Any], output: str | Path | None = None
) -> bytes:
    """Exported program(s) of a decoder with KV caches lowered to ``.pte`` bytes (written to ``output`` when
    given): portable kernels, or XNNPACK delegates (``backend="xnnpack"``), with ``constant_methods``."""
    from edgetorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

    partitioners = []
    if backend == "xnnpack":
        from edgetorch.backends.xnnpack import XnnpackPartitioner

        partitioners.append(XnnpackPartitioner())
    edge = to_edge_transform_and_lower(
        programs,
        partitioner=partitioners,
        constant_methods=constant_methods,
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    # The KV caches are updated in place (index_put_) rather than copied into a new tensor and back.
    buffer = edge.to_executorch(ExecutorchBackendConfig(run_reinplace_pass=True)).buffer
    if output is not None:
        Path(output).write_bytes(buffer)
    return buffer
