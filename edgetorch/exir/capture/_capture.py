"""Legacy capture entry points used by the ExecuTorch export tutorial.

``capture_pre_autograd_graph``, ``dynamic_dim`` constraints and a ``export``
that accepts ``constraints=`` predate ``torch.export.Dim``. Here they are thin
translations onto today's ``torch.export.export(dynamic_shapes=...)``:

    constraints = [dynamic_dim(x, 1), 1 <= dynamic_dim(x, 1), dynamic_dim(x, 1) <= 10,
                   dynamic_dim(y, 1) == dynamic_dim(x, 1)]
    ep = export(f, (x, y), constraints=constraints)

May import torch only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import Dim, ExportedProgram
from torch.utils import _pytree as pytree

__all__ = [
    "DimConstraint",
    "EqualityConstraint",
    "WrapperModule",
    "capture_pre_autograd_graph",
    "dynamic_dim",
    "export",
    "patch_forward",
]


@dataclass(eq=False)
class DimConstraint:
    """Dimension ``dim`` of ``tensor`` is dynamic, optionally within ``[min, max]``.

    Made by :func:`dynamic_dim`; ``lo <= c``, ``c <= hi`` (and ``<``, ``>``,
    ``>=``) narrow the range, ``c1 == c2`` ties two dimensions together.
    """

    tensor: torch.Tensor
    dim: int
    min: int | None = None
    max: int | None = None

    def _bounded(self, min: int | None = None, max: int | None = None) -> DimConstraint:
        for bound in (min, max):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
                raise ValueError(
                    f"a dynamic_dim bound must be an int, got {bound!r}; "
                    "only `int <= dynamic_dim(...)` and `dynamic_dim(...) <= int` are supported."
                )
        return DimConstraint(self.tensor, self.dim, min, max)

    def __ge__(self, other: Any) -> DimConstraint:
        return self._bounded(min=other)

    def __gt__(self, other: Any) -> DimConstraint:
        return self._bounded(min=other + 1 if isinstance(other, int) else other)

    def __le__(self, other: Any) -> DimConstraint:
        return self._bounded(max=other)

    def __lt__(self, other: Any) -> DimConstraint:
        return self._bounded(max=other - 1 if isinstance(other, int) else other)

    def __eq__(self, other: Any) -> EqualityConstraint:  # type: ignore[override]
        if not isinstance(other, DimConstraint):
            raise ValueError(
                f"dynamic_dim(...) == {other!r}: a dimension can only be equal to another dynamic_dim; "
                "to fix a dimension to a size, leave it out of the constraints."
            )
        return EqualityConstraint(self, other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(eq=False)
class EqualityConstraint:
    """Two dynamic dimensions (of the same or different inputs) always have the same size."""

    left: DimConstraint
    right: DimConstraint


def dynamic_dim(tensor: torch.Tensor, dim: int) -> DimConstraint:
    """Mark dimension ``dim`` of example input ``tensor`` as dynamic (a legacy export constraint)."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"dynamic_dim expects an example input tensor, got {type(tensor).__name__}.")
    if not isinstance(dim, int) or not -tensor.dim() <= dim < tensor.dim():
        raise ValueError(f"dynamic_dim: dimension {dim!r} is out of range for a {tensor.dim()}-d tensor.")
    return DimConstraint(tensor, dim % tensor.dim())


