"""``CompileSpec``: one backend-specific compile option, serialized next to the delegate blob.

May import the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CompileSpec"]


@dataclass
class CompileSpec:
    """A ``key`` -> ``value`` option handed to a backend's ``preprocess`` and, unchanged, to its runtime ``init``.

    The value is raw bytes because the program stores it as bytes; a backend
    encodes its own options (``b"1"``, a flatbuffer, ...).
    """

    key: str
    value: bytes
