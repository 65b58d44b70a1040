"""Cord: a byte sequence assembled from pieces without copying them, and FileBackedData, a piece on disk.

A ``.pte`` or ``.ptd`` file is a header, a flatbuffer and segments of possibly large
data. A Cord keeps references to those pieces (``bytes`` or files on disk) in order and
writes them one after the other, so building a file never joins them into one buffer.
This is ExecuTorch's ``exir._serialize._cord``. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import weakref
from types import TracebackType
from typing import BinaryIO

__all__ = ["Cord", "CordBuffer", "FileBackedData"]

_CHUNK = 8 << 20


class FileBackedData:
    """Bytes that stay in a file until read; with ``cleanup`` the file is deleted on ``close`` or collection."""

    def __init__(self, path: str, cleanup: bool = False, sha256: bytes | None = None) -> None:
        self._path = path
        self._size = os.path.getsize(path)
        self._sha256 = sha256
        self._finalizer = weakref.finalize(self, _remove, path) if cleanup else None

    @classmethod
    def move_from(cls, path: str, sha256: bytes | None = None) -> FileBackedData:
        """Take over the file at ``path`` (renamed to a private name beside it, removed on close)."""
        fd, owned = tempfile.mkstemp(prefix=".edgetorch_", suffix=".data", dir=os.path.dirname(path) or ".")
        os.close(fd)
        try:
            os.replace(path, owned)
        except OSError:
            os.remove(owned)
            raise
        return cls(owned, cleanup=True, sha256=sha256)

    def __len__(self) -> int:
        return self._size

    def prefix(self, size: int) -> bytes:
        """The first ``size`` bytes."""
        with open(self._path, "rb") as f:
            return f.read(size)

    def sha256(self) -> bytes:
        """The SHA-256 digest of the contents, read in chunks once and remembered."""
        if self._sha256 is None:
            digest = hashlib.sha256()
            with open(self._path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
            self._sha256 = digest.digest()
        return self._sha256

    def to_bytes(self) -> bytes:
        with open(self._path, "rb") as f:
            return f.read()

    __bytes__ = to_bytes

    def write_to_file(self, outfile: BinaryIO) -> None:
        """Copy the contents to ``outfile`` in chunks."""
        with open(self._path, "rb") as f:
            shutil.copyfileobj(f, outfile, _CHUNK)

    def close(self) -> None:
        """Delete the file now if this object owns it."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> FileBackedData:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


CordBuffer = bytes | FileBackedData


class Cord:
    """An ordered list of byte pieces read as one sequence; appending a Cord shares its pieces."""

    def __init__(self, data: CordBuffer | Cord | None = None) -> None:
        self._buffers: list[CordBuffer] = []
        self._byte_size = 0
        if data is not None:
            self.append(data)

    def __len__(self) -> int:
        return self._byte_size

    def __bytes__(self) -> bytes:
        return b"".join(piece if isinstance(piece, bytes) else piece.to_bytes() for piece in self._buffers)

    def append(self, data: CordBuffer | Cord) -> None:
        """Add ``data`` at the end (no copy)."""
        if isinstance(data, Cord):
            self._buffers.extend(data._buffers)
        elif isinstance(data, bytes | FileBackedData):
            self._buffers.append(data)
        else:
            raise TypeError(f"a Cord holds bytes, FileBackedData or Cords; found {type(data).__name__}")
        self._byte_size += len(data)

    def write_to_file(self, outfile: BinaryIO) -> None:
        """Write every piece to ``outfile`` in order."""
        for piece in self._buffers:
            if isinstance(piece, bytes):
                outfile.write(piece)
            else:
                piece.write_to_file(outfile)
