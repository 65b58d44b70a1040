"""edgetorch.exir.backend: backend delegation, mirroring ``executorch.exir.backend``.

``Partitioner``/``PartitionResult``/``DelegationSpec`` tag what a backend takes,
``BackendDetails.preprocess`` compiles it, ``to_backend`` cuts it out into a
``LoweredBackendModule`` called through ``executorch_call_delegate``. Names load
on first use (the demo backend's runtime half lives in ``edgetorch.backends.demo``).
"""

from edgetorch._lazy import lazy_exports

_EXPORTS = {
    "BackendDetails": "backend_details",
    "PreprocessResult": "backend_details",
    "CompileSpec": "compile_spec_schema",
    "DelegationSpec": "partitioner",
    "PartitionResult": "partitioner",
    "Partitioner": "partitioner",
    "LoweredBackendModule": "lowered_backend_module",
    "to_backend": "backend_api",
    "executorch_call_delegate": "delegate",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
