"""Small random PyTorch modules, as data (a :class:`Case`) and as the Python source they stand for.

A case is a list of steps, each an operator of :data:`OPS` applied to earlier values, over a few inputs of one
shape family (the same leading dims, some dims broadcast as 1), mostly float32 with some int and bool tensors,
optionally a dynamic batch dimension (``torch.export.Dim``), buffers mutated in ``forward`` and ``torch.cond``.
:func:`render` replays the steps against the input shapes and writes a module's source; a step that no longer
fits its operands (after the shrinker deleted the step that made them) is left out, so every list of steps
renders to a module that runs. :func:`generate` draws a case from ``(seed, index)`` alone, so a finding is
reproduced from those two numbers. Imports torch only in :func:`build`.
"""

from __future__ import annotations

import linecache
import random
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

B = "B"  # the dynamic batch dimension in a shape (its size is the example's, 3, or another in [2, 8])
EXAMPLE_BATCH, OTHER_BATCH, MAX_BATCH = 3, 5, 8
FLOAT, INTS, BOOL = "float32", ("int32", "int64"), "bool"

Shape = tuple[Any, ...]  # ints, and B for the dynamic batch dim


@dataclass(frozen=True)
class Step:
    """One operator applied to earlier values: ``args[i]`` counts back from the newest value (0 is the newest),
    clipped to the values there are; ``param`` picks the operator's constants (dims, sizes, scalars)."""

    op: str
    args: tuple[int, ...]
    param: int


@dataclass(frozen=True)
class Case:
    """A random module: its inputs (shape family and dtypes), steps, outputs, and whether the batch is dynamic."""

    seed: int
    base: tuple[int, ...]  # the inputs' full shape; dim 0 is the batch
    inputs: tuple[tuple[str, tuple[bool, ...]], ...]  # (dtype, which dims are 1) per input
    steps: tuple[Step, ...]
    outputs: tuple[int, ...] = (0,)  # values counted back from the newest, as Step.args
    dynamic: bool = False

    def with_(self, **changes: Any) -> Case:
        return replace(self, **changes)


@dataclass
class Value:
    name: str
    shape: Shape
    dtype: str


@dataclass
class Rendered:
    """A case as Python source: the module's ``__init__`` lines, ``forward`` lines, and what it returns."""

    case: Case
    init: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    used: list[Step] = field(default_factory=list)  # the steps that fit, in order
    outputs: list[str] = field(default_factory=list)
    counter: int = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def pick(self, back: int) -> Value:
        return self.values[-1 - min(back, len(self.values) - 1)]


# ------------------------------------------------------------------------------------------- shape rules


def _concrete(dim: Any) -> bool:
    return dim != B


def _broadcast(a: Shape, b: Shape) -> Shape | None:
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def _joint(*shapes: Shape) -> Shape:
    """The broadcast shape of operands :func:`_broadcast` has already found compatible."""
    out = shapes[0]
    for shape in shapes[1:]:
        joined = _broadcast(out, shape)
        if joined is None:
            raise ValueError(f"shapes {shapes} do not broadcast: a fits rule let them through")
        out = joined
    return out


def _promote(a: str, b: str) -> str:
    if FLOAT in (a, b):
        return FLOAT
    return "int64" if "int64" in (a, b) else "int32"


def _numeric(v: Value) -> bool:
    return v.dtype != BOOL


# An operator: (operand count, fits(operands, param) -> bool, emit(rendered, operands, param) -> Value).
Fits = Callable[[list[Value], int], bool]
Emit = Callable[[Rendered, list[Value], int], Value]


@dataclass(frozen=True)
class Op:
    arity: int
    fits: Fits
    emit: Emit
    weight: float = 1.0


def _line(r: Rendered, expr: str, shape: Shape, dtype: str) -> Value:
    v = Value(r.fresh("v"), shape, dtype)
    r.body.append(f"{v.name} = {expr}")
    return v


def _unary(template: str, kinds: str = "f") -> Op:
    """An element-wise operator on one tensor; ``kinds``: f (float), i (int) it accepts; keeps shape and dtype."""

    def fits(a: list[Value], p: int) -> bool:
        return (a[0].dtype == FLOAT and "f" in kinds) or (a[0].dtype in INTS and "i" in kinds)

    return Op(1, fits, lambda r, a, p: _line(r, template.format(a=a[0].name), a[0].shape, a[0].dtype), 2.0)


