"""Schema dataclasses to and from JSON, under ExecuTorch's names (``exir._serialize._dataclass``).

``_DataclassEncoder`` is a ``json.JSONEncoder`` that writes a dataclass as an object of its fields
(and ``bytes`` as a list of ints). A field whose annotation is a union of several classes (a
flatbuffer union such as a ``KernelTypes`` value) also gets ``<field>_type``: the class name of the
value, so that ``_json_to_dataclass`` can tell which class to rebuild. ``_json_to_dataclass`` is the
inverse: it rebuilds ``cls`` from a parsed JSON object, recursing into nested dataclasses and lists,
looking enums up by member name (flatc's JSON) or by value (this encoder's), and raising
``TypeError`` for a missing field that is not optional. Standard library only.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from dataclasses import Field, fields, is_dataclass
from typing import Any

__all__ = ["_DataclassEncoder", "_json_to_dataclass"]


def _union_members(annotation: Any) -> tuple[Any, ...]:
    """The members of a ``Union[...]``/``X | Y`` annotation, or () for any other annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return ()


def _class_union(f: Field, annotation: Any) -> tuple[Any, ...]:
    """The classes of a field that holds one of two or more dataclasses (a value that needs a ``_type``
    tag), from its annotation or from edgetorch's flatbuffer field metadata; () for any other field."""
    kind = f.metadata.get("fb")
    members = [m for m in getattr(kind, "members", None) or _union_members(annotation) if m is not type(None)]
    return tuple(members) if len(members) > 1 and all(is_dataclass(m) for m in members) else ()


def _field_annotation(f: Field, annotation: Any) -> Any:
    """The field's annotation, made precise from edgetorch's flatbuffer metadata where the annotation
    is bare (``list`` of a schema table, an int stored for an enum)."""
    kind, enum_type = f.metadata.get("fb"), f.metadata.get("enum")
    if enum_type is not None:
        return enum_type | None
    elem = getattr(kind, "elem", None)
    if isinstance(elem, type) and is_dataclass(elem) and typing.get_origin(annotation) is not list:
        return list[elem]  # type: ignore[valid-type]
    return annotation


class _DataclassEncoder(json.JSONEncoder):
    """``json.dumps(obj, cls=_DataclassEncoder)`` for schema dataclasses."""

    def default(self, o: Any) -> Any:
        if is_dataclass(o) and not isinstance(o, type):
            hints = typing.get_type_hints(type(o))
            out: dict[str, Any] = {}
            for f in fields(o):
                value = getattr(o, f.name)
                out[f.name] = value
                if _class_union(f, hints[f.name]) and value is not None:
                    out[f"{f.name}_type"] = type(value).__name__
            return out
        if isinstance(o, (bytes, bytearray, memoryview)):
            return list(o)
        if isinstance(o, enum.Enum):
            return o.value
        return super().default(o)


def _rebuild(value: Any, annotation: Any, where: str) -> Any:
    if value is None:
        return None
    members = [m for m in _union_members(annotation) if m is not type(None)]
    if len(members) == 1:
        annotation = members[0]
    elif members:
        for member in members:  # a scalar union (e.g. int | float): keep the member the value already is
            if isinstance(member, type) and type(value) is member:
                return value
        if isinstance(value, list) and bytes in members:  # bytes | memoryview, written as a list of ints
            return bytes(value)
        raise TypeError(f"{where}: expected one of {members}; found {value!r}")
    if is_dataclass(annotation):
        return _json_to_dataclass(value, annotation)
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return [_rebuild(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if annotation is bytes:
        return bytes(value)
    if isinstance(annotation, enum.EnumMeta):
        if isinstance(value, str) and value in annotation.__members__:
            return annotation[value]
        return annotation(value)
    if annotation is Any or not isinstance(annotation, type):
        return value
    return annotation(value)


def _json_to_dataclass(json_dict: Any, cls: Any = None) -> Any:
    """``cls`` rebuilt from ``json_dict`` (a parsed JSON object); a value that is not for a dataclass
    comes back as it is."""
    if not is_dataclass(cls) or not isinstance(json_dict, dict):
        return json_dict
    hints = typing.get_type_hints(cls)
    data: dict[str, Any] = {}
    for f in fields(cls):
        annotation = _field_annotation(f, hints[f.name])
        where = f"{cls.__name__}.{f.name}"
        optional = type(None) in _union_members(annotation) or f.default is None
        if f.name not in json_dict:
            if optional:
                data[f.name] = None
                continue
            raise TypeError(
                f"{where}: expected a value (the field is not optional); found none in the JSON object, "
                f"which has {sorted(json_dict)}"
            )
        value = json_dict[f.name]
        members = _class_union(f, hints[f.name])
        if members and value is not None:
            tag = json_dict.get(f"{f.name}_type")
            chosen = [m for m in members if m.__name__ == tag]
            if not chosen:
                raise TypeError(f"{where}_type: expected one of {[m.__name__ for m in members]}; found {tag!r}")
            data[f.name] = _json_to_dataclass(value, chosen[0])
            continue
        data[f.name] = _rebuild(value, annotation, where)
    return cls(**data)
