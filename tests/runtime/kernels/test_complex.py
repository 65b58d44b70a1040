"""Complex tensors end to end: complex64/complex128 inputs, outputs and constants, the FFT primitives
(``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c``) under every normalization, and the element-wise ops on complex
values, against eager PyTorch; complex32 is refused at ``to_edge`` with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import UnsupportedOperatorError
from edgetorch.exir import to_edge
from edgetorch.exir.verification import SpecViolationError
from edgetorch.format.printer import format_plan
from edgetorch.runtime import Runtime


def run(module: torch.nn.Module, *args: torch.Tensor) -> tuple[list[np.ndarray], bytes]:
    pte = to_edge(torch.export.export(module, args)).to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    return method.execute([a.numpy() for a in args]), pte


def check(module: torch.nn.Module, *args: torch.Tensor) -> bytes:
    got, pte = run(module, *args)
    want = module(*args)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = w.resolve_conj().numpy()
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return pte


@pytest.mark.parametrize("norm", [None, "ortho", "forward", "backward"])
def test_real_and_complex_ffts(norm):
    class M(torch.nn.Module):
        def forward(self, x):
            r = torch.fft.rfft(x, norm=norm)
            c = torch.fft.fft2(x.to(torch.complex64), norm=norm)
            back = torch.fft.irfft(r, n=x.shape[-1], norm=norm)
            inv = torch.fft.ifftn(c, norm=norm)
            return r, c, back, inv, torch.fft.hfft(r, norm=norm), torch.fft.ihfft(x, norm=norm)

    check(M(), torch.randn(3, 10, generator=torch.Generator().manual_seed(0)))


def test_complex_inputs_constants_and_elementwise():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer(
                "w", torch.randn(4, 6, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
            )

        def forward(self, z, re, im):
            c = torch.complex(re, im)
            p = torch.polar(re.abs(), im)
            y = (z * self.w + c).conj_physical() - p
            return y, y.abs(), y.angle(), torch.view_as_real(y), y.real * 2

    g = torch.Generator().manual_seed(2)
    z = torch.randn(4, 6, dtype=torch.complex64, generator=g)
    pte = check(M(), z, torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g))
    assert "c64" in format_plan(Runtime.get().load_program(pte).program.execution_plan[0])


def test_complex128_round_trip():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("i", torch.tensor(1j, dtype=torch.complex128))

        def forward(self, z):
            return torch.fft.fft(z) * self.i

    z = torch.randn(5, 8, dtype=torch.complex128, generator=torch.Generator().manual_seed(3))
    (got,), _ = run(M(), z)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, M()(z).numpy(), rtol=1e-12, atol=1e-12)


def test_a_complex_python_scalar_is_refused_with_a_clear_error():
    class M(torch.nn.Module):
        def forward(self, z):
            return z * 1j

    with pytest.raises(UnsupportedOperatorError, match="complex scalar"):
        run(M(), torch.randn(2, 2, dtype=torch.complex64))


def test_complex32_is_refused_with_a_clear_error():
    class M(torch.nn.Module):
        def forward(self, x):
            return x.to(torch.complex32)

    with pytest.raises(SpecViolationError, match="complex32"):
        to_edge(torch.export.export(M(), (torch.randn(2, 2),)))
