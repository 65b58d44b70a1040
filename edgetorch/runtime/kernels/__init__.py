"""The portable kernel library: one module per operator family, all registering into ``registry``."""

from edgetorch.runtime.kernels import (  # noqa: F401  (imported for their registrations)
    backward,
    conv,
    creation,
    elementwise,
    elementwise_ext,
    index,
    linalg,
    linalg_ext,
    llama,
    normalization,
    pool,
    prim,
    quantized,
    random,
    reduction,
    search,
    shape,
    sort,
    special,
)
from edgetorch.runtime.kernels.registry import KERNELS, kernel, lookup, register_kernel
from edgetorch.runtime.memory import resize

__all__ = ["KERNELS", "kernel", "lookup", "register_kernel", "resize"]
