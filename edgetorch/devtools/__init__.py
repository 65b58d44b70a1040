"""Developer tools: checking and inspecting what the compiler and the runtime do. May import every package.

ExecuTorch's names: ``generate_etrecord``, ``parse_etrecord``, ``ETRecord`` (built in
:mod:`edgetorch.exir.etrecord`), ``ETDumpGen`` (the runtime's tracer), ``Inspector`` and ``BundledProgram``;
and edgetorch's memory-plan and graph views (``plot_memory_timeline``, ``generate_memory_trace``,
``save_program_html``). The names load on first use, so that the torch-free tools (the memory plan, the
HTML view) import without torch.
"""

from edgetorch._lazy import lazy_exports
from edgetorch.runtime.etdump import ETDumpGen as ETDumpGen
from edgetorch.runtime.etdump import EventTracerDebugLogLevel as EventTracerDebugLogLevel

_EXPORTS = {
    "BundledProgram": "bundled_program",
    "Allocation": "inspector",
    "Event": "inspector",
    "EventBlock": "inspector",
    "Inspector": "inspector",
    "PerfData": "inspector",
    "TimeScale": "inspector",
    "ETRecord": "etrecord",
    "generate_etrecord": "etrecord",
    "parse_etrecord": "etrecord",
    "memory_timeline": "memory_plan",
    "plot_memory_timeline": "memory_plan",
    "generate_memory_trace": "memory_plan",
    "program_to_html": "html_view",
    "save_program_html": "html_view",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "ETDumpGen", "EventTracerDebugLogLevel"])
