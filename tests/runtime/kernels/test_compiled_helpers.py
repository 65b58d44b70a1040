"""compiled.Helpers: the one way a kernel module asks for the compiled tier and gets the globals its compiled
kernels call (numba's prange, compiled and inlined helpers, intrinsics) bound; with the tier off it answers
False and binds nothing."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from edgetorch.backends.xnnpack import fast, qgemv
from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, depthwise, gemm, windows, winograd

ROOT = pathlib.Path(__file__).resolve().parents[3]

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


def test_a_step_builder_called_with_the_tier_off_says_so_instead_of_returning_none(set_policy):
    """ "Tier off" and "not these arrays" are different answers: a builder's None means only the second."""
    import numpy as np

    x = np.zeros((1, 4, 4, 8), np.float32)
    y = np.zeros((1, 2, 2, 8), np.float32)
    window = (2, 2, 2, 2, 1, 1, 0, 0)
    a, b = np.zeros((2, 8, 8), np.float32), np.zeros((2, 8, 8), np.float32)
    builders = {
        "im2col_step": lambda: windows.im2col_step(x, np.zeros((4, 32), np.float32), 2, 2, *window),
        "max_pool_step": lambda: windows.max_pool_step(x, y, *window),
        "depthwise nhwc_step": lambda: depthwise.nhwc_step(x, np.zeros((4, 8), np.float32), np.zeros(0, np.float32), y, *window, -np.inf, np.inf),
        "batch_matmul": lambda: gemm.batch_matmul(a, b, np.zeros((2, 8, 8), np.float32)),
        "PackedGemm": lambda: gemm.PackedGemm(np.zeros((8, 8), np.float32), None),
        "add_clamp": lambda: fast.add_clamp(a, b, a.copy(), 0.0, 6.0),
        "rows_step": lambda: compiled.rows_step("gelu", a.reshape(-1), a.reshape(-1)),
    }  # fmt: skip
    set_policy(compiled=False)
    for name, build in builders.items():
        with pytest.raises(policy.TierOffError, match=f"{name}.*expected the compiled tier to be on"):
            build()
    set_policy(compiled=True)
    if policy.compiled_tier():  # with the tier on the same calls build (or decline these arrays with None)
        for build in builders.values():
            build()


@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_serial_and_threaded_builds_have_their_own_cache_entries(tmp_path):
    """numba's disk cache does not key a build by its options: a kernel compiled serially and with numba's
    threads (gemm's batched product) must be cached under two names, or a later process loads one build for
    both (attention's products then ran serially at 2 threads)."""
    script = (
        "import numpy as np\n"
        "from edgetorch.runtime import policy\n"
        "from edgetorch.runtime.kernels import gemm\n"
        "policy.compiled_tier()\n"
        "a, b = np.ones((2, 12, 8), np.float32), np.ones((2, 8, 16), np.float32)\n"
        "with policy.using(split_macs=0, batch_macs=0):\n"
        "    step = gemm.batch_matmul(a, b, np.empty((2, 12, 16), np.float32))\n"
        "step.args[0]()\n"
        "step.args[1](2)\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=600)
    names = {p.name.split("-")[0] for p in tmp_path.rglob("*.nbi") if "_bmm" in p.name}
    assert names == {"gemm._bmm", "gemm._bmm_threaded"}, names


def _twice(x, y):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        y[i] = 2 * x[i]


@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_a_kernel_called_at_its_address_runs_for_its_types_only():
    """``call_at`` calls the build ``address`` made (the fused block's threads call its band so); a caller
    passing other types does not compile, instead of calling that build with arguments it cannot read."""
    import numba
    import numpy as np
    from numba.core.errors import TypingError

    call_at, twice = compiled._call_at(), numba.njit(_twice)

    def caller(at, x, y):  # pragma: no cover - compiled
        call_at(twice, at, (x, y))

    x = np.arange(5, dtype=np.float32)
    y = np.zeros(5, np.float32)
    at = compiled.address(twice, x, y)
    numba.njit(caller)(at, x, y)
    np.testing.assert_array_equal(y, 2 * x)
    with pytest.raises(TypingError, match="expected the types of a build of _twice"):
        numba.njit(caller)(at, x.astype(np.float64), y.astype(np.float64))
