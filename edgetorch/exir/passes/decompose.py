"""Decomposition of an ATen program to the Core ATen op set, the first step of ``to_edge``.

May import torch and edgetorch.exir.dialects.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch._decomp import get_decompositions
from torch.export import ExportedProgram

from edgetorch.exir.dialects import quantized

# Not in torch's Core ATen table, but decomposed all the same: ExecuTorch does so for the vector norm (no
# portable kernel); training-mode batch norm (no kernel, and ExecuTorch rejects it) becomes var_mean and
# arithmetic, its running-stat updates buffer mutations.
_EXTRA_DECOMPOSED = [
    torch.ops.aten.linalg_vector_norm.default,
    torch.ops.aten._native_batch_norm_legit_functional.default,
    torch.ops.aten._batch_norm_with_update_functional.default,
]


def _rrelu_with_noise_functional(
    self: torch.Tensor,
    noise: torch.Tensor,
    lower: float = 0.125,
    upper: float = 1.0 / 3.0,
    training: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RReLU (torch has no decomposition for it): in training negative inputs get a U[lower, upper) slope, also
    returned as the new ``noise`` (1 for non-negative inputs); in eval the mean slope, ``noise`` unchanged."""
    aten = torch.ops.aten
    if not training:
        return aten.leaky_relu.default(self, (lower + upper) / 2), aten.clone.default(noise)
    slopes = aten.uniform.default(aten.empty_like.default(self), lower, upper)
    slope = aten.where.self(aten.ge.Scalar(self, 0), aten.ones_like.default(self), slopes)
    return aten.mul.Tensor(self, slope), aten.view.default(slope, noise.shape)


# torch decomposes these into their ``*_ex`` form plus ``_linalg_check_errors``, an op with side effects that
# export threads an effect token through; a program cannot raise, so the check goes and the ``_ex`` form stays
# (a singular or non-positive-definite input gives inf / NaN, as the ``_ex`` ops do).
_aten = torch.ops.aten
_UNCHECKED_LINALG = {
    _aten.linalg_inv.default: lambda A: _aten.linalg_inv_ex.default(A)[0],
    _aten.linalg_solve.default: lambda A, B, *, left=True: _aten.linalg_solve_ex.default(A, B, left=left)[0],
    _aten.linalg_cholesky.default: lambda A, *, upper=False: _aten.linalg_cholesky_ex.default(A, upper=upper)[0],
    _aten.linalg_lu_factor.default: lambda A, *, pivot=True: _aten.linalg_lu_factor_ex.default(A, pivot=pivot)[:2],
}

# Metadata asserts that torch.export leaves behind; they are not Core ATen and compute nothing.
_DROPPED_ASSERTS = (torch.ops.aten._assert_tensor_metadata.default,)


def core_aten_decompositions(ops_to_not_decompose: Iterable[torch._ops.OpOverload] = ()) -> dict:
    """The decomposition table ``to_edge`` uses, minus the ops that must survive as they are.

    ``ops_to_not_decompose`` is where ``EdgeCompileConfig.preserve_ops`` and a
    partitioner's ``ops_to_not_decompose`` land: ops a backend wants to see whole.
    """
    table = torch.export.default_decompositions()
    for op, fn in get_decompositions(_EXTRA_DECOMPOSED).items():
        table[op] = fn
    table.update(quantized.DECOMPOSITIONS)
    table[torch.ops.aten.rrelu_with_noise_functional.default] = _rrelu_with_noise_functional
    table.update(_UNCHECKED_LINALG)
    for op in ops_to_not_decompose:
        table.pop(op, None)
    return table


def decompose(program: ExportedProgram, ops_to_not_decompose: Iterable[torch._ops.OpOverload] = ()) -> ExportedProgram:
    """A new program whose graph holds only Core ATen ops (plus the ops kept from decomposition)."""
    program = program.run_decompositions(core_aten_decompositions(ops_to_not_decompose))
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in list(module.graph.nodes):
            if node.op == "call_function" and node.target in _DROPPED_ASSERTS:
                module.graph.erase_node(node)
        module.recompile()
    return program
