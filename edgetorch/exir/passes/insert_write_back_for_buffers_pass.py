"""``insert_write_back_for_buffers_pass``: each mutated buffer (or input) gets an explicit ``copy_`` back.

A program that updates a buffer returns the new value as an extra output; this pass makes the
graph copy it into the buffer itself, so the runtime keeps the state. The work is
:func:`edgetorch.exir.passes.out_variant.insert_buffer_write_back`. May import torch.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature

from edgetorch.exir.passes.out_variant import insert_buffer_write_back

__all__ = ["insert_write_back_for_buffers_pass"]


def insert_write_back_for_buffers_pass(ep: ExportedProgram) -> tuple[torch.fx.GraphModule, ExportGraphSignature]:
    """Insert the write-backs into ``ep`` (in place); its graph module and signature, as ExecuTorch returns them."""
    insert_buffer_write_back(ep)
    return ep.graph_module, ep.graph_signature
