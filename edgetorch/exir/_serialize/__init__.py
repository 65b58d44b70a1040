"""``.pte`` (de)serialization of a Program with inline data, at ExecuTorch's ``exir._serialize``."""

from edgetorch.exir._serialize._program import PTEFile as _PTEFile
from edgetorch.exir._serialize._program import deserialize_pte_binary as _deserialize_pte_binary
from edgetorch.exir._serialize._program import serialize_pte_binary as _serialize_pte_binary

__all__ = ["_PTEFile", "_deserialize_pte_binary", "_serialize_pte_binary"]
