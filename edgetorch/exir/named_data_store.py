"""``NamedDataStore``: blobs a program keeps under string keys, in the ``.pte`` or in ``.ptd`` files.

Backends put their weights here (``PreprocessResult.data_store_output``) instead of
inside their delegate blob; ``to_executorch`` puts the program's own constants here
when ``ExecutorchBackendConfig.external_constants`` asks for it. Each entry either
goes into the ``.pte``'s named data or, when it has an external tag, into the
``<tag>.ptd`` file (a FlatTensor, see ``edgetorch.format.ptd``). The runtime finds
entries by key in both. Identical bytes are stored once, whatever their keys; a blob
may stay on disk (``FileBackedData``) until the file is written. ExecuTorch keeps the
same in ``exir._serialize._named_data_store``. May import torch and edgetorch.exir.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import torch

from edgetorch.exir._serialize._cord import CordBuffer, FileBackedData
from edgetorch.exir.tensor import dim_order_from_stride, scalar_type_enum
from edgetorch.format.ptd import TensorLayout

__all__ = ["DataEntry", "NamedDataStore", "NamedDataStoreOutput", "tensor_layout_of"]


@dataclass
class DataEntry:
    """One key's data: an index into the store's buffers, its alignment and, for a tensor, its layout."""

    buffer_index: int
    alignment: int
    tensor_layout: TensorLayout | None = None


@dataclass
class NamedDataStoreOutput:
    """A finished store: unique ``buffers``, entries for the ``.pte`` and, per external tag, for a ``.ptd``."""

    buffers: list[CordBuffer] = field(default_factory=list)
    pte_data: dict[str, DataEntry] = field(default_factory=dict)
    external_data: dict[str, dict[str, DataEntry]] = field(default_factory=dict)


def tensor_layout_of(tensor: torch.Tensor) -> TensorLayout:
    """The layout a dense tensor's bytes have (dtype, sizes, dim order); ValueError when it is not dense."""
    if not (tensor.is_contiguous() or tensor.is_contiguous(memory_format=torch.channels_last)):
        raise ValueError(
            f"a named tensor must be dense (contiguous or channels-last); found strides {tuple(tensor.stride())} "
            f"for sizes {tuple(tensor.shape)}: call .contiguous() first"
        )
    return TensorLayout(
        scalar_type_enum(tensor.dtype), list(tensor.shape), list(dim_order_from_stride(tensor.stride()))
    )


