"""``XNNPACKPass``: the base of the XNNPACK passes that need the program they run on (its parameters and
signature), not only its graph. Imports torch."""

from __future__ import annotations

from torch.export import ExportedProgram

from edgetorch.exir.pass_base import ExportPass

__all__ = ["XNNPACKPass"]


class XNNPACKPass(ExportPass):
    """An ``ExportPass`` built with the ``ExportedProgram`` whose graph it will be called on.

    ``XNNPACKPassManager`` builds these as ``pass_(exported_program)`` and every other ``ExportPass`` as
    ``pass_()``; a subclass reads and updates the program's state dict and signature through
    ``exported_program``.
    """

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__()
        self._exported_program = exported_program

    @property
    def exported_program(self) -> ExportedProgram:
        return self._exported_program
