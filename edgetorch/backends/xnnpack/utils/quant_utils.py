"""Questions about quantize / dequantize nodes of an Edge graph, at ExecuTorch's path
(``executorch.backends.xnnpack.utils.quant_utils``): which node is a q or dq, whether its parameters are
chosen at run time (dynamic quantization), and the tag that marks a q/dq pair as implicit (the XNNPACK
node between them reads and writes the quantized values). Imports torch.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from edgetorch.exir.dialects import to_aten

__all__ = [
    "IS_IMPLICIT_Q_DQ_TAG",
    "is_dequant",
    "is_dynamic_qdq",
    "is_qparam",
    "is_quant",
    "is_tagged_as_implicit_q_dq",
    "tag_as_implicit_q_dq",
]

IS_IMPLICIT_Q_DQ_TAG = "IS_IMPLICIT_Q_DQ_TAG"

_GRANULARITIES = ("per_tensor.tensor", "per_tensor.default", "per_channel.default", "per_channel_group.default")
_QUANTIZE = {f"quantize_{g}" for g in _GRANULARITIES} | {"quantize_per_token.default", "quantize_affine.default"}
_DEQUANTIZE = {"de" + name for name in _QUANTIZE}
_CHOOSE_QPARAMS = {
    "choose_qparams.tensor",
    "choose_qparams_per_token_asymmetric.default",
    "choose_qparams_affine.default",
}


def _op_name(node: Any) -> str | None:
    """``name.overload`` of the op ``node`` calls (``quantize_per_tensor.default``), or None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    op = to_aten(node.target)
    if not isinstance(op, torch._ops.OpOverload):
        return None
    return f"{op._schema.name.split('::')[-1]}.{op._overloadname}"


def is_quant(node: Any) -> bool:
    """Whether ``node`` quantizes (any granularity, static or dynamic)."""
    return _op_name(node) in _QUANTIZE


def is_dequant(node: Any) -> bool:
    """Whether ``node`` dequantizes (any granularity, static or dynamic)."""
    return _op_name(node) in _DEQUANTIZE


def is_qparam(node: Any) -> bool:
    """Whether ``node`` chooses quantization parameters at run time."""
    return _op_name(node) in _CHOOSE_QPARAMS


def is_dynamic_qdq(node: Any) -> bool:
    """Whether ``node`` is a q or dq whose scale and zero point are outputs of a choose-qparams node."""
    if not (is_quant(node) or is_dequant(node)) or len(node.args) < 3:
        return False
    scale, zero_point = node.args[1], node.args[2]
    for param in (scale, zero_point):
        if not isinstance(param, torch.fx.Node) or param.target is not operator.getitem:
            return False
        if not is_qparam(param.args[0]):
            return False
    return True


def tag_as_implicit_q_dq(node: torch.fx.Node) -> None:
    """Mark ``node`` as one end of an implicit q/dq pair."""
    node.meta[IS_IMPLICIT_Q_DQ_TAG] = True


def is_tagged_as_implicit_q_dq(node: torch.fx.Node) -> bool:
    return bool(node.meta.get(IS_IMPLICIT_Q_DQ_TAG, False))
