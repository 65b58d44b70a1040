"""``8da4w-q41``: 8da4w linears that keep a Q4_1 GGUF checkpoint's own 4-bit blocks.

A Q4_1 block of 32 weights is ``scale * q + min`` with ``q`` in 0..15 and a float16 scale and min per
block. Written as ``scale * (q - 8) + (min + 8 * scale)``, the first term is exactly a symmetric int4
weight in groups of 32 (what ExecuTorch's 8da4w is: torchao's ``IntxUnpackedToInt8Tensor``, XNNPACK's
QB4W) with the block's own scale, and the second is constant over each block, so its product with ``x``
is ``block_sums(x) @ offsets.T``: a small float linear over the 32-element sums of the input
(``[out, in / 32]``, one float per 32 weights). The sums are themselves a linear with a constant 0/1
matrix, one shared by every linear of the same input width, so a backend that takes linears (XNNPACK)
takes the whole term without a graph break. Nothing is re-quantized: the program computes the GGUF
weights up to the int8 quantization of the activations.

Re-quantizing the same weights with torchao's own 8da4w (max-abs / 7.5 per group) costs SmolLM2-135M
+28% perplexity on our runtime; this keeps it within 5% (+4.2%) of the dequantized checkpoint (bench/RESULTS.md).
May import torch.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetorch.errors import InvalidInputError

__all__ = ["BLOCK", "Q41Linear", "quantize_q4_1_linears"]

BLOCK = 32  # Q4_1's block length


def _int4_weight(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """torchao's 8da4w weight (int8 per-token activations, symmetric int4 in groups of 32) from its integers."""
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import (
        IntxUnpackedToInt8Tensor,
        IntxUnpackedToInt8TensorActivationQuantization,
    )

    return IntxUnpackedToInt8Tensor(
        q,
        scale.to(dtype),
        torch.zeros(scale.shape, dtype=torch.int8),
        torch.int4,
        (1, BLOCK),
        dtype,
        IntxUnpackedToInt8TensorActivationQuantization.INT8_ASYM_PER_TOKEN,
    )


class Q41Linear(nn.Module):
    """``linear(x)`` with an 8da4w weight (the Q4_1 scales, integers ``q - 8``) plus ``offsets`` times the
    32-element block sums of ``x``."""

    def __init__(self, linear: nn.Linear, scale: torch.Tensor, low: torch.Tensor, summer: nn.Linear) -> None:
        super().__init__()
        out_features, in_features = linear.weight.shape
        if in_features % BLOCK or tuple(scale.shape) != (out_features, in_features // BLOCK):
            raise InvalidInputError(
                f"Q4_1 blocks {tuple(scale.shape)} do not tile a [{out_features}, {in_features}] weight in rows "
                f"of {BLOCK}; the checkpoint's Q4_1 tensors do not match its model"
            )
        dtype = linear.weight.dtype
        weight = linear.weight.detach().float().view(out_features, -1, BLOCK)
        step = scale.float().unsqueeze(-1)
        # The checkpoint's weights are scale * q + min, computed in float32: recover q (0 where scale is 0).
        q = torch.where(step > 0, (weight - low.float().unsqueeze(-1)) / step.clamp(min=1e-30), 0.0)
        q = q.round().clamp(0, 15) - 8
        self.linear = nn.Linear(in_features, out_features, bias=linear.bias is not None)
        self.linear.weight = nn.Parameter(
            _int4_weight(q.to(torch.int8).view(out_features, in_features), scale.float(), dtype), requires_grad=False
        )
        if linear.bias is not None:
            self.linear.bias = nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.blocks = in_features // BLOCK
        self.summer = summer  # shared: x -> its 32-element block sums
        self.offsets = nn.Linear(self.blocks, out_features, bias=False)
        self.offsets.weight = nn.Parameter((low.float() + 8 * scale.float()).to(dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.offsets(self.summer(x))


def block_summer(in_features: int, dtype: torch.dtype) -> nn.Linear:
    """A linear whose output ``j`` is the sum of inputs ``32 j .. 32 j + 31`` (a constant 0/1 matrix)."""
    summer = nn.Linear(in_features, in_features // BLOCK, bias=False)
    ones = torch.kron(torch.eye(in_features // BLOCK), torch.ones(1, BLOCK)).to(dtype)
    summer.weight = nn.Parameter(ones, requires_grad=False)
    return summer


def quantize_q4_1_linears(model: nn.Module, blocks: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> list[str]:
    """Swap every ``nn.Linear`` named in ``blocks`` (module name -> Q4_1 scale and min) for a
    :class:`Q41Linear`, in place; returns the names of the linears left as they were."""
    if not blocks:
        raise InvalidInputError(
            "quantize='8da4w-q41' keeps the Q4_1 blocks of a GGUF checkpoint, and this checkpoint has no Q4_1 "
            "linears; use quantize='8da4w'"
        )
    left, summers = [], {}
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        if name not in blocks:
            left.append(name)
            continue
        key = (module.in_features, module.weight.dtype)
        if key not in summers and module.in_features % BLOCK == 0:
            summers[key] = block_summer(*key)
        parent, _, attr = name.rpartition(".")
        swapped = Q41Linear(module, *blocks[name], summers.get(key))
        setattr(model.get_submodule(parent) if parent else model, attr, swapped)
    return left
