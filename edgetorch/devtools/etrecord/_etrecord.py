"""ExecuTorch's ``executorch.devtools.etrecord._etrecord`` path (its API reference documents the names here).

The ETRecord is built in :mod:`edgetorch.exir.etrecord`, because ``to_edge(..., generate_etrecord=True)``
starts one and the compiler does not import the developer tools.
"""

from edgetorch.exir.etrecord import (
    ETRecord,
    ETRecordError,
    ETRecordReservedFileNames,
    _get_reference_outputs,
    _get_representative_inputs,
    generate_etrecord,
    parse_etrecord,
)

__all__ = [
    "ETRecord",
    "ETRecordError",
    "ETRecordReservedFileNames",
    "_get_reference_outputs",
    "_get_representative_inputs",
    "generate_etrecord",
    "parse_etrecord",
]
