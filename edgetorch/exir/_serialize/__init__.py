"""``.pte`` (de)serialization of a Program with inline data, at ExecuTorch's ``exir._serialize``.

The package's names load on first use: ``_cord`` (used by the named data store, which ``_program``
imports) must be importable without ``_program``.
"""

from typing import Any

__all__ = ["_PTEFile", "_deserialize_pte_binary", "_serialize_pte_binary"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from edgetorch.exir._serialize import _program

        return getattr(_program, name.removeprefix("_"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
