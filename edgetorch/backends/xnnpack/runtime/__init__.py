"""The XNNPACK backend's runtime half: runs ExecuTorch XNNPACK delegate blobs with NumPy.

``init`` parses the blob, resolves constants as zero-copy views (of the blob or of the program's named
data), prepacks weights, and compiles the node list into planners. A planner, given the arrays of its
inputs at concrete shapes, allocates its outputs and returns bound steps (BLAS calls and ufuncs writing
into preallocated memory). A schedule (the steps for one set of input shapes) is built once and reused; a call
with new input shapes builds a new one, which is how XNNPACK graphs reshape at run time. Inside the graph,
convolutions and pooling work on NHWC tensors; ExecuTorch's lowering inserts the transposes from and to the
NCHW tensors the delegate exchanges with the program.

The modules, each one idea: ``values`` (the value table and quantization parameters), ``memory`` (the
scratch arena, buffer pooling and aliasing), ``geometry`` (window geometry), ``epilogues`` (bias and
clamp steps), ``float_layers`` and ``float_elementwise`` (the float planners, joined in ``planners``),
``quantization`` and ``quantized_nodes`` (the quantized planners), ``clamps`` (clamp fusion at load), ``pads``
(zero pads folded into convolutions at load) and ``delegate`` (compile, schedule, run; the BackendInterface).

Imports only the standard library, NumPy and the format code; registers itself as ``XnnpackBackend`` at
import.
"""

from __future__ import annotations

from edgetorch.backends.xnnpack.runtime.delegate import XnnpackBackend, XnnpackDelegate
from edgetorch.runtime.backends import register_backend

__all__ = ["XnnpackBackend", "XnnpackDelegate"]

register_backend("XnnpackBackend", XnnpackBackend())
