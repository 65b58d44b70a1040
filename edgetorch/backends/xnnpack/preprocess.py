"""``XnnpackBackend``: the compiler half of the XNNPACK delegate (ExecuTorch's backend id ``XnnpackBackend``).

``preprocess`` folds inference batch norms into the convolutions before them
and activations into the nodes before them (``FuseActivationPass``, in place, as ExecuTorch's does), then writes the partition as an XNNPACK blob (``serialize.XnnpackGraphBuilder``)
that both ExecuTorch's XNNPACK runtime and ``edgetorch.backends.xnnpack.runtime``
execute. Constants become named data, as ExecuTorch writes them: in the
program, or, when tagged for external storage (``delegate_constant_tag``, see
``edgetorch.exir.passes.external_constants_pass``), in a ``.ptd`` file. May
import torch.
"""

from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram

from edgetorch.backends.xnnpack._passes.fuse_activation_pass import FuseActivationPass
from edgetorch.backends.xnnpack._passes.fuse_batch_norm import fused_batch_norm_weights
from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder, constant_placeholders
from edgetorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.dialects import to_aten
from edgetorch.exir.program._program import _transform

__all__ = ["XnnpackBackend", "fold_batch_norms"]

aten = torch.ops.aten
Node = torch.fx.Node
BATCH_NORM = aten._native_batch_norm_legit_no_training.default


class XnnpackBackend(BackendDetails):
    """Lowers an Edge partition (from ``XnnpackPartitioner``) to an XNNPACK delegate blob."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
        edge_program = _transform(edge_program, FuseActivationPass(edge_program))
        overrides, aliases = fold_batch_norms(edge_program)
        builder = XnnpackGraphBuilder(edge_program, overrides, aliases)
        blob, debug_map = builder.build()
        named = builder.named_data.get_named_data_store_output()
        return PreprocessResult(
            processed_bytes=blob, debug_handle_map=debug_map or None, data_store_output=named if named.buffers else None
        )


def fold_batch_norms(
    program: ExportedProgram,
) -> tuple[dict[Node, tuple[torch.Tensor, torch.Tensor]], dict[Node, Node]]:
    """Fold each batch norm whose input is a convolution used only by it into that convolution.

    Returns the convolutions' new (weight, bias) and, for the batch norm and its
    ``getitem`` output, the convolution whose value replaces them.
    """
    constants = constant_placeholders(program)
    overrides: dict[Node, tuple[torch.Tensor, torch.Tensor]] = {}
    aliases: dict[Node, Node] = {}
    for bn in program.graph.nodes:
        conv = bn.args[0] if bn.op == "call_function" and to_aten(bn.target) == BATCH_NORM else None
        if not _foldable(conv, bn, constants):
            continue
        overrides[conv] = _folded(conv, bn, constants)
        aliases[bn] = conv
        for user in bn.users:
            aliases[user] = conv
    return overrides, aliases


def _foldable(conv: object, bn: Node, constants: dict[Node, torch.Tensor]) -> bool:
    if not isinstance(conv, Node) or conv.op != "call_function" or to_aten(conv.target) != aten.convolution.default:
        return False
    params = [conv.args[1], conv.args[2], *bn.args[1:5]]
    if len(conv.users) != 1 or any(p is not None and p not in constants for p in params):
        return False
    return all(u.target is operator.getitem and u.args[1] == 0 for u in bn.users)


def _folded(conv: Node, bn: Node, constants: dict[Node, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    bias = constants[conv.args[2]] if conv.args[2] is not None else None
    norm = tuple(None if a is None else constants[a] for a in bn.args[1:5])
    return fused_batch_norm_weights(
        constants[conv.args[1]], bias, norm, float(bn.args[6]), bool(conv.args[6]), int(conv.args[8])
    )