class _Groups:
    """Union-find over (input tensor, dim) keys, each group with one range."""

    def __init__(self) -> None:
        self.parent: dict[tuple[int, int], tuple[int, int]] = {}
        self.range: dict[tuple[int, int], tuple[int | None, int | None]] = {}

    def find(self, key: tuple[int, int]) -> tuple[int, int]:
        self.parent.setdefault(key, key)
        self.range.setdefault(key, (None, None))
        while self.parent[key] != key:
            key = self.parent[key]
        return key

    def bound(self, key: tuple[int, int], lo: int | None, hi: int | None) -> None:
        root = self.find(key)
        old_lo, old_hi = self.range[root]
        self.range[root] = (_pick(max, old_lo, lo), _pick(min, old_hi, hi))

    def union(self, a: tuple[int, int], b: tuple[int, int]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.bound(ra, *self.range.pop(rb))


def _pick(fn: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else fn(a, b)


def _dims_for(constraints: Sequence[Any], inputs: list[torch.Tensor]) -> dict[tuple[int, int], Dim]:
    """Map (input position, dim) -> the torch.export Dim shared by its equality group."""
    position = {id(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}

    def key(c: DimConstraint) -> tuple[int, int]:
        if id(c.tensor) not in position:
            raise ValueError(
                f"a constraint refers to a tensor of shape {tuple(c.tensor.shape)} that is not one of the "
                "example inputs; build constraints with dynamic_dim(example_args[i], dim)."
            )
        return position[id(c.tensor)], c.dim

    groups = _Groups()
    for c in constraints:
        if isinstance(c, DimConstraint):
            groups.bound(key(c), c.min, c.max)
        elif isinstance(c, EqualityConstraint):
            groups.union(key(c.left), key(c.right))
        else:
            raise ValueError(
                f"constraints must be dynamic_dim(...) expressions, got {type(c).__name__}: {c!r}; "
                "a comparison between two dims other than == is not supported."
            )
    dims: dict[tuple[int, int], Dim] = {}
    made: dict[tuple[int, int], Dim] = {}
    for k in list(groups.parent):
        root = groups.find(k)
        if root not in made:
            lo, hi = groups.range[root]
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"dynamic dimension {k[1]} of input {k[0]} has an empty range [{lo}, {hi}].")
            made[root] = Dim(
                f"dim{len(made)}", **({"min": lo} if lo is not None else {}), **({"max": hi} if hi is not None else {})
            )
        dims[k] = made[root]
    return dims


def _dynamic_shapes(constraints: Sequence[Any], args: tuple, kwargs: Mapping[str, Any]) -> tuple:
    """The ``dynamic_shapes`` tuple (args, then kwargs in order) that ``constraints`` describe."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    dims = _dims_for(constraints, leaves)
    shapes = [
        {d: dim for (pos, d), dim in dims.items() if pos == i} or None if isinstance(leaf, torch.Tensor) else None
        for i, leaf in enumerate(leaves)
    ]
    shaped_args, shaped_kwargs = pytree.tree_unflatten(shapes, spec)
    return (*shaped_args, *shaped_kwargs.values())


def _as_module(fn: Callable[..., Any]) -> torch.nn.Module:
    """Wrap a plain function in a Module (torch.export exports modules) whose forward has fn's signature,
    so graph inputs keep the function's parameter names."""
    signature = inspect.signature(fn)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    forward.__signature__ = signature.replace(parameters=[self_param, *signature.parameters.values()])
    name = getattr(fn, "__name__", "function")
    return type(f"{name}_module", (torch.nn.Module,), {"forward": forward})()


@contextmanager
def patch_forward(obj: torch.nn.Module, new_method: Callable[..., Any]) -> Iterator[None]:
    """Within the block, ``obj.forward`` is ``new_method`` bound to ``obj``, so ``torch.export`` captures
    another method of a module (``with patch_forward(m, type(m).encode): export(m, args)``); the original
    forward is back afterwards, even when the block raises."""
    original = obj.forward
    obj.forward = new_method.__get__(obj, type(obj))  # type: ignore[method-assign]
    try:
        yield
    finally:
        obj.forward = original  # type: ignore[method-assign]


class WrapperModule(torch.nn.Module):
    """A Module whose forward is the function ``f``: the way to export a plain function."""

    def __init__(self, f: Callable[..., Any]) -> None:
        super().__init__()
        self.forward = f  # type: ignore[method-assign]


def export(
    f: Callable[..., Any],
    args: tuple,
    kwargs: Mapping[str, Any] | None = None,
    constraints: Sequence[Any] | None = None,
    dynamic_shapes: Any = None,
) -> ExportedProgram:
    """``torch.export.export`` that also takes legacy ``constraints`` and plain functions."""
    kwargs = dict(kwargs or {})
    if constraints and dynamic_shapes is not None:
        raise ValueError("pass either constraints (legacy dynamic_dim) or dynamic_shapes, not both.")
    if constraints:
        dynamic_shapes = _dynamic_shapes(constraints, args, kwargs)
    module = f if isinstance(f, torch.nn.Module) else _as_module(f)
    try:
        return torch.export.export(module, tuple(args), kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as error:
        error.add_note(
            "edgetorch: torch.export could not capture this model; see the torch.export docs on untraceable code "
            "(data-dependent control flow -> torch.cond, unsupported Python -> rewrite) and try again."
        )
        raise


def capture_pre_autograd_graph(
    f: Callable[..., Any],
    args: tuple,
    kwargs: Mapping[str, Any] | None = None,
    constraints: Sequence[Any] | None = None,
) -> torch.fx.GraphModule:
    """Capture ``f`` as a flat, autograd-safe ATen GraphModule (the tutorial's first stage).

    The result runs like ``f``, can be quantized with PT2E, and can be passed to :func:`export`.
    """
    return export(f, args, kwargs, constraints).module()
