"""ExecuTorch's ``executorch.util`` helpers that its docs import (``activation_memory_profiler``)."""
