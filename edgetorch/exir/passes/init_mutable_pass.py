"""InitializedMutableBufferPass: ask the emitter to write a mutable buffer's initial state.

A buffer the program mutates is planned memory; the emitter writes its initial
bytes into the mutable data segment only when they matter. This pass marks the
buffers whose placeholder name contains one of the given patterns
(``meta["et_init_buffer"] = True``), and the emitter then writes their state
even when it is all zeros, so the runtime starts from it and not from whatever
the arena held. May import torch and edgetorch.exir.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue

__all__ = ["INIT_BUFFER_KEY", "InitializedMutableBufferPass"]

INIT_BUFFER_KEY = "et_init_buffer"
"""The node meta key the emitter reads (ExecuTorch's name for it)."""


class InitializedMutableBufferPass(ExportPass):
    """Mark the placeholders whose name contains any of ``patterns`` as buffers with an initial state."""

    def __init__(self, patterns: Sequence[str]) -> None:
        super().__init__()
        self.patterns = list(patterns)

    def placeholder(self, name: str, arg: Any, meta: NodeMetadata) -> ProxyValue:
        if any(pattern in name for pattern in self.patterns):
            meta[INIT_BUFFER_KEY] = True
        return super().placeholder(name, arg, meta)
