"""The runtime half of the demo backend ``BackendWithCompilerDemo``: runs its blobs with NumPy.

The blob is a UTF-8 text program followed by raw constant data::

    BackendWithCompilerDemo 1
    input x float32
    const w float32 [2,2] 0 16
    op y float32 mm x w
    op z float32 add y w #2.0
    output z
    data 16
    <16 bytes of little-endian constant data>

``input`` lines name the delegate's inputs in call order; ``const`` gives a
constant's dtype, shape, offset and size in the data section; ``op`` computes a
named value of a dtype from an op of ``OPS`` applied to values and ``#``
literals; ``output`` lists the results in order. Torch-free: imports only the
standard library, NumPy and the runtime's backend registry, and registers
itself at import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetorch.errors import DelegateLoadError
from edgetorch.runtime.backends import BackendInterface, register_backend

BACKEND_ID = "BackendWithCompilerDemo"
VERSION = 1


def _add(a: np.ndarray, b: np.ndarray, alpha: float = 1) -> np.ndarray:
    return np.add(a, b) if alpha == 1 else np.add(a, np.multiply(b, alpha))


def _sub(a: np.ndarray, b: np.ndarray, alpha: float = 1) -> np.ndarray:
    return np.subtract(a, b) if alpha == 1 else np.subtract(a, np.multiply(b, alpha))


def _linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    y = np.matmul(x, weight.T)
    return y if bias is None else np.add(y, bias)


OPS: dict[str, Callable[..., np.ndarray]] = {
    "sin": np.sin,
    "cos": np.cos,
    "exp": np.exp,
    "tanh": np.tanh,
    "abs": np.abs,
    "neg": np.negative,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "add": _add,
    "sub": _sub,
    "mul": np.multiply,
    "div": np.true_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "mm": np.matmul,
    "linear": _linear,
}
"""The demo's operators by blob name; the compiler half accepts exactly these."""


@dataclass
class DemoProgram:
    """A parsed blob: input names, constants, steps (out, dtype, op, args) and output names."""

    inputs: list[str] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    steps: list[tuple[str, np.dtype, Callable[..., np.ndarray], list[Any]]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def parse(blob: bytes | memoryview) -> DemoProgram:
    """Parse a demo blob; DelegateLoadError saying what is wrong for anything malformed."""
    data = bytes(blob)
    marker = data.find(b"\ndata ")
    end = data.find(b"\n", marker + 1)
    if marker < 0 or end < 0:
        raise DelegateLoadError(f"{BACKEND_ID} blob has no 'data <size>' line; it was not written by this backend")
    payload = data[end + 1 :]
    program = DemoProgram()
    lines = data[:marker].decode("utf-8", errors="replace").split("\n")
    if lines[0] != f"{BACKEND_ID} {VERSION}":
        raise DelegateLoadError(f"{BACKEND_ID} blob starts with {lines[0][:40]!r}; expected '{BACKEND_ID} {VERSION}'")
    for number, line in enumerate(lines[1:], start=2):
        try:
            _parse_line(program, line.split(), payload)
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise DelegateLoadError(f"{BACKEND_ID} blob line {number} ({line[:60]!r}) is malformed: {e}") from None
    _check_names(program)
    return program


def _parse_line(program: DemoProgram, words: list[str], payload: bytes) -> None:
    kind, rest = words[0], words[1:]
    if kind == "input":
        program.inputs.append(rest[0])
    elif kind == "const":
        name, dtype, shape, offset, size = rest
        dims = tuple(int(d) for d in shape.strip("[]").split(",") if d)
        count = math.prod(dims)
        if int(offset) + int(size) > len(payload) or count * np.dtype(dtype).itemsize != int(size):
            raise ValueError(f"constant {name} ({size} bytes at {offset}) does not fit the data section")
        array = np.frombuffer(payload, np.dtype(dtype).newbyteorder("<"), count, int(offset))
        program.constants[name] = array.reshape(dims)
    elif kind == "op":
        out, dtype, op, *args = rest
        if op not in OPS:
            raise KeyError(f"unknown op {op!r}; this runtime knows {sorted(OPS)}")
        parsed = [float(a[1:]) if a.startswith("#") else a for a in args]
        program.steps.append((out, np.dtype(dtype), OPS[op], parsed))
    elif kind == "output":
        program.outputs.extend(rest)
    else:
        raise ValueError(f"unknown line kind {kind!r}")


def _check_names(program: DemoProgram) -> None:
    known = set(program.inputs) | set(program.constants)
    for out, _, _, args in program.steps:
        missing = [a for a in args if isinstance(a, str) and a not in known]
        if missing:
            raise DelegateLoadError(f"{BACKEND_ID} blob: op {out} reads {missing} before they are defined")
        known.add(out)
    missing = [o for o in program.outputs if o not in known]
    if missing:
        raise DelegateLoadError(f"{BACKEND_ID} blob: outputs {missing} are never computed")


class DemoBackend(BackendInterface):
    """Executes ``BackendWithCompilerDemo`` blobs: one NumPy call per op, results returned to the runtime."""

    def init(
        self, processed: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
    ) -> Any:
        return parse(processed)

    def execute(self, handle: DemoProgram, args: Sequence[Any]) -> list[np.ndarray]:
        values: dict[str, Any] = dict(handle.constants)
        values.update(zip(handle.inputs, args))
        for out, dtype, fn, op_args in handle.steps:
            result = fn(*(values[a] if isinstance(a, str) else a for a in op_args))
            values[out] = np.asarray(result).astype(dtype, copy=False)
        return [values[name] for name in handle.outputs]


register_backend(BACKEND_ID, DemoBackend())
