"""The ``quantized_decomposed`` out variants of ExecuTorch's quantized kernel library, known to the compiler.

torch defines the functional quantize/dequantize/choose_qparams ops that PT2E
quantization puts in a graph, but not their out variants: ExecuTorch declares
those in its quantized kernel library (``kernels/quantized/quantized.yaml``)
and registers them with torch only when its native AOT library is loaded.
edgetorch must not register them itself (a later load of ExecuTorch's library
would abort the process on the duplicate), so each is an :class:`OutOverload`:
the out schema, parsed by torch but kept out of the dispatcher, standing in
for the OpOverload ``ToOutVarPass`` puts in a graph and the emitter writes as
``quantized_decomposed::<op>.<overload>``. When ExecuTorch's library is
loaded, torch's own overloads are found first and used instead.

Quantized ops with no out variant in that library (per-channel-group
dequantization, symmetric per-token qparams) are decomposed to Core ATen by
``to_edge`` instead (:data:`DECOMPOSITIONS`), so the program still runs on
both runtimes. May import torch.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
import torch.ao.quantization.fx._decomposed as reference
from torchgen.model import FunctionSchema

# The out schemas of ExecuTorch's quantized.yaml for ops whose functional form torch defines.
_OUT_SCHEMAS = [
    "quantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
    "ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)",
    "quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, "
    "ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)",
    "dequantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
    "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    "dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, "
    "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    "choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, *, "
    "Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))",
    "quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, "
    "int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)",
    "dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, "
    "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    "choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, *, Tensor(a!) scale_out, "
    "Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))",
    "quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
    "ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)",
    "dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
    "ScalarType dtype, ScalarType output_dtype, *, Tensor(a!) out) -> Tensor(a!)",
]

_qd = torch.ops.quantized_decomposed

DECOMPOSITIONS: dict[torch._ops.OpOverload, Any] = {
    _qd.dequantize_per_channel_group.default: reference.dequantize_per_channel_group,
    _qd.choose_qparams_per_token.default: reference.choose_qparams_per_token,
}
"""Quantized ops ExecuTorch has no kernel for, mapped to torch's reference implementations (Core ATen ops)."""


class OutOverload:
    """An out-variant operator that torch knows the schema of but has no dispatcher entry for.

    Holds what compiler passes and the emitter read from an OpOverload (``_schema``,
    ``name()``, ``namespace``); calling it runs the functional op and copies the
    result into the ``out`` tensors, so graphs holding it still execute eagerly.
    """

    def __init__(self, namespace: str, schema: str, functional: torch._ops.OpOverload):
        self._schema = torch._C.parse_schema(f"{namespace}::{schema}")
        self.namespace = namespace
        self._opname = self._schema.name.split("::")[1]
        self._overloadname = self._schema.overload_name
        self.functional = functional
        self.__name__ = self.__qualname__ = f"{self._opname}.{self._overloadname}"
        self.__module__ = f"edgetorch.exir.dialects.quantized.{namespace}"

    def name(self) -> str:
        return f"{self._schema.name}.{self._overloadname}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        outs = [kwargs.pop(a.name) for a in self._schema.arguments if a.is_out]
        result = self.functional(*args, **kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        for out, value in zip(outs, results):
            out.resize_(value.shape).copy_(value)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __deepcopy__(self, memo: dict) -> OutOverload:
        return self

    def __reduce__(self) -> tuple:
        return (_find, (self.name(),))

    def __repr__(self) -> str:
        return f"{self.namespace}.{self.__name__}"


@cache
def _overloads() -> dict[torch._ops.OpOverload, OutOverload]:
    """Each out schema matched to the functional overload with the same signature (as torch pairs its own)."""
    found = {}
    for text in _OUT_SCHEMAS:
        signature = FunctionSchema.parse(text).signature()
        packet = getattr(_qd, text.split(".")[0])
        functional = [getattr(packet, o) for o in packet.overloads()]
        op = next(f for f in functional if FunctionSchema.parse(str(f._schema)).signature() == signature)
        found[op] = OutOverload("quantized_decomposed", text, op)
    return found


def _find(name: str) -> OutOverload:
    return next(o for o in _overloads().values() if o.name() == name)


def out_variant(op: torch._ops.OpOverload) -> tuple[OutOverload | None, tuple[str, ...]]:
    """The out variant ExecuTorch's quantized kernel library has for functional ``op``, and its out arguments."""
    found = _overloads().get(op)
    if found is None:
        return None, ()
    return found, tuple(a.name for a in found._schema.arguments if a.is_out)
