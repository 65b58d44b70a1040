"""The portable kernel library: one module per operator family, all registering into ``registry``."""

from edgetorch.runtime.kernels import (  # noqa: F401  (imported for their registrations)
    backward,
    conv,
    creation,
    elementwise,
    index,
    linalg,
    normalization,
    pool,
    prim,
    quantized,
    random,
    reduction,
    shape,
    sort,
    special,
)
from edgetorch.runtime.kernels.registry import KERNELS, kernel, lookup, register_kernel
from edgetorch.runtime.memory import resize

__all__ = ["KERNELS", "kernel", "lookup", "register_kernel", "resize"]
