"""edgetorch.exir.serde: Edge programs as JSON, in the form ExecuTorch's ``executorch.exir.serde`` reads and writes.

:func:`serialize` and :func:`deserialize` live in :mod:`edgetorch.exir.serde.serialize`, as in ExecuTorch.
"""

from edgetorch.exir.serde.serialize import SerializedArtifact, SerializeError, deserialize, serialize

__all__ = ["SerializeError", "SerializedArtifact", "deserialize", "serialize"]
