"""``generate_memory_trace`` where ExecuTorch's docs import it from: the memory plan as Chrome-trace JSON.

The implementation is :mod:`edgetorch.devtools.memory_plan`, which also plots the plan as a PNG.
"""

from edgetorch.devtools.memory_plan import generate_memory_trace

__all__ = ["generate_memory_trace"]
