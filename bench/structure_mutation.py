"""Structure-aware mutation for bench/fuzz.py: decode a file into its schema's dataclasses, change one field of
the decoded tree (a tensor's sizes, dim order or dtype, a value index, an instruction's argument, a memory-plan
offset or size, an XNNPACK value id, datatype or node parameter, an ETDump or BundledProgram field), and encode it
again. The result passes the reader's structural checks (it is a well-formed flatbuffer with a valid header), so
the case reaches the loader's semantic checks, the executor, the kernels and the delegates, where byte flips
mostly stop at the first checksum-like check.

Torch-free: it uses the same schema code as the runtime (edgetorch/format, the XNNPACK blob schema).
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Callable
from typing import Any

from edgetorch.backends.xnnpack.blob import build_blob, parse_blob
from edgetorch.format import bundled_program as fbb
from edgetorch.format import etdump as fed
from edgetorch.format import program as fbp
from edgetorch.format.ptd import load_ptd, save_ptd
from edgetorch.format.pte import load_pte, save_pte

_INTS = [0, 1, 2, 3, -1, -2, 7, 8, 255, 256, 65535, 2**31 - 1, -(2**31), 2**32, 2**62, -(2**62)]
_FLOATS = [0.0, -0.0, 1e-45, 1e38, -1e38, float("inf"), float("-inf"), float("nan")]


@dataclasses.dataclass
class _Slot:
    """One place in a decoded tree: ``holder[key]`` (a list index) or ``getattr(holder, key)``."""

    holder: Any
    key: int | str
    value: Any

    def set(self, value: Any) -> None:
        if isinstance(self.key, int):
            self.holder[self.key] = value
        else:
            setattr(self.holder, self.key, value)


def _slots(root: Any) -> list[_Slot]:
    """Every field and list element of ``root``'s dataclass tree (bytes payloads included, not entered)."""
    found: list[_Slot] = []
    stack = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if dataclasses.is_dataclass(node):
            items: list[tuple[int | str, Any]] = [(f.name, getattr(node, f.name)) for f in dataclasses.fields(node)]
        elif isinstance(node, list):
            items = list(enumerate(node))
        else:
            continue
        for key, value in items:
            found.append(_Slot(node, key, value))
            if dataclasses.is_dataclass(value) or isinstance(value, list):
                stack.append(value)
    return found


def _new_int(value: int, pool: list[int], rng: random.Random) -> int:
    pick = rng.randrange(5)
    if pick == 0:
        return value + rng.choice((-1, 1))
    if pick == 1 and pool:
        return rng.choice(pool)  # another index or size of the same file: a plausible confusion
    if pick == 2:
        return value * rng.choice((2, 16, 1024, -1))
    return rng.choice(_INTS)


