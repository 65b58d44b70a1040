"""Developer tools: checking and inspecting what the compiler and the runtime do. May import every package.

ExecuTorch's names: ``generate_etrecord``, ``parse_etrecord``, ``ETRecord`` (built in
:mod:`edgetorch.exir.etrecord`), ``ETDumpGen`` (the runtime's tracer), ``Inspector`` and ``BundledProgram``.
"""

from edgetorch.devtools.bundled_program import BundledProgram
from edgetorch.devtools.inspector import Event, EventBlock, Inspector, PerfData, TimeScale
from edgetorch.exir.etrecord import ETRecord, generate_etrecord, parse_etrecord
from edgetorch.runtime.etdump import ETDumpGen, EventTracerDebugLogLevel

__all__ = [
    "BundledProgram",
    "ETDumpGen",
    "ETRecord",
    "Event",
    "EventBlock",
    "EventTracerDebugLogLevel",
    "Inspector",
    "PerfData",
    "TimeScale",
    "generate_etrecord",
    "parse_etrecord",
]
