"""ETRecord under ExecuTorch's import path (``executorch.devtools.etrecord``); built in :mod:`edgetorch.exir.etrecord`."""

from edgetorch.devtools.etrecord._etrecord import (
    ETRecord,
    ETRecordError,
    ETRecordReservedFileNames,
    generate_etrecord,
    parse_etrecord,
)

__all__ = ["ETRecord", "ETRecordError", "ETRecordReservedFileNames", "generate_etrecord", "parse_etrecord"]
