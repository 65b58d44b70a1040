"""4- and 8-bit embedding tables: ExecuTorch's ``quantized_decomposed::embedding_byte`` and ``embedding_4bit``.

A table is stored as signed integers per row (8-bit: ``int8 [vocab, dim]``; 4-bit: two values a byte,
the first in the high nibble, offset by 8: ``uint8 [vocab, dim / 2]``), with one scale per row or per
group of ``group_size`` columns and no zero points (symmetric). A lookup dequantizes only the rows it
reads: ``(q - zero_point) * scale``, in the scales' dtype. The schemas are ExecuTorch's (a ``.pte`` names
these ops; the runtime kernels are ``edgetorch.runtime.kernels.quantized``), so this is a
:class:`SharedLibrary`: ExecuTorch's definitions win once its quantized-patterns module is imported.

``export_llm(embedding_quantize="8,0")`` (``"<bits>,<group size>"``, 0 = one scale per row, as ExecuTorch's
``quantization.embedding_quantize``) swaps :class:`QuantizedEmbedding` in. A table tied to a quantized
output projection (GPT-2's) is built by :func:`tied_embedding` from that projection's quantized weight, in the
bytes the XNNPACK delegate stores, so a program holds it once. May import torch only.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from edgetorch.errors import InvalidInputError
from edgetorch.exir.dialects.shared_library import SharedLibrary

__all__ = ["QuantizedEmbedding", "parse_embedding_quantize", "quantize_embeddings", "tied_embedding"]

_ARGS = (
    "Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, int weight_quant_max, "
    "Tensor indices"
)
_OPS = {8: "embedding_byte", 4: "embedding_4bit"}


def _schemas() -> dict[str, str]:
    schemas = {}
    for name in _OPS.values():
        schemas[name] = f"{name}({_ARGS}) -> Tensor"
        schemas[f"{name}.dtype"] = f"{name}.dtype({_ARGS}, *, ScalarType? dtype=None) -> Tensor"
        schemas[f"{name}.out"] = f"{name}.out({_ARGS}, *, Tensor(a!) out) -> Tensor(a!)"
        schemas[f"{name}.dtype_out"] = (
            f"{name}.dtype_out({_ARGS}, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"
        )
    return schemas


def unpack(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """The signed values of a stored table (``int16``): 4-bit bytes split high nibble first, minus 8."""
    if bits == 8:
        return weight.to(torch.int16)
    wide = weight.to(torch.int16)
    return torch.stack((wide // 16, wide % 16), dim=-1).reshape(weight.shape[0], -1) - 8


def lookup(weight, scales, zero_points, indices, bits: int, dtype=None) -> torch.Tensor:
    """Rows ``indices`` of the table, dequantized per group of columns (ExecuTorch's semantics)."""
    flat = indices.reshape(-1)
    rows = unpack(weight[flat], bits)
    groups = 1 if scales.dim() == 1 else scales.shape[1]
    values = rows.reshape(rows.shape[0], groups, -1).to(scales.dtype)
    if zero_points is not None:
        values = values - zero_points.reshape(zero_points.shape[0], groups)[flat].unsqueeze(-1).to(scales.dtype)
    values = values * scales.reshape(scales.shape[0], groups)[flat].unsqueeze(-1)
    result = values.reshape(*indices.shape, rows.shape[1])
    return result if dtype is None else result.to(dtype)


def _kernels(bits: int) -> dict[str, object]:
    name = _OPS[bits]

    def plain(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices):
        return lookup(weight, weight_scales, weight_zero_points, indices, bits)

    def with_dtype(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, dtype=None):
        return lookup(weight, weight_scales, weight_zero_points, indices, bits, dtype)

    def plain_out(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, *, out):
        result = lookup(weight, weight_scales, weight_zero_points, indices, bits)
        return out.resize_(result.shape).copy_(result)

    def dtype_out(
        weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, *, dtype=None, out
    ):  # fmt: skip
        result = lookup(weight, weight_scales, weight_zero_points, indices, bits, dtype)
        return out.resize_(result.shape).copy_(result)

    return {name: plain, f"{name}.dtype": with_dtype, f"{name}.out": plain_out, f"{name}.dtype_out": dtype_out}


LIBRARY = SharedLibrary(
    "quantized_decomposed",
    _schemas(),
    {**_kernels(8), **_kernels(4)},
    "executorch.exir.passes._quant_patterns_and_replacements",
)


def parse_embedding_quantize(spec: str) -> tuple[int, int]:
    """``"<bits>,<group size>"`` (ExecuTorch's format; group size 0 = per row) as ``(bits, group_size)``."""
    parts = spec.split(",")
    try:
        bits, group_size = int(parts[0]), int(parts[1])
        if len(parts) != 2:
            raise ValueError
    except (ValueError, IndexError):
        raise InvalidInputError(
            f"embedding_quantize must be '<bits>,<group size>' such as '8,0' or '4,32', got {spec!r}"
        ) from None
    if bits not in _OPS or group_size < 0:
        raise InvalidInputError(
            f"embedding_quantize takes 8 or 4 bits and a group size >= 0 (0: one scale per row), got {spec!r}"
        )
    return bits, group_size


class QuantizedEmbedding(nn.Module):
    """An ``nn.Embedding`` whose table is stored in ``bits`` (8 or 4) with symmetric per-group scales."""

    def __init__(self, weight: torch.Tensor, bits: int, group_size: int = 0) -> None:
        super().__init__()
        vocab, dim = weight.shape
        group = group_size or dim
        if dim % group or (bits == 4 and group % 2):
            raise InvalidInputError(
                f"an embedding of width {dim} cannot be quantized in groups of {group} ({bits}-bit): pick a group "
                "size that divides the width (even for 4 bits), or 0 for one scale per row"
            )
        qmax = (1 << (bits - 1)) - 1
        grouped = weight.detach().float().reshape(vocab, dim // group, group)
        scales = grouped.abs().amax(-1).clamp(min=torch.finfo(torch.float32).tiny) / qmax
        q = torch.round(grouped / scales.unsqueeze(-1)).clamp(-qmax - 1, qmax).reshape(vocab, dim)
        self._store(q, scales.to(weight.dtype) if group_size else scales.reshape(vocab).to(weight.dtype), bits)

    @classmethod
    def from_quantized(
        cls, values: torch.Tensor, scales: torch.Tensor, bits: int, *, low_nibble_first: bool = False
    ) -> QuantizedEmbedding:
        """A table of already quantized ``values`` (integers, ``[vocab, dim]``) and their ``scales`` (one per row
        or ``[vocab, groups]``), e.g. those of an output projection tied to this embedding.

        ``low_nibble_first`` packs 4-bit pairs as XNNPACK's 4-bit weights are packed (even column in the low
        nibble), so the table's bytes equal the delegated projection's and the program can store them once; the
        op then returns each pair of columns swapped and :meth:`forward` swaps them back."""
        vocab, dim = values.shape
        qmax = (1 << (bits - 1)) - 1
        groups = 1 if scales.dim() == 1 else scales.shape[1]
        if bits not in _OPS or scales.shape[0] != vocab or dim % groups or (bits == 4 and (dim // groups) % 2):
            raise InvalidInputError(
                f"expected {bits}-bit values [vocab, dim] with scales [vocab] or [vocab, groups] of even width "
                f"(4-bit) and bits 8 or 4, found values {list(values.shape)}, scales {list(scales.shape)}, bits {bits}"
            )
        if int(values.min()) < -qmax - 1 or int(values.max()) > qmax:
            raise InvalidInputError(f"{bits}-bit values must lie in [{-qmax - 1}, {qmax}]; quantize them first")
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        module._store(values, scales.detach(), bits, low_nibble_first=low_nibble_first and bits == 4)
        return module

    def _store(self, q: torch.Tensor, scales: torch.Tensor, bits: int, *, low_nibble_first: bool = False) -> None:
        self.bits, self.qmin, self.qmax = bits, -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        self.low_nibble_first = low_nibble_first
        q = q.to(torch.int16)
        if bits == 4:
            first, second = (q[:, 0::2] + 8, q[:, 1::2] + 8)
            q = (first + second * 16 if low_nibble_first else first * 16 + second).to(torch.uint8)
        else:
            q = q.to(torch.int8)
        self.register_buffer("weight", q)
        self.register_buffer("scales", scales)
        LIBRARY.ensure_registered()

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        op = getattr(torch.ops.quantized_decomposed, _OPS[self.bits])
        rows = op(self.weight, self.scales, None, self.qmin, self.qmax, indices)
        return rows.unflatten(-1, (-1, 2)).flip(-1).flatten(-2) if self.low_nibble_first else rows


def quantize_embeddings(model: nn.Module, spec: str) -> None:
    """Replace ``model.tok_embeddings`` by a :class:`QuantizedEmbedding` (a tied output keeps its float matrix)."""
    bits, group_size = parse_embedding_quantize(spec)
    model.tok_embeddings = QuantizedEmbedding(model.tok_embeddings.weight, bits, group_size)


def tied_embedding(linear: nn.Module, quantization_config: object | None = None) -> QuantizedEmbedding:
    """The quantized embedding for a table tied to ``linear``: the values and scales ``linear``'s weight is
    quantized to, packed as the XNNPACK delegate packs that weight, so that a program stores the table once
    (``ExecutorchBackendConfig.share_identical_data``).

    Either torchao's ``quantize_`` already quantized ``linear`` (8da4w: 4-bit values in groups; symmetric), or
    ``quantization_config`` is the PT2E config (``get_symmetric_quantization_config(is_per_channel=True, ...)``)
    that will quantize it: its weight observer and ``quantize_per_channel`` give the values ``convert_pt2e``
    folds into the program."""
    weight = linear.weight
    if quantization_config is not None:
        spec = getattr(quantization_config, "weight", None)
        if spec is None or spec.qscheme != torch.per_channel_symmetric or spec.ch_axis != 0:
            raise InvalidInputError(
                "a tied embedding needs a per-channel symmetric weight quantization config "
                "(get_symmetric_quantization_config(is_per_channel=True, ...))"
            )
        # The observer as prepare_pt2e builds it: the spec's fields are its arguments.
        kwargs = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
        observer = kwargs.pop("observer_or_fake_quant_ctr")(**kwargs)
        observer(weight.detach())
        scales, zero_points = observer.calculate_qparams()
        values = torch.ops.quantized_decomposed.quantize_per_channel(
            weight.detach(), scales, zero_points, 0, spec.quant_min, spec.quant_max, spec.dtype
        )
        return QuantizedEmbedding.from_quantized(values, scales, 8)
    values, scales, zero_point = (getattr(weight, name, None) for name in ("qdata", "scale", "zero_point"))
    if values is None or scales is None:
        raise InvalidInputError(
            "expected a linear whose weight torchao's quantize_ quantized (qdata, scale), or a PT2E quantization "
            f"config; found a {type(weight).__name__} weight and no config"
        )
    if zero_point is not None and bool(zero_point.any()):
        raise InvalidInputError(
            "a tied embedding needs symmetric weights (zero points 0); quantize the output symmetrically"
        )
    bits = {torch.int4: 4, torch.int8: 8}.get(getattr(weight, "target_dtype", None))
    if bits is None:
        raise InvalidInputError(
            f"a tied embedding takes 4- or 8-bit weights, found {getattr(weight, 'target_dtype', None)}"
        )
    return QuantizedEmbedding.from_quantized(values, scales.float(), bits, low_nibble_first=True)
