"""PassRegistry: passes registered under a name, to be looked up by that name (ExecuTorch's registry).

May import edgetorch.exir.error.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

from edgetorch.exir.error import ExportError, ExportErrorType

__all__ = ["PassRegistry"]


class PassRegistry:
    """A process-wide map from a pass name to its list of passes (functions or pass instances)."""

    registry: ClassVar[dict[str, list[Any]]] = {}

    @classmethod
    def register(cls, pass_name: str | None = None) -> Callable[[Any], Any]:
        """Decorator: register a pass under ``pass_name``, or its snake_cased ``__name__``."""

        def wrapper(one_pass: Any) -> Any:
            name = pass_name or re.sub(r"(?<!^)(?=[A-Z])", "_", one_pass.__name__).lower()
            cls.register_list(name, [one_pass])
            return one_pass

        return wrapper

    @classmethod
    def register_list(cls, pass_name: str, pass_list: list[Any]) -> None:
        """Register a list of passes under one name; a name already taken keeps its passes (with a warning)."""
        if pass_name in cls.registry:
            warnings.warn(f"pass {pass_name!r} is already registered; the new one is ignored", stacklevel=2)
            return
        cls.registry[pass_name] = list(pass_list)

    @classmethod
    def get(cls, key: str) -> list[Any]:
        """The passes registered under ``key``."""
        if key not in cls.registry:
            raise ExportError(
                ExportErrorType.MISSING_PROPERTY,
                f"no pass is registered as {key!r}; registered: {sorted(cls.registry)}",
            )
        return cls.registry[key]
