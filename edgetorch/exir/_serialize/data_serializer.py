"""The interface of a named-data file format: ``DataSerializer`` turns a ``DataPayload`` into bytes and back.

A payload is a list of unique buffers and, per key, a ``DataEntry`` (which buffer, its alignment,
its tensor layout). ``.ptd`` (FlatTensor) is the format ExecuTorch ships; this is ExecuTorch's
``exir._serialize.data_serializer``. May import edgetorch.exir.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from edgetorch.exir._serialize._cord import Cord, CordBuffer
from edgetorch.exir.named_data_store import DataEntry

__all__ = ["DataEntry", "DataPayload", "DataSerializer"]


@dataclass
class DataPayload:
    """What a data file holds: unique ``buffers`` and, by key, where each blob is and how it is laid out."""

    buffers: Sequence[CordBuffer]
    named_data: dict[str, DataEntry]


class DataSerializer(ABC):
    """A data file format: ``serialize`` writes a payload, ``deserialize`` reads one back."""

    @abstractmethod
    def serialize(self, data: DataPayload) -> Cord:
        """The file's bytes for ``data``."""

    @abstractmethod
    def deserialize(self, blob: Cord) -> DataPayload:
        """The payload a file written by ``serialize`` holds."""
