"""What the ``edgetorch`` subcommands share: loading a program and the exit codes. Torch-free."""

from __future__ import annotations

from typing import Any

EXIT_OK, EXIT_ERROR = 0, 1  # argparse itself exits with 2 on a usage error


def load_program(path: str) -> Any:
    from edgetorch.runtime import Runtime

    return Runtime.get().load_program(path)
