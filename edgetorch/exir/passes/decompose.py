"""Decomposition of an ATen program to the Core ATen op set, the first step of ``to_edge``.

May import torch and edgetorch.exir.dialects.
"""

from __future__ import annotations

import collections.abc
import threading
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch._export.utils as _export_utils
from torch._decomp import get_decompositions
from torch.export import ExportedProgram
from torch.export._remove_effect_tokens_pass import _remove_effect_tokens

from edgetorch.exir.dialects import quantized
from edgetorch.exir.passes.remove_graph_asserts_pass import erase_calls

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


# Metadata asserts that torch.export leaves behind, and linalg's error checks (``linalg.inv`` is ``inv_ex`` plus
# a check that raises on a singular input, threaded through an effect token); they are not Core ATen, and a
# program cannot raise: a singular or non-positive-definite input gives inf / NaN, as the ``*_ex`` ops do.
_DROPPED_ASSERTS = (torch.ops.aten._assert_tensor_metadata.default, torch.ops.aten._linalg_check_errors.default)


def _only_error_checks(program: ExportedProgram) -> bool:
    """Whether every effectful call (``with_effects``) is a linalg error check, which a program drops."""
    return all(
        node.args[1] is torch.ops.aten._linalg_check_errors.default
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.op == "call_function" and node.target is torch.ops.higher_order.with_effects
    )


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
    for op in ops_to_not_decompose:
        table.pop(op, None)
    return table


# Two fixed costs of torch's run_decompositions, trimmed without changing what it does (together about 60% of a
# small model's to_edge on torch 2.13):
# - It lists the CompositeImplicitAutograd ops it may keep twice a call, and each listing walks every such op of
#   the C++ dispatcher once per op namespace (about 17 walks of ~790 ops, ~4 ms each). The walk only makes each op
#   reachable as torch.ops.NS.OP.OVERLOAD, which nothing undoes, so one walk at entry serves the whole call.
# - It registers and then removes about 11,000 Python kernels on ~530 of those ops, once a call. Each registration
#   (torch._ops' ``py_impl``) defines a function annotated ``collections.abc.Callable[_P, _T]``, and that
#   subscription is rebuilt every time (about a fifth of the registering). Nothing reads those annotations, so inside
#   the block the name stands for ``_CheapCallable``: subscripting it costs one call, and ``isinstance`` (the
#   name's one use at run time) answers as ``collections.abc.Callable`` does.


class _CheapCallable:
    """``collections.abc.Callable`` for torch._ops while decompositions run: the same ``isinstance`` and
    ``issubclass`` answers, and a subscription that builds nothing (it gives ``typing.Callable``)."""

    __slots__ = ()

    def __getitem__(self, params: object) -> object:
        return typing.Callable

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, collections.abc.Callable)

    def __subclasscheck__(self, cls: type) -> bool:
        return issubclass(cls, collections.abc.Callable)


_CHEAP_CALLABLE = _CheapCallable()
_MATERIALIZE_CIA = getattr(_export_utils, "_materialize_cpp_cia_ops", None)
_ANNOTATED = torch._ops if getattr(torch._ops, "Callable", None) is collections.abc.Callable else None
_TRIM_LOCK = threading.Lock()
_trimmers = 0


def _skip_walk() -> None:
    """Stands in for torch's walk while :func:`trimmed_decompositions` is active."""


@contextmanager
def trimmed_decompositions() -> Iterator[None]:
    """Inside the block torch's decompositions skip the fixed costs above: the walk over the dispatcher's
    CompositeImplicitAutograd ops is done once, at entry, and kernel registrations build no annotation. A
    torch without these names runs as it is. Threads share torch's modules: the last one out puts them back."""
    global _trimmers
    if _MATERIALIZE_CIA is not None:
        _MATERIALIZE_CIA()
    with _TRIM_LOCK:
        _trimmers += 1
        if _MATERIALIZE_CIA is not None:
            _export_utils._materialize_cpp_cia_ops = _skip_walk
        if _ANNOTATED is not None:
            _ANNOTATED.Callable = _CHEAP_CALLABLE  # type: ignore[attr-defined]
    try:
        yield
    finally:
        with _TRIM_LOCK:
            _trimmers -= 1
            if not _trimmers:
                if _MATERIALIZE_CIA is not None:
                    _export_utils._materialize_cpp_cia_ops = _MATERIALIZE_CIA
                if _ANNOTATED is not None:
                    _ANNOTATED.Callable = collections.abc.Callable  # type: ignore[attr-defined]


def decompose(program: ExportedProgram, ops_to_not_decompose: Iterable[torch._ops.OpOverload] = ()) -> ExportedProgram:
    """A new program whose graph holds only Core ATen ops (plus the ops kept from decomposition)."""
    with trimmed_decompositions():
        program = program.run_decompositions(core_aten_decompositions(ops_to_not_decompose))
    if program.graph_signature.input_tokens and _only_error_checks(program):
        program = _remove_effect_tokens(program)
    erase_calls(program.graph_module, _DROPPED_ASSERTS, prune=False)
    return program
