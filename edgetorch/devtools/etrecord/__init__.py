"""ETRecord under ExecuTorch's import path (``executorch.devtools.etrecord``); built in :mod:`edgetorch.exir.etrecord`."""

from edgetorch.devtools.etrecord._etrecord import ETRecord, ETRecordError, generate_etrecord, parse_etrecord

__all__ = ["ETRecord", "ETRecordError", "generate_etrecord", "parse_etrecord"]
