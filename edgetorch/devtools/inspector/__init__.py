"""The Inspector, laid out as ExecuTorch's ``executorch.devtools.inspector`` package: ``Inspector``, ``Event``,
``EventBlock``, ``PerfData`` (``_inspector``), ``TimeScale`` and ``compare_results`` (``_inspector_utils``), the
``numerical_comparator`` distances and the ``inspector_cli`` command.
"""

from edgetorch.devtools.inspector._inspector import Allocation, Event, EventBlock, Inspector, PerfData
from edgetorch.devtools.inspector._inspector_utils import TimeScale, compare_results

__all__ = ["Allocation", "Event", "EventBlock", "Inspector", "PerfData", "TimeScale", "compare_results"]
