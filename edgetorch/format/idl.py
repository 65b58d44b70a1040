"""A schema of edgetorch's flatbuffer dataclasses as FlatBuffers IDL text (``.fbs``).

edgetorch reads and writes its formats with its own codec (:mod:`edgetorch.format.flatbuffer`), from
dataclasses whose fields declare their flatbuffer types. :func:`render` writes those declarations as
IDL, for tools that want a schema file (``flatc``, ExecuTorch's schema-patching helpers): tables in
the order they are first reached from the root, enums with their underlying type, unions named as the
module names them, blob vectors with their ``force_align``. Imports only the standard library and the
format modules.
"""

from __future__ import annotations

import dataclasses
import enum
from types import ModuleType
from typing import Any

from edgetorch.format.flatbuffer import STRING, Scalar, Union, Vector

__all__ = ["render"]

_SCALARS = {"?": "bool", "b": "byte", "B": "ubyte", "h": "short", "H": "ushort", "i": "int", "I": "uint",
            "q": "long", "Q": "ulong", "f": "float", "d": "double"}  # fmt: skip


def _union_names(module: ModuleType) -> dict[int, str]:
    """id(Union) -> its IDL name, from the module constant that holds it (``KERNEL_TYPES`` -> ``KernelTypes``)."""
    return {
        id(value): "".join(part.capitalize() for part in name.lower().split("_"))
        for name, value in vars(module).items()
        if isinstance(value, Union)
    }


def render(
    root: type,
    module: ModuleType,
    file_identifier: bytes,
    extension: str,
    namespace: str,
    annotations: dict[tuple[str, str], str] | None = None,
    external_enums: dict[type, str] | None = None,
) -> str:
    """The IDL of ``root`` and every table, enum and union it reaches.

    ``annotations`` adds a comment to a field's line, by (table, field); ``external_enums`` names enums declared
    in another file (enum -> that file), which is then included instead of the enum being declared here.
    """
    annotations = annotations or {}
    external_enums = external_enums or {}
    unions = _union_names(module)
    tables: list[type] = []
    enums: dict[type, Any] = {}  # enum -> the scalar kind it is stored as
    union_decls: dict[str, Union] = {}

    def visit(cls: type) -> None:
        if cls in tables:
            return
        tables.append(cls)
        for f in dataclasses.fields(cls):
            kind, enum_type = f.metadata["fb"], f.metadata.get("enum")
            if enum_type is not None and enum_type not in enums and enum_type not in external_enums:
                enums[enum_type] = kind
            elem = kind.elem if isinstance(kind, Vector) else kind
            if isinstance(elem, Union):
                union_decls[unions[id(elem)]] = elem
                for member in elem.members:
                    visit(member)
            elif isinstance(elem, type) and dataclasses.is_dataclass(elem):
                visit(elem)

    visit(root)
    lines = [f'include "{name}";' for name in dict.fromkeys(external_enums.values())]
    lines += ["", f"namespace {namespace};", ""]
    for enum_type, stored in enums.items():
        lines += _enum(enum_type, _SCALARS[stored.fmt])
    for name, union in union_decls.items():
        lines += [f"union {name} {{", *[f"  {m.__name__}," for m in union.members], "}", ""]
    for cls in reversed(tables):  # leaves first, as schemas are usually read
        lines.append(f"table {cls.__name__} {{")
        for f in dataclasses.fields(cls):
            kind, stored_as = f.metadata["fb"], f.metadata.get("enum")
            line = f"  {f.name}: {_type(kind, stored_as, unions)}"
            if isinstance(kind, Vector) and kind.blob and kind.align > 4:
                line += f" (force_align: {kind.align})"
            note = annotations.get((cls.__name__, f.name))
            lines.append(line + ";" + (f"  // {note}" if note else ""))
        lines += ["}", ""]
    lines += [f"root_type {root.__name__};", f'file_identifier "{file_identifier.decode()}";',
              f'file_extension "{extension}";', ""]  # fmt: skip
    return "\n".join(lines)


def render_enum_file(enum_type: type[enum.IntEnum], namespace: str, underlying: str) -> str:
    """A schema file declaring one enum (as ExecuTorch keeps ScalarType in a file of its own)."""
    return "\n".join([f"namespace {namespace};", "", *_enum(enum_type, underlying)])


def _enum(enum_type: type, underlying: str) -> list[str]:
    members = [f"  {m.name} = {int(m.value)}," for m in enum_type]  # type: ignore[attr-defined]
    return [f"enum {enum_type.__name__} : {underlying} {{", *members, "}", ""]


def _type(kind: Any, enum_type: type | None, unions: dict[int, str]) -> str:
    if enum_type is not None:
        return enum_type.__name__
    if kind == STRING:
        return "string"
    if isinstance(kind, Scalar):
        return _SCALARS[kind.fmt]
    if isinstance(kind, Union):
        return unions[id(kind)]
    if isinstance(kind, Vector):
        return f"[{_type(kind.elem, None, unions)}]"
    return kind.__name__
