"""The op layer: each op declared once, one module per family, used by every runtime.

An op module gives, per op, the output-shape rule where one is needed, a step builder that returns the NumPy
step or, where the runtime's policy allows the compiled tier and the arrays suit it, the compiled one, and the
layout (NCHW or NHWC) as a parameter where the op has one. The portable kernels, the load-time fusions and the
XNNPACK delegate call these builders instead of keeping their own copies of the op.

``numeric`` holds the float formulas the ops share; ``activation`` GELU, SwiGLU and softmax; ``normalization``
RMSNorm; ``window`` the geometry of sliding windows (convolution and pooling output sizes, the stride-phase planes
their taps read); ``conv`` depthwise convolution and im2col; ``pool`` max and average pooling; ``epilogue`` what
a GEMM's output goes through (bias, clamp, GELU, residual add).
"""
