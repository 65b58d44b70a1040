"""Writing an ``XNNGraph`` as the bytes ExecuTorch's XNNPACK runtime loads, with ExecuTorch's function names.

``convert_to_flatbuffer`` gives the bare ``XN01`` flatbuffer; ``serialize_xnnpack_binary``
the blob (``XH00`` header, flatbuffer, constant data) that ``backends.xnnpack.blob``
writes and parses. Torch-free.
"""

from __future__ import annotations

from typing import Literal

from edgetorch.backends.xnnpack.blob import CONSTANT_ALIGNMENT, XNNHeader, build_blob
from edgetorch.backends.xnnpack.schema import FILE_IDENTIFIER, XNNGraph
from edgetorch.format.flatbuffer import encode

__all__ = ["CONSTANT_TENSOR_ALIGNMENT", "XNNHeader", "convert_to_flatbuffer", "serialize_xnnpack_binary"]

CONSTANT_TENSOR_ALIGNMENT = CONSTANT_ALIGNMENT
_HEADER_BYTEORDER: Literal["little"] = "little"  # the byte order of the header's fields, as ExecuTorch names it


def convert_to_flatbuffer(xnnpack_graph: XNNGraph) -> bytes:
    """``xnnpack_graph`` as an ``XN01`` flatbuffer."""
    return encode(xnnpack_graph, FILE_IDENTIFIER)


def serialize_xnnpack_binary(xnnpack_graph: XNNGraph, constant_data_bytes: bytes | bytearray = b"") -> bytes:
    """``xnnpack_graph`` and its constant data as one delegate blob, headed by ``XNNHeader``."""
    return build_blob(xnnpack_graph, bytes(constant_data_bytes))
