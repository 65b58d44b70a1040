"""A small declarative flatbuffer reader and writer.

A schema table is a dataclass whose fields carry their flatbuffer type in
``metadata["fb"]`` (see :func:`fb`); fields appear in vtable-slot order, and a
union field takes two slots (its type tag, then its value), as flatc does.
Reading checks every offset and length against the buffer, so a hostile file
raises :class:`FlatbufferError` instead of crashing or allocating more than
the file itself holds. Imports only the standard library and ``flatbuffers``.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import flatbuffers

from edgetorch.errors import EdgetorchError


class FlatbufferError(EdgetorchError, ValueError):
    """The bytes are not a well-formed flatbuffer of the expected schema."""


@dataclasses.dataclass(frozen=True)
class Scalar:
    fmt: str

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.fmt)


BOOL, BYTE, UBYTE = Scalar("?"), Scalar("b"), Scalar("B")
SHORT, USHORT = Scalar("h"), Scalar("H")
INT, UINT, LONG, ULONG = Scalar("i"), Scalar("I"), Scalar("q"), Scalar("Q")
FLOAT, DOUBLE = Scalar("f"), Scalar("d")
STRING = "string"


@dataclasses.dataclass(frozen=True)
class Vector:
    """A vector; ``blob`` vectors of ubyte read as zero-copy memoryviews, others as lists."""

    elem: Any
    align: int = 4
    blob: bool = False


@dataclasses.dataclass(frozen=True)
class Union:
    """Members in schema order; the type tag is the 1-based member index."""

    members: tuple


BYTES = Vector(UBYTE, blob=True)


_MISSING = object()


def fb(kind: Any, default: Any = _MISSING, enum: type | None = None) -> Any:
    """Declare a table field of flatbuffer type ``kind``; vectors default to ``[]``."""
    if default is _MISSING and isinstance(kind, Vector):
        return dataclasses.field(default_factory=list, metadata={"fb": kind, "enum": enum})
    if default is _MISSING:
        default = (False if kind is BOOL else 0.0 if kind.fmt in "fd" else 0) if isinstance(kind, Scalar) else None
    return dataclasses.field(default=default, metadata={"fb": kind, "enum": enum})


_LAYOUTS: dict[type, list[tuple[str, Any, int, type | None]]] = {}


def _layout(cls: type) -> list[tuple[str, Any, int, type | None]]:
    cached = _LAYOUTS.get(cls)
    if cached is not None:
        return cached
    slots, slot = [], 0
    for f in dataclasses.fields(cls):
        kind = f.metadata["fb"]
        if isinstance(kind, Union):
            slot += 1  # the hidden type-tag slot
        slots.append((f.name, kind, slot, f.metadata.get("enum")))
        slot += 1
    _LAYOUTS[cls] = slots
    return slots


# --------------------------------------------------------------------------- read


class _Reader:
    def __init__(self, buf: memoryview):
        self.buf = buf
        self.n = len(buf)

    def scalar(self, s: Scalar, pos: int) -> Any:
        if pos < 0 or pos + s.size > self.n:
            raise FlatbufferError(f"read of {s.size} bytes at offset {pos} is outside the {self.n}-byte buffer")
        return struct.unpack_from("<" + s.fmt, self.buf, pos)[0]

    def deref(self, pos: int) -> int:
        return pos + self.scalar(UINT, pos)

    def vector_span(self, pos: int, elem_size: int) -> tuple[int, int]:
        start = self.deref(pos)
        count = self.scalar(UINT, start)
        start += 4
        if count * elem_size > self.n - start:
            raise FlatbufferError(f"vector of {count} elements at offset {start} runs past the end of the buffer")
        return start, count

    def string(self, pos: int) -> str:
        start, count = self.vector_span(pos, 1)
        try:
            return bytes(self.buf[start : start + count]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise FlatbufferError(f"string at offset {start} is not UTF-8: {e}") from None

    def value(self, kind: Any, pos: int, enum: type | None) -> Any:
        if isinstance(kind, Scalar):
            v = self.scalar(kind, pos)
            return _to_enum(enum, v)
        if kind == STRING:
            return self.string(pos)
        if isinstance(kind, Vector):
            return self.vector(kind, pos, enum)
        return self.table(kind, self.deref(pos))

    def vector(self, kind: Vector, pos: int, enum: type | None) -> Any:
        elem = kind.elem
        if kind.blob:
            start, count = self.vector_span(pos, 1)
            return self.buf[start : start + count]
        if isinstance(elem, Scalar):
            start, count = self.vector_span(pos, elem.size)
            vals = list(struct.unpack_from(f"<{count}{elem.fmt}", self.buf, start))
            return [_to_enum(enum, v) for v in vals] if enum else vals
        start, count = self.vector_span(pos, 4)
        return [self.value(elem, start + 4 * i, enum) for i in range(count)]

    def table(self, cls: type, pos: int) -> Any:
        vtable = pos - self.scalar(INT, pos)
        vt_len = self.scalar(USHORT, vtable)
        if vt_len < 4 or vt_len % 2:
            raise FlatbufferError(f"vtable at offset {vtable} has invalid length {vt_len}")
        if vtable + vt_len > self.n:
            raise FlatbufferError(f"vtable at offset {vtable} runs past the end of the buffer")
        kwargs: dict[str, Any] = {}
        for name, kind, slot, enum in _layout(cls):
            off = self._slot(vtable, vt_len, slot)
            if isinstance(kind, Union):
                tag_off = self._slot(vtable, vt_len, slot - 1)
                tag = self.scalar(UBYTE, pos + tag_off) if tag_off else 0
                if tag == 0 or off == 0:
                    kwargs[name] = None
                    continue
                if tag > len(kind.members):
                    raise FlatbufferError(
                        f"{cls.__name__}.{name}: union type tag {tag} is not one of 1..{len(kind.members)}"
                    )
                kwargs[name] = self.table(kind.members[tag - 1], self.deref(pos + off))
            elif off:
                kwargs[name] = self.value(kind, pos + off, enum)
        return cls(**kwargs)

    def _slot(self, vtable: int, vt_len: int, slot: int) -> int:
        at = 4 + 2 * slot
        return self.scalar(USHORT, vtable + at) if at < vt_len else 0


def _to_enum(enum: type | None, v: Any) -> Any:
    if enum is None:
        return v
    try:
        return enum(v)
    except ValueError:
        raise FlatbufferError(f"value {v} is not a valid {enum.__name__}") from None


def decode(
    data: bytes | memoryview, root: type, file_identifier: bytes | None = None, size_prefixed: bool = False
) -> Any:
    """Read a flatbuffer whose root table is ``root``; byte vectors stay views of ``data``.

    ``size_prefixed``: the buffer starts with its length as a uint32 (as flatcc's runtimes write ETDump).
    """
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if size_prefixed:
        if len(buf) < 4 or struct.unpack_from("<I", buf, 0)[0] > len(buf) - 4:
            raise FlatbufferError("the size prefix is missing or larger than the buffer")
        buf = buf[4 : 4 + struct.unpack_from("<I", buf, 0)[0]]
    if len(buf) < 8:
        raise FlatbufferError(f"expected at least 8 bytes for a flatbuffer, found {len(buf)}")
    if file_identifier is not None and bytes(buf[4:8]) != file_identifier:
        raise FlatbufferError(f"expected file identifier {file_identifier!r}, found {bytes(buf[4:8])!r}")
    reader = _Reader(buf)
    try:
        return reader.table(root, reader.deref(0))
    except (struct.error, RecursionError) as e:
        raise FlatbufferError(f"malformed flatbuffer: {e}") from None


# -------------------------------------------------------------------------- write

_PREPEND = {
    "?": "PrependBool", "b": "PrependInt8", "B": "PrependUint8", "h": "PrependInt16",
    "H": "PrependUint16", "i": "PrependInt32", "I": "PrependUint32", "q": "PrependInt64",
    "Q": "PrependUint64", "f": "PrependFloat32", "d": "PrependFloat64",
}  # fmt: skip


class _Writer:
    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1024)

    def child(self, kind: Any, value: Any) -> int:
        """Write a non-inline value (string, vector, table) and return its offset."""
        if kind == STRING:
            return self.b.CreateString(value)
        if isinstance(kind, Vector):
            return self.vector(kind, value)
        # A table field takes any object with the table's fields (ExecuTorch's backend CompileSpec for the
        # schema's), written with the declared table's layout.
        return self.table(value, kind if isinstance(kind, type) and not isinstance(value, kind) else None)

    def vector(self, kind: Vector, items: Any) -> int:
        b, elem = self.b, kind.elem
        if kind.blob:
            data = bytes(items)
            b.StartVector(1, len(data), max(kind.align, 4))
            b.head -= len(data)
            b.Bytes[b.head : b.head + len(data)] = data
            return b.EndVector(len(data))
        if isinstance(elem, Scalar):
            items = list(items)
            b.StartVector(elem.size, len(items), max(elem.size, 4))
            prepend = getattr(b, _PREPEND[elem.fmt])
            for v in reversed(items):
                prepend(int(v) if elem.fmt not in "fd?" else v)
            return b.EndVector(len(items))
        offsets = [self.child(elem, v) for v in items]
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector(len(offsets))

    def table(self, obj: Any, cls: type | None = None) -> int:
        layout = _layout(cls or type(obj))
        children = {}
        for name, kind, _slot, _enum in layout:
            v = getattr(obj, name)
            if v is None or isinstance(kind, Scalar):
                continue
            children[name] = self.table(v) if isinstance(kind, Union) else self.child(kind, v)
        b = self.b
        b.StartObject(layout[-1][2] + 1 if layout else 0)
        for name, kind, slot, _enum in layout:
            v = getattr(obj, name)
            if isinstance(kind, Scalar):
                if v is None:
                    continue
                prepend = getattr(b, _PREPEND[kind.fmt] + "Slot")
                value, default = (_scalar(kind, x) for x in (v, _defaults(type(obj))[name]))
                prepend(slot, value, default)  # a value equal to the schema default is left out, as flatc does
            elif name in children:
                if isinstance(kind, Union):
                    b.PrependUint8Slot(slot - 1, _union_tag(kind, v), 0)
                b.PrependUOffsetTRelativeSlot(slot, children[name], 0)
        return b.EndObject()


def _scalar(kind: Scalar, v: Any) -> Any:
    return float(v) if kind.fmt in "fd" else (bool(v) if kind is BOOL else int(v))


_DEFAULTS: dict[type, dict[str, Any]] = {}


def _defaults(cls: type) -> dict[str, Any]:
    """Each scalar field's declared default (the schema's default, for example ``-1``), 0 when it has none."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = {f.name: 0 if f.default in (None, dataclasses.MISSING) else f.default for f in dataclasses.fields(cls)}
        _DEFAULTS[cls] = found
    return found


def _union_tag(kind: Union, value: Any) -> int:
    for i, member in enumerate(kind.members):
        if type(value) is member:
            return i + 1
    raise TypeError(f"{type(value).__name__} is not a member of union {[m.__name__ for m in kind.members]}")


def encode(obj: Any, file_identifier: bytes | None = None, size_prefixed: bool = False) -> bytes:
    """Serialize the table ``obj`` as a flatbuffer with ``obj`` as its root (``size_prefixed``: see decode)."""
    w = _Writer()
    root = w.table(obj)
    if size_prefixed:
        w.b.FinishSizePrefixed(root, file_identifier=file_identifier)
    else:
        w.b.Finish(root, file_identifier=file_identifier)
    return bytes(w.b.Output())
