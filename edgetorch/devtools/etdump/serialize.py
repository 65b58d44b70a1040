"""ETDump bytes to and from the schema's dataclasses, under ExecuTorch's names
(``executorch.devtools.etdump.serialize``). Torch-free.
"""

from __future__ import annotations

from edgetorch.format.etdump import ETDump, deserialize_etdump, serialize_etdump


def serialize_to_etdump_flatcc(etdump: ETDump) -> bytes:
    """The ETDump as the runtime writes it: a size-prefixed flatbuffer with identifier ``ED00``."""
    return serialize_etdump(etdump)


def deserialize_from_etdump_flatcc(data: bytes, size_prefixed: bool = True) -> ETDump:
    """Read an ETDump; ``size_prefixed`` is accepted for ExecuTorch's signature (both forms are recognised)."""
    return deserialize_etdump(data)


__all__ = ["deserialize_from_etdump_flatcc", "serialize_to_etdump_flatcc"]