def _binary(template: str, float_only: bool = False) -> Op:
    def fits(a: list[Value], p: int) -> bool:
        ok = all(map(_numeric, a)) and _broadcast(a[0].shape, a[1].shape) is not None
        return ok and (not float_only or a[0].dtype == a[1].dtype == FLOAT)

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        expr = template.format(a=a[0].name, b=a[1].name)
        return _line(r, expr, _joint(a[0].shape, a[1].shape), _promote(a[0].dtype, a[1].dtype))

    return Op(2, fits, emit, 2.0)


SCALARS = (0.5, 2.0, -1.5, 3.0, -0.25)


def _scalar(template: str) -> Op:
    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        c = SCALARS[p % len(SCALARS)] if a[0].dtype == FLOAT else int(SCALARS[p % 4] * 2)
        return _line(r, template.format(a=a[0].name, c=c), a[0].shape, a[0].dtype)

    return Op(1, lambda a, p: _numeric(a[0]), emit)


def _compare(template: str) -> Op:
    def fits(a: list[Value], p: int) -> bool:
        return all(map(_numeric, a)) and _broadcast(a[0].shape, a[1].shape) is not None

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        return _line(r, template.format(a=a[0].name, b=a[1].name), _joint(a[0].shape, a[1].shape), BOOL)

    return Op(2, fits, emit)


def _logical(template: str) -> Op:
    def fits(a: list[Value], p: int) -> bool:
        return a[0].dtype == a[1].dtype == BOOL and _broadcast(a[0].shape, a[1].shape) is not None

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        return _line(r, template.format(a=a[0].name, b=a[1].name), _joint(a[0].shape, a[1].shape), BOOL)

    return Op(2, fits, emit)


def _where() -> Op:
    def fits(a: list[Value], p: int) -> bool:
        shape = _broadcast(a[1].shape, a[2].shape)
        return (
            a[0].dtype == BOOL
            and _numeric(a[1])
            and _numeric(a[2])
            and shape is not None
            and (_broadcast(a[0].shape, shape) is not None)
        )

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        shape = _joint(a[0].shape, a[1].shape, a[2].shape)
        expr = f"torch.where({a[0].name}, {a[1].name}, {a[2].name})"
        return _line(r, expr, shape, _promote(a[1].dtype, a[2].dtype))

    return Op(3, fits, emit, 3.0)


def _cast(target: str) -> Op:
    def fits(a: list[Value], p: int) -> bool:
        return a[0].dtype != target

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        x = a[0].name
        if a[0].dtype == FLOAT and target != BOOL:  # bounded and rounded first: a float->int cast of inf is UB
            x = f"{x}.clamp(-100, 100).round()"
        return _line(r, f"{x}.to(torch.{target})", a[0].shape, target)

    return Op(1, fits, emit)


def _dim(shape: Shape, p: int) -> int:
    return p % len(shape)


