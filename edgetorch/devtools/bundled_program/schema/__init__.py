"""The BundledProgram schema as dataclasses (``executorch.devtools.bundled_program.schema``). Torch-free."""

from edgetorch.devtools.bundled_program.schema import bundled_program_schema
from edgetorch.devtools.bundled_program.schema.bundled_program_schema import *  # noqa: F403

__all__ = list(bundled_program_schema.__all__)