class NamedDataStore:
    """Collects named blobs. A key is unique across the ``.pte`` and every tag; adding it again with the
    same bytes changes nothing, with other bytes raises ValueError."""

    def __init__(self) -> None:
        self.buffers: list[CordBuffer] = []
        self.pte_data: dict[str, DataEntry] = {}
        self.external_data: dict[str, dict[str, DataEntry]] = {}
        # Cheap first look (length, first 32 bytes) before a digest is computed; digests are kept per buffer.
        self.fingerprint_to_buffer_idx: dict[tuple[int, bytes], list[int]] = {}
        self.buffer_sha256: dict[int, bytes] = {}
        self.key_to_buffer_idx: dict[str, int] = {}

    def add_named_data(
        self,
        key: str,
        data: bytes | bytearray | memoryview | FileBackedData | torch.Tensor,
        alignment: int | None = 1,
        external_tag: str | None = None,
        tensor_layout: TensorLayout | None = None,
    ) -> None:
        """Store ``data`` under ``key``: in the ``.pte``, or in ``<external_tag>.ptd`` when a tag is given.

        A tensor's layout is taken from the tensor (a different ``tensor_layout`` is refused). Raises
        ValueError when ``key`` already holds different bytes or ``alignment`` is not positive.
        """
        alignment = 1 if alignment is None else alignment
        if alignment <= 0:
            raise ValueError(f"alignment of {key!r} must be positive, found {alignment}")
        if isinstance(data, torch.Tensor):
            layout = tensor_layout_of(data)
            if tensor_layout is not None and tensor_layout != layout:
                raise ValueError(
                    f"named tensor {key!r} has layout {layout}, but tensor_layout={tensor_layout} was given; "
                    "leave tensor_layout out for a tensor"
                )
            blob: CordBuffer = _tensor_bytes(data)
            tensor_layout = layout
        elif isinstance(data, FileBackedData):
            blob = data
        elif isinstance(data, bytes | bytearray | memoryview):
            blob = bytes(data)
        else:
            raise TypeError(
                f"named data {key!r} must be bytes, FileBackedData or a tensor; found {type(data).__name__}"
            )
        entries = self.pte_data if external_tag is None else self.external_data.setdefault(external_tag, {})
        if key in self.key_to_buffer_idx:
            index = self.key_to_buffer_idx[key]
            if len(blob) != len(self.buffers[index]) or _digest(blob) != self._digest(index):
                raise ValueError(
                    f"named data key {key!r} was added twice with different bytes ({len(blob)} bytes now, "
                    f"{len(self.buffers[index])} before); give each blob its own key"
                )
            if key in entries:
                entries[key].alignment = math.lcm(entries[key].alignment, alignment)
            return
        index = self._find(blob)
        if index is None:
            index = len(self.buffers)
            self.buffers.append(blob)
            self.fingerprint_to_buffer_idx.setdefault(_fingerprint(blob), []).append(index)
        self.key_to_buffer_idx[key] = index
        entries[key] = DataEntry(index, alignment, tensor_layout)

    def _find(self, blob: CordBuffer) -> int | None:
        candidates = self.fingerprint_to_buffer_idx.get(_fingerprint(blob), [])
        if not candidates:
            return None
        digest = _digest(blob)
        return next((i for i in candidates if self._digest(i) == digest), None)

    def _digest(self, index: int) -> bytes:
        if index not in self.buffer_sha256:
            self.buffer_sha256[index] = _digest(self.buffers[index])
        return self.buffer_sha256[index]

    def externalize_pte_data(self, max_data_bytes: int, tag_prefix: str) -> None:
        """Move every ``.pte`` entry to ``.ptd`` files of at most ``max_data_bytes`` each.

        Entries sharing a buffer stay together and count once; groups are taken in the order of their
        sorted keys, so the same store always gives the same files, each tagged ``<tag_prefix>_<sha256 of
        its keys>``. Nothing changes when a buffer alone exceeds the cap or two files would share a tag.
        """
        if isinstance(max_data_bytes, bool) or not isinstance(max_data_bytes, int) or max_data_bytes <= 0:
            raise ValueError(
                f"the external data shard cap (max_data_bytes, bytes per .ptd file) must be a positive integer, found {max_data_bytes!r}"
            )
        if not tag_prefix:
            raise ValueError("the external data tag prefix must be nonempty (it names the .ptd files)")
        groups: dict[int, dict[str, DataEntry]] = {}
        for key, entry in self.pte_data.items():
            groups.setdefault(entry.buffer_index, {})[key] = entry
        shards: list[dict[str, DataEntry]] = []
        size = 0
        for index, entries in sorted(groups.items(), key=lambda item: sorted(item[1])):
            nbytes = len(self.buffers[index])
            if nbytes > max_data_bytes:
                raise ValueError(
                    f"buffer {index} ({sorted(entries)}) has {nbytes} bytes and exceeds external data shard cap "
                    f"{max_data_bytes}; raise the cap"
                )
            if not shards or size + nbytes > max_data_bytes:
                shards.append({})
                size = 0
            shards[-1].update(entries)
            size += nbytes
        external = {tag: dict(entries) for tag, entries in self.external_data.items()}
        for shard in shards:
            keys = sorted(shard)
            tag = f"{tag_prefix}_{hashlib.sha256(chr(0).join(keys).encode()).hexdigest()}"
            entries = {key: shard[key] for key in keys}
            if tag in external and external[tag] != entries:
                raise ValueError(
                    f"external data tag collision: {tag!r} already holds other entries; use another tag_prefix"
                )
            external[tag] = entries
        self.external_data, self.pte_data = external, {}

    def merge_named_data_store(self, other: NamedDataStoreOutput) -> None:
        """Add every entry of ``other`` (e.g. a backend's ``data_store_output``), keeping its tags."""
        for key, entry in other.pte_data.items():
            self.add_named_data(key, other.buffers[entry.buffer_index], entry.alignment, None, entry.tensor_layout)
        for tag, entries in other.external_data.items():
            for key, entry in entries.items():
                self.add_named_data(key, other.buffers[entry.buffer_index], entry.alignment, tag, entry.tensor_layout)

    def get_named_data_store_output(self) -> NamedDataStoreOutput:
        """The store's contents (tags without entries left out)."""
        self.external_data = {tag: entries for tag, entries in self.external_data.items() if entries}
        return NamedDataStoreOutput(self.buffers, self.pte_data, self.external_data)


def _fingerprint(blob: CordBuffer) -> tuple[int, bytes]:
    return len(blob), blob.prefix(32) if isinstance(blob, FileBackedData) else blob[:32]


def _digest(blob: CordBuffer) -> bytes:
    return blob.sha256() if isinstance(blob, FileBackedData) else hashlib.sha256(blob).digest()


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's bytes in memory order (a channels-last tensor keeps its layout)."""
    data = tensor.detach().cpu()
    if not data.is_contiguous():
        return bytes(data.untyped_storage())
    return data.reshape(-1).view(torch.uint8).numpy().tobytes()