def mutate_tree(root: Any, rng: random.Random) -> str:
    """Change one place of ``root`` in place; returns what was changed (for the findings' log)."""
    slots = [s for s in _slots(root) if s.value is not None]
    if not slots:
        return "nothing to change"
    ints = [s.value for s in slots if isinstance(s.value, int) and not isinstance(s.value, bool)]
    strings = [s.value for s in slots if isinstance(s.value, str)]
    slot = rng.choice(slots)
    value, where = slot.value, f"{type(slot.holder).__name__}.{slot.key}"
    if isinstance(value, bool):
        slot.set(not value)
    elif isinstance(value, enum.IntEnum):
        members = list(type(value))
        slot.set(rng.choice(members) if rng.random() < 0.8 else int(rng.choice(_INTS[:11])))
    elif isinstance(value, int):
        slot.set(_new_int(value, ints, rng))
    elif isinstance(value, float):
        slot.set(rng.choice(_FLOATS + [value * 2, -value]))
    elif isinstance(value, str):
        slot.set(rng.choice(strings + ["", "aten::nonexistent.out", value[: len(value) // 2]]))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytearray(value)
        if raw and rng.random() < 0.5:
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        else:
            del raw[rng.randrange(len(raw) + 1) :]
        slot.set(bytes(raw))
    elif isinstance(value, list):
        _mutate_list(value, rng)
    elif dataclasses.is_dataclass(value):
        same = [s.value for s in slots if type(s.value) is type(value) and s.value is not value]
        if not same:
            return mutate_tree(value, rng)
        slot.set(rng.choice(same))
    return where


def _mutate_list(items: list, rng: random.Random) -> None:
    if not items:
        return
    pick = rng.randrange(4)
    i = rng.randrange(len(items))
    if pick == 0:
        del items[i]
    elif pick == 1:
        items.insert(rng.randrange(len(items) + 1), items[i])
    elif pick == 2:
        j = rng.randrange(len(items))
        items[i], items[j] = items[j], items[i]
    else:
        del items[rng.randrange(len(items)) :]


# ------------------------------------------------------------------------------------------------ per format


def _pte(data: bytes, rng: random.Random) -> bytes:
    pte = load_pte(data)
    segments = [bytes(pte.segment(i)) for i in range(len(pte.program.segments))]
    blobs = _xnnpack_segments(pte.program, segments)
    if blobs and rng.random() < 0.4:  # half the delegated files: the delegate's graph, not the program
        index = rng.choice(blobs)
        segments[index] = _blob(segments[index], rng)
    else:
        mutate_tree(pte.program, rng)
    return save_pte(pte.program, segments)


def _xnnpack_segments(program: fbp.Program, segments: list[bytes]) -> list[int]:
    """Indices of the segments that hold XNNPACK delegate blobs."""
    found = []
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            ref = delegate.processed
            if delegate.id == "XnnpackBackend" and ref is not None and ref.location == 1 and ref.index < len(segments):
                found.append(ref.index)
    return found


def _blob(data: bytes, rng: random.Random) -> bytes:
    blob = parse_blob(data)
    mutate_tree(blob.graph, rng)
    return build_blob(blob.graph, blob.constant_data)


def _etdump(data: bytes, rng: random.Random) -> bytes:
    dump = fed.deserialize_etdump(data)
    mutate_tree(dump, rng)
    return fed.serialize_etdump(dump)


def _bpte(data: bytes, rng: random.Random) -> bytes:
    bundle = fbb.deserialize_bundled_program(data)
    if rng.random() < 0.5:
        bundle.program = _pte(bytes(bundle.program), rng)
    else:
        mutate_tree(bundle, rng)
    return fbb.serialize_bundled_program(bundle)


def _ptd(data: bytes, rng: random.Random) -> bytes:
    ptd = load_ptd(data)
    named = ptd.named_data()
    tensors = {
        entry.key: (bytes(named[entry.key]), entry.tensor_layout)
        for entry in ptd.flat_tensor.named_data
        if entry.key in named
    }
    layouts = [layout for _, layout in tensors.values() if layout is not None]
    if layouts and rng.random() < 0.7:
        mutate_tree(rng.choice(layouts), rng)
    elif tensors:
        key = rng.choice(sorted(tensors))
        blob, layout = tensors.pop(key)
        tensors[rng.choice([key, key + "x", ""])] = (blob[: rng.randrange(len(blob) + 1)], layout)
    return save_ptd(tensors)


MUTATORS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "pte": _pte,
    "blob": _blob,
    "etdump": _etdump,
    "bpte": _bpte,
    "ptd": _ptd,
}


def mutate_structure(kind: str, data: bytes, rng: random.Random) -> bytes | None:
    """A structural mutation of ``data`` (a file of ``kind``), or None when the kind has no structure here or
    the file (itself a mutation) no longer decodes, or the change cannot be encoded (a value out of its field's
    range): the caller then mutates bytes instead."""
    mutator = MUTATORS.get(kind)
    if mutator is None:
        return None
    try:
        return mutator(data, rng)
    except Exception:  # noqa: BLE001 - a case that cannot be built is simply not a case
        return None
