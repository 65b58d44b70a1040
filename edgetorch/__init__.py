"""edgetorch: PyTorch's on-device stack (ExecuTorch), rebuilt in Python.

``edgetorch.runtime`` and ``edgetorch.format`` need only NumPy and flatbuffers;
``edgetorch.exir`` (the compiler) needs PyTorch.
"""

__version__ = "0.1.0"