def _reduce(name: str, kinds: str = "f") -> Op:
    """``torch.NAME(a, dim, keepdim)``: a reduction over one dim."""

    def fits(a: list[Value], p: int) -> bool:
        ok = (a[0].dtype == FLOAT and "f" in kinds) or (a[0].dtype in INTS and "i" in kinds)
        return ok and (len(a[0].shape) > 1 or p % 2 == 0)

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        d, keep = _dim(a[0].shape, p // 2), p % 2 == 0
        shape = list(a[0].shape)
        if keep:
            shape[d] = 1
        else:
            del shape[d]
        dtype = "int64" if name == "sum" and a[0].dtype in INTS else a[0].dtype
        return _line(r, f"torch.{name}({a[0].name}, dim={d}, keepdim={keep})", tuple(shape), dtype)

    return Op(1, fits, emit)


def _along(template: str, kinds: str = "f") -> Op:
    """An operator along one dim that keeps the shape (softmax, cumsum, flip)."""

    def fits(a: list[Value], p: int) -> bool:
        return (a[0].dtype == FLOAT and "f" in kinds) or (a[0].dtype in INTS and "i" in kinds)

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        dtype = "int64" if "cumsum" in template and a[0].dtype in INTS else a[0].dtype
        return _line(r, template.format(a=a[0].name, d=_dim(a[0].shape, p)), a[0].shape, dtype)

    return Op(1, fits, emit)


def _transpose() -> Op:
    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        n = len(a[0].shape)
        i, j = p % n, (p // n) % n
        if i == j:
            j = (i + 1) % n
        shape = list(a[0].shape)
        shape[i], shape[j] = shape[j], shape[i]
        return _line(r, f"{a[0].name}.transpose({i}, {j})", tuple(shape), a[0].dtype)

    return Op(1, lambda a, p: len(a[0].shape) >= 2, emit)


def _unsqueeze() -> Op:
    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        d = 1 + p % len(a[0].shape)  # after the batch dim
        shape = list(a[0].shape)
        shape.insert(d, 1)
        return _line(r, f"{a[0].name}.unsqueeze({d})", tuple(shape), a[0].dtype)

    return Op(1, lambda a, p: len(a[0].shape) < 4, emit)


def _squeeze() -> Op:
    def ones(v: Value) -> list[int]:
        return [i for i, s in enumerate(v.shape) if s == 1]

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        d = ones(a[0])[p % len(ones(a[0]))]
        shape = a[0].shape[:d] + a[0].shape[d + 1 :]
        return _line(r, f"{a[0].name}.squeeze({d})", shape, a[0].dtype)

    return Op(1, lambda a, p: bool(ones(a[0])) and len(a[0].shape) > 1, emit)


def _flatten() -> Op:
    def fits(a: list[Value], p: int) -> bool:
        return len(a[0].shape) >= 3 and all(map(_concrete, a[0].shape[1:]))

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        rest = 1
        for s in a[0].shape[1:]:
            rest *= s
        return _line(r, f"{a[0].name}.flatten(1)", (a[0].shape[0], rest), a[0].dtype)

    return Op(1, fits, emit)


def _narrow() -> Op:
    def fits(a: list[Value], p: int) -> bool:
        last = a[0].shape[-1]
        return _concrete(last) and last >= 2

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        last = a[0].shape[-1]
        start, length = p % (last - 1), 1 + (p // 3) % (last - 1)
        length = min(length, last - start)
        return _line(r, f"{a[0].name}[..., {start}:{start + length}]", a[0].shape[:-1] + (length,), a[0].dtype)

    return Op(1, fits, emit)


def _cat() -> Op:
    def fits(a: list[Value], p: int) -> bool:
        return a[0].shape == a[1].shape and a[0].dtype == a[1].dtype

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        d = _dim(a[0].shape, p)
        shape = list(a[0].shape)
        shape[d] = shape[d] * 2 if _concrete(shape[d]) else B
        if not _concrete(a[0].shape[d]):  # B + B is not B: join along another dim
            d = (d + 1) % len(shape)
            shape = list(a[0].shape)
            if not _concrete(shape[d]):
                return a[0]
            shape[d] *= 2
        return _line(r, f"torch.cat([{a[0].name}, {a[1].name}], dim={d})", tuple(shape), a[0].dtype)

    return Op(2, lambda a, p: fits(a, p) and len(a[0].shape) >= 2, emit)


def _linear() -> Op:
    def fits(a: list[Value], p: int) -> bool:
        return a[0].dtype == FLOAT and _concrete(a[0].shape[-1])

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        out = 1 + p % 8
        name = r.fresh("linear")
        r.init.append(f"self.{name} = torch.nn.Linear({a[0].shape[-1]}, {out}, bias={p % 3 != 0})")
        return _line(r, f"self.{name}({a[0].name})", a[0].shape[:-1] + (out,), FLOAT)

    return Op(1, fits, emit, 2.0)


def _conv2d() -> Op:
    def fits(a: list[Value], p: int) -> bool:
        s = a[0].shape
        return a[0].dtype == FLOAT and len(s) == 4 and all(map(_concrete, s[1:])) and min(s[2:]) >= 2

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        _, c, h, w = a[0].shape
        out, k = 1 + p % 4, 1 + 2 * ((p // 4) % 2)
        pad = k // 2
        name = r.fresh("conv")
        r.init.append(f"self.{name} = torch.nn.Conv2d({c}, {out}, {k}, padding={pad})")
        return _line(r, f"self.{name}({a[0].name})", (a[0].shape[0], out, h, w), FLOAT)

    return Op(1, fits, emit, 4.0)


def _pool2d(kind: str) -> Op:
    def fits(a: list[Value], p: int) -> bool:
        s = a[0].shape
        return a[0].dtype == FLOAT and len(s) == 4 and all(map(_concrete, s[2:])) and min(s[2:]) >= 2

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        n, c, h, w = a[0].shape
        expr = f"torch.nn.functional.{kind}({a[0].name}, 2)"
        return _line(r, expr, (n, c, h // 2, w // 2), FLOAT)

    return Op(1, fits, emit)


def _norm(kind: str) -> Op:
    def fits(a: list[Value], p: int) -> bool:
        s = a[0].shape
        if kind == "layer":
            return a[0].dtype == FLOAT and _concrete(s[-1])
        return a[0].dtype == FLOAT and len(s) == 4 and _concrete(s[1])

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        name = r.fresh("norm")
        if kind == "layer":
            r.init.append(f"self.{name} = torch.nn.LayerNorm({a[0].shape[-1]})")
        else:  # eval mode: running statistics, made non-trivial
            c = a[0].shape[1]
            r.init.append(f"self.{name} = torch.nn.BatchNorm2d({c}).eval()")
            r.init.append(f"self.{name}.running_mean.uniform_(-1, 1)")
            r.init.append(f"self.{name}.running_var.uniform_(0.5, 2)")
        return _line(r, f"self.{name}({a[0].name})", a[0].shape, FLOAT)

    return Op(1, fits, emit)


def _matmul() -> Op:
    def fits(a: list[Value], p: int) -> bool:
        s, t = a[0].shape, a[1].shape
        return a[0].dtype == a[1].dtype == FLOAT and len(s) == len(t) >= 2 and s[:-2] == t[:-2] and s[-1] == t[-1]

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        s, t = a[0].shape, a[1].shape
        expr = f"{a[0].name} @ {a[1].name}.transpose(-1, -2)"
        return _line(r, expr, s[:-1] + (t[-2],), FLOAT)

    return Op(2, fits, emit)


def _embedding() -> Op:
    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        name, dim = r.fresh("embedding"), 2 + p % 4
        r.init.append(f"self.{name} = torch.nn.Embedding(10, {dim})")
        return _line(r, f"self.{name}({a[0].name}.clamp(0, 9))", a[0].shape + (dim,), FLOAT)

    return Op(1, lambda a, p: a[0].dtype in INTS and len(a[0].shape) < 4, emit, 3.0)


def _buffer() -> Op:
    """A buffer mutated in ``forward`` (a running sum), then used: its state carries from one call to the next."""

    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        name = r.fresh("state")
        r.init.append(f'self.register_buffer("{name}", torch.ones(1))')
        r.body.append(f"self.{name}.mul_({SCALARS[p % len(SCALARS)]}).add_({a[0].name}.mean())")
        return _line(r, f"{a[0].name} - self.{name}", a[0].shape, FLOAT)

    return Op(1, lambda a, p: a[0].dtype == FLOAT, emit, 3.0)


COND_BRANCHES = ("torch.sin(t)", "torch.cos(t) * 2", "t.abs() + 1", "torch.relu(t) - 0.5", "t * t")


def _cond() -> Op:
    def emit(r: Rendered, a: list[Value], p: int) -> Value:
        yes, no = COND_BRANCHES[p % 5], COND_BRANCHES[(p // 5 + 1 + p) % 5]
        expr = f"torch.cond({a[0].name}.sum() > 0, lambda t: {yes}, lambda t: {no}, ({a[0].name},))"
        return _line(r, expr, a[0].shape, FLOAT)

    return Op(1, lambda a, p: a[0].dtype == FLOAT, emit, 2.0)


OPS: dict[str, Op] = {
    "relu": _unary("torch.relu({a})"),
    "sigmoid": _unary("torch.sigmoid({a})"),
    "tanh": _unary("torch.tanh({a})"),
    "exp": _unary("torch.exp({a}.clamp(max=10))"),
    "abs": _unary("torch.abs({a})", "fi"),
    "neg": _unary("torch.neg({a})", "fi"),
    "sin": _unary("torch.sin({a})"),
    "cos": _unary("torch.cos({a})"),
    "sqrt": _unary("torch.sqrt({a}.abs())"),
    "log": _unary("torch.log({a}.abs() + 1)"),
    "rsqrt": _unary("torch.rsqrt({a}.abs() + 1)"),
    "reciprocal": _unary("torch.reciprocal({a}.abs() + 0.5)"),
    "square": _unary("torch.square({a})", "fi"),
    "gelu": _unary("torch.nn.functional.gelu({a})"),
    "silu": _unary("torch.nn.functional.silu({a})"),
    "elu": _unary("torch.nn.functional.elu({a})"),
    "leaky_relu": _unary("torch.nn.functional.leaky_relu({a}, 0.1)"),
    "hardtanh": _unary("torch.nn.functional.hardtanh({a})"),
    "hardswish": _unary("torch.nn.functional.hardswish({a})"),
    "hardsigmoid": _unary("torch.nn.functional.hardsigmoid({a})"),
    "softplus": _unary("torch.nn.functional.softplus({a})"),
    "erf": _unary("torch.erf({a})"),
    "atan": _unary("torch.atan({a})"),
    "floor": _unary("torch.floor({a})"),
    "clamp": _unary("torch.clamp({a}, -1, 1)", "fi"),
    "sign": _unary("torch.sign({a})", "fi"),
    "add": _binary("{a} + {b}"),
    "sub": _binary("{a} - {b}"),
    "mul": _binary("{a} * {b}"),
    "div": _binary("{a} / ({b}.abs() + 1)", float_only=True),
    "maximum": _binary("torch.maximum({a}, {b})"),
    "minimum": _binary("torch.minimum({a}, {b})"),
    "atan2": _binary("torch.atan2({a}, {b})", float_only=True),
    "add_scalar": _scalar("{a} + {c}"),
    "mul_scalar": _scalar("{a} * {c}"),
    "rsub_scalar": _scalar("{c} - {a}"),
    "gt": _compare("{a} > {b}"),
    "lt": _compare("{a} < {b}"),
    "eq": _compare("{a} == {b}"),
    "logical_and": _logical("torch.logical_and({a}, {b})"),
    "logical_or": _logical("torch.logical_or({a}, {b})"),
    "logical_not": Op(1, lambda a, p: a[0].dtype == BOOL, lambda r, a, p: _line(r, f"~{a[0].name}", a[0].shape, BOOL)),
    "where": _where(),
    "to_float": _cast(FLOAT),
    "to_int32": _cast("int32"),
    "to_int64": _cast("int64"),
    "sum": _reduce("sum", "fi"),
    "mean": _reduce("mean"),
    "amax": _reduce("amax", "fi"),
    "amin": _reduce("amin", "fi"),
    "softmax": _along("torch.softmax({a}, dim={d})"),
    "log_softmax": _along("torch.log_softmax({a}, dim={d})"),
    "cumsum": _along("torch.cumsum({a}, dim={d})", "fi"),
    "flip": _along("torch.flip({a}, dims=[{d}])", "fi"),
    "transpose": _transpose(),
    "unsqueeze": _unsqueeze(),
    "squeeze": _squeeze(),
    "flatten": _flatten(),
    "narrow": _narrow(),
    "cat": _cat(),
    "linear": _linear(),
    "conv2d": _conv2d(),
    "max_pool2d": _pool2d("max_pool2d"),
    "avg_pool2d": _pool2d("avg_pool2d"),
    "layer_norm": _norm("layer"),
    "batch_norm": _norm("batch"),
    "matmul": _matmul(),
    "embedding": _embedding(),
    "buffer": _buffer(),
    "cond": _cond(),
}


# ------------------------------------------------------------------------------------------- render


def input_shape(case: Case, ones: tuple[bool, ...], batch: int | None = None) -> Shape:
    """An input's shape: the case's base shape with its broadcast dims set to 1 and dim 0 the batch."""
    shape: list[Any] = [1 if one else s for s, one in zip(case.base, ones)]
    if not ones[0]:
        shape[0] = (B if case.dynamic else case.base[0]) if batch is None else batch
    return tuple(shape)


def _apply(r: Rendered, step: Step) -> bool:
    op = OPS.get(step.op)
    if op is None or len(step.args) != op.arity:
        return False
    operands = [r.pick(b) for b in step.args]
    if not op.fits(operands, step.param):
        return False
    value = op.emit(r, operands, step.param)
    if value is operands[0]:
        return False
    r.values.append(value)
    r.used.append(step)
    return True


def render(case: Case) -> Rendered:
    """Replay the steps against the inputs: the lines of ``__init__`` and ``forward``, and the steps that fit."""
    r = Rendered(case)
    for i, (dtype, ones) in enumerate(case.inputs):
        r.values.append(Value(f"x{i}", input_shape(case, ones), dtype))
    for step in case.steps:
        _apply(r, step)
    names = []
    for back in case.outputs:
        name = r.pick(back).name
        if name not in names:
            names.append(name)
    r.outputs = names
    return r


def source(case: Case) -> str:
    """The case as a Python file whose ``factory()`` returns ``(module, example_args, dynamic_shapes)``: what
    ``edgetorch fuzz`` prints for a finding, and a file ``edgetorch fuzz`` and ``edgetorch debug`` can take."""
    r = render(case)
    inputs = ", ".join(f"x{i}" for i in range(len(case.inputs)))
    lines = [
        "import torch",
        "",
        "",
        "class Fuzzed(torch.nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        torch.manual_seed({case.seed})",
        *(f"        {line}" for line in r.init),
        "",
        f"    def forward(self, {inputs}):",
        *(f"        {line}" for line in r.body),
        f"        return ({', '.join(r.outputs)},)",
        "",
        "",
        f"def make_inputs(seed={case.seed}, batch={case.base[0]}):",
        "    g = torch.Generator().manual_seed(seed)",
        "    return (",
    ]
    for dtype, ones in case.inputs:
        shape = tuple("batch" if s == B else s for s in input_shape(case, ones))
        text = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
        if dtype == FLOAT:
            lines.append(f"        torch.randn({text}, generator=g),")
        elif dtype == BOOL:
            lines.append(f"        torch.randint(0, 2, {text}, generator=g).bool(),")
        else:
            lines.append(f"        torch.randint(-4, 5, {text}, generator=g, dtype=torch.{dtype}),")
    lines.append("    )")
    lines += ["", "", "def factory():"]
    if case.dynamic:
        specs = ", ".join("{}" if ones[0] else "{0: batch}" for _, ones in case.inputs)
        lines.append(f'    batch = torch.export.Dim("batch", min=2, max={MAX_BATCH})')
        lines.append(f"    return Fuzzed(), make_inputs(), ({specs}{',' if len(case.inputs) == 1 else ''})")
    else:
        lines.append("    return Fuzzed(), make_inputs(), None")
    return "\n".join(lines) + "\n"


def build(case: Case) -> dict[str, Any]:
    """The case's source executed: ``Fuzzed``, ``make_inputs`` and ``factory`` (our own generated code only)."""
    return load_source(source(case), f"edgetorch_fuzz_case_{case.seed}")


def load_source(text: str, name: str) -> dict[str, Any]:
    """Python source run as module ``name``: registered in ``sys.modules`` and ``linecache``, since
    ``torch.cond`` in eager mode compiles its branches and looks their module and lines up."""
    filename = f"<{name}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(text, filename, "exec"), module.__dict__)
    return module.__dict__


# ------------------------------------------------------------------------------------------- generate

_NAMES = sorted(OPS)
_WEIGHTS = [OPS[n].weight for n in _NAMES]


def generate(seed: int, index: int, max_steps: int = 8) -> Case:
    """The ``index``-th random case of campaign ``seed``: the same two numbers give the same case."""
    rng = random.Random(seed * 1_000_003 + index)
    rank = rng.choice((1, 2, 2, 3, 3, 4, 4))
    base = (EXAMPLE_BATCH,) + tuple(rng.choice((1, 2, 3, 4, 5, 6, 8)) for _ in range(rank - 1))
    dynamic = rank > 1 and rng.random() < 0.3
    inputs = []
    for i in range(rng.choice((1, 1, 2, 2, 3))):
        dtype = FLOAT if i == 0 or rng.random() < 0.6 else rng.choice((*INTS, BOOL))
        ones = tuple(False if d == 0 else (i > 0 and rng.random() < 0.3) for d in range(rank))
        inputs.append((dtype, ones))
    case = Case(seed * 1_000_003 + index, base, tuple(inputs), (), dynamic=dynamic)
    r = render(case)
    for _ in range(rng.randint(1, max_steps)):
        for _attempt in range(20):
            name = rng.choices(_NAMES, _WEIGHTS)[0]
            args = tuple(0 if k == 0 and rng.random() < 0.7 else rng.randrange(4) for k in range(OPS[name].arity))
            if _apply(r, Step(name, args, rng.randrange(1000))):
                break
    outputs = (0,) if rng.random() < 0.7 else (0, rng.randrange(1, len(r.values)))
    return case.with_(steps=tuple(r.used), outputs=outputs)
