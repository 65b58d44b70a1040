"""ETDump under ExecuTorch's ``executorch.devtools.etdump`` paths: ``schema_flatcc`` (the schema as dataclasses)
and ``serialize`` (bytes to and from them). The format lives in :mod:`edgetorch.format.etdump`, the tracer
that writes it in :mod:`edgetorch.runtime.etdump`. Torch-free.
"""
