"""Graph passes for XNNPACK lowering, at ExecuTorch's path (``executorch.backends.xnnpack._passes``).

``XNNPACKPassManager`` runs a list of passes on an ExportedProgram, each through ``_transform``, as
ExecuTorch's does: an ``XNNPACKPass`` is built with the program, any other ``ExportPass`` without
arguments. Its default list holds the rewrites the lowering relies on. ``ChannelsLastTaggedReshapePass``
is not in it: the serializer decides the NHWC layout itself while it writes the blob
(``backends.xnnpack.serialize``), and the pass shows that decision as a graph.
Imports torch.
"""

from __future__ import annotations

from torch._export.pass_base import PassType
from torch.export import ExportedProgram

from edgetorch.backends.transforms.remove_getitem_op import RemoveGetItemPass
from edgetorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
from edgetorch.backends.xnnpack._passes.convert_to_linear import ConvertToLinearPass
from edgetorch.backends.xnnpack._passes.fuse_activation_pass import FuseActivationPass
from edgetorch.backends.xnnpack._passes.fuse_batch_norm import FuseBatchNormPass
from edgetorch.backends.xnnpack._passes.remove_noop_expand_copy_pass import RemoveNoopExpandCopyPass
from edgetorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
from edgetorch.errors import InvalidArgumentError
from edgetorch.exir.pass_base import ExportPass
from edgetorch.exir.program._program import _transform

__all__ = [
    "ChannelsLastTaggedReshapePass",
    "ConvertToLinearPass",
    "FuseActivationPass",
    "FuseBatchNormPass",
    "RemoveGetItemPass",
    "RemoveNoopExpandCopyPass",
    "XNNPACKPass",
    "XNNPACKPassManager",
]

DEFAULT_PASSES: list[type[ExportPass]] = [ConvertToLinearPass, FuseBatchNormPass, FuseActivationPass, RemoveGetItemPass]


class XNNPACKPassManager:
    """Runs XNNPACK passes, in order, on one ExportedProgram; ``passes`` empty or None means the default list."""

    def __init__(self, exported_program: ExportedProgram, passes: list[type[PassType]] | None = None) -> None:
        self._exported_program = exported_program
        self.passes: list[type[PassType]] = list(passes) if passes else list(DEFAULT_PASSES)

    @property
    def exported_program(self) -> ExportedProgram:
        return self._exported_program

    def transform(self) -> ExportedProgram:
        """The program after every pass, each applied to the previous one's result."""
        program = self.exported_program
        for pass_ in self.passes:
            if not isinstance(pass_, type) or not issubclass(pass_, ExportPass):
                raise InvalidArgumentError(
                    f"XNNPACKPassManager takes ExportPass classes; found {pass_!r} ({type(pass_).__name__}); "
                    "pass the class, not an instance, or wrap a function with the RunPasses pass_functions"
                )
            instance = pass_(program) if issubclass(pass_, XNNPACKPass) else pass_()
            program = _transform(program, instance)
        return program
