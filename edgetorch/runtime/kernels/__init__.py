"""The portable kernel library: one module per operator family, all registering into ``registry``.

Importing this package registers nothing: :data:`registry.KERNELS` imports a family the first time
one of its operators is looked up (the index in ``_index.py`` says which), so a program loads only
the families it uses. :func:`load_all_families` imports every family.
"""

from edgetorch.runtime.kernels.registry import KERNELS, kernel, load_all_families, lookup, register_kernel
from edgetorch.runtime.memory import resize

__all__ = ["KERNELS", "kernel", "load_all_families", "lookup", "register_kernel", "resize"]
