"""``NamedDataStore``: blobs a program keeps under string keys, in the ``.pte`` or in ``.ptd`` files.

Backends put their weights here (``PreprocessResult.data_store_output``) instead of
inside their delegate blob; ``to_executorch`` puts the program's own constants here
when ``ExecutorchBackendConfig.external_constants`` asks for it. Each entry either
goes into the ``.pte``'s named data or, when it has an external tag, into the
``<tag>.ptd`` file (a FlatTensor, see ``edgetorch.format.ptd``). The runtime finds
entries by key in both. Identical bytes are stored once, whatever their keys.
May import the standard library and ``edgetorch.format`` only.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from edgetorch.format.ptd import TensorLayout

__all__ = ["DataEntry", "NamedDataStore", "NamedDataStoreOutput"]


@dataclass
class DataEntry:
    """One key's data: an index into the store's buffers, its alignment and, for a tensor, its layout."""

    buffer_index: int
    alignment: int
    tensor_layout: TensorLayout | None = None


@dataclass
class NamedDataStoreOutput:
    """A finished store: unique ``buffers``, entries for the ``.pte`` and, per external tag, for a ``.ptd``."""

    buffers: list[bytes] = field(default_factory=list)
    pte_data: dict[str, DataEntry] = field(default_factory=dict)
    external_data: dict[str, dict[str, DataEntry]] = field(default_factory=dict)


class NamedDataStore:
    """Collects named blobs; a key may be added again only with the same bytes."""

    def __init__(self) -> None:
        self.buffers: list[bytes] = []
        self.pte_data: dict[str, DataEntry] = {}
        self.external_data: dict[str, dict[str, DataEntry]] = {}
        self._by_digest: dict[bytes, int] = {}
        self._by_key: dict[str, int] = {}

    def add_named_data(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        alignment: int = 1,
        external_tag: str | None = None,
        tensor_layout: TensorLayout | None = None,
    ) -> None:
        """Store ``data`` under ``key``: in the ``.pte``, or in ``<external_tag>.ptd`` when a tag is given.

        Raises ValueError when ``key`` already holds different bytes or ``alignment`` is not positive.
        """
        if alignment <= 0:
            raise ValueError(f"alignment of {key!r} must be positive, found {alignment}")
        data = bytes(data)
        digest = hashlib.sha256(data).digest()
        index = self._by_digest.get(digest)
        if key in self._by_key and self._by_key[key] != index:
            raise ValueError(
                f"named data key {key!r} was added twice with different bytes ({len(data)} bytes now, "
                f"{len(self.buffers[self._by_key[key]])} before); give each blob its own key"
            )
        if index is None:
            index = self._by_digest[digest] = len(self.buffers)
            self.buffers.append(data)
        self._by_key[key] = index
        entries = self.pte_data if external_tag is None else self.external_data.setdefault(external_tag, {})
        previous = entries.get(key)
        if previous is not None:
            alignment = math.lcm(previous.alignment, alignment)
        entries[key] = DataEntry(index, alignment, tensor_layout)

    def merge_named_data_store(self, other: NamedDataStoreOutput) -> None:
        """Add every entry of ``other`` (e.g. a backend's ``data_store_output``), keeping its tags."""
        for key, entry in other.pte_data.items():
            self.add_named_data(key, other.buffers[entry.buffer_index], entry.alignment, None, entry.tensor_layout)
        for tag, entries in other.external_data.items():
            for key, entry in entries.items():
                self.add_named_data(key, other.buffers[entry.buffer_index], entry.alignment, tag, entry.tensor_layout)

    def get_named_data_store_output(self) -> NamedDataStoreOutput:
        """The store's contents (tags without entries left out)."""
        external = {tag: dict(entries) for tag, entries in self.external_data.items() if entries}
        return NamedDataStoreOutput(list(self.buffers), dict(self.pte_data), external)
