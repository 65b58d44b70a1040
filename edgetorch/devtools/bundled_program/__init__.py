"""BundledProgram: a program plus test inputs and expected outputs, as ExecuTorch's ``devtools.bundled_program``."""

from edgetorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from edgetorch.devtools.bundled_program.core import BundledProgram

__all__ = ["BundledProgram", "MethodTestCase", "MethodTestSuite"]
