"""``edgetorch.exir.pass_manager.PassManager``: the import path ExecuTorch's docs use.

The class itself lives with the pass infrastructure in :mod:`edgetorch.exir.pass_base`.
"""

from edgetorch.exir.pass_base import PassManager, PassType

__all__ = ["PassManager", "PassType"]
