"""``weights_to_outputs_pass`` at ExecuTorch's path: a joint (training) program returns its trainable weights.

The work is :func:`edgetorch.exir.passes.weights_to_outputs.weights_to_outputs`. May import torch.
"""

from __future__ import annotations

from torch.export import ExportedProgram

from edgetorch.exir.passes.weights_to_outputs import weights_to_outputs

__all__ = ["weights_to_outputs_pass"]


def weights_to_outputs_pass(exported_program: ExportedProgram) -> ExportedProgram:
    """Append each parameter the program computes a gradient for to its outputs; the program, changed in place.

    A program without gradients is returned unchanged.
    """
    weights_to_outputs(exported_program)
    return exported_program
