"""compiled.Helpers: the one way a kernel module asks for the compiled tier and gets the globals its compiled
kernels call (numba's prange, compiled and inlined helpers, intrinsics) bound; with the tier off it answers
False and binds nothing."""

from __future__ import annotations

import pytest

from edgetorch.backends.xnnpack import fast, qgemv
from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, depthwise, gemm, windows, winograd

MODULES = (compiled, windows, depthwise, gemm, winograd, fast, qgemv)


def test_every_kernel_module_declares_its_helpers_once():
    for module in MODULES:
        assert isinstance(module.HELPERS, compiled.Helpers), module.__name__
        assert module.HELPERS.namespace is vars(module), module.__name__
        assert not hasattr(module, "_bind"), f"{module.__name__} still rebinds its own globals"


def test_tier_off_answers_false_and_binds_nothing(set_policy):
    set_policy(compiled=False)
    namespace = {"__name__": "nowhere", "prange": range, "_helper": len}
    helpers = compiled.Helpers(namespace, compile=("_helper",), build={"_made": lambda: 1 / 0})
    assert not helpers.ready()
    assert namespace == {"__name__": "nowhere", "prange": range, "_helper": len} and not helpers.bound
    assert all(not module.HELPERS.ready() for module in MODULES)


@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_tier_on_binds_every_declared_global_to_numba(set_policy):
    import numba

    set_policy(compiled=True)
    for module in MODULES:
        helpers = module.HELPERS
        assert helpers.ready() and helpers.bound
        space = vars(module)
        if "prange" in space:
            assert space["prange"] is numba.prange, module.__name__
        for name in (*helpers.compile, *helpers.inline):
            assert hasattr(space[name], "py_func"), f"{module.__name__}.{name} is not compiled"
        assert all(space[name] is not None for name in helpers.build), module.__name__
    assert winograd._gemm_part is gemm._gemm_part  # made ready after the module it takes a kernel from
