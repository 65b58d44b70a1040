"""The XNNPACK PT2E quantizer: ``XNNPACKQuantizer`` and ``get_symmetric_quantization_config``.

Imports torch and torchao (compiler half of the XNNPACK backend).
"""

from edgetorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

__all__ = ["XNNPACKQuantizer", "get_symmetric_quantization_config"]
