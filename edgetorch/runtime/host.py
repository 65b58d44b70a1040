"""The CPU this process runs on: its model name and the instruction-set extensions kernels care about.

Read once from ``/proc/cpuinfo`` (Linux), else from :mod:`platform`. Benchmarks print it beside every figure,
since a speed measured on one CPU says little about another, and kernel choices made by measuring the host
are kept per CPU under :func:`Host.key`. Standard library only.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

# The extensions that change which kernel is fastest, in the order a reader expects them (x86, then Arm).
_RELEVANT = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "i8mm",
    "bf16",
)


@dataclass(frozen=True)
class Host:
    """A CPU as kernels see it."""

    model: str
    """The model name (``AMD EPYC 7B13``, ``Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz``), else the machine."""
    machine: str
    """``x86_64``, ``aarch64``, ..."""
    flags: frozenset[str]
    """Every extension the CPU reports."""
    cores: int
    """CPUs this process may run on."""

    @property
    def isa(self) -> tuple[str, ...]:
        """The extensions that matter to kernels, in a fixed order."""
        return tuple(f for f in _RELEVANT if f in self.flags)

    @property
    def vector_bits(self) -> int:
        """The widest float vector the CPU offers: 512 (AVX-512), 256 (AVX), else 128 (SSE, NEON)."""
        if "avx512f" in self.flags:
            return 512
        return 256 if "avx" in self.flags else 128

    @property
    def int8_dot(self) -> str | None:
        """The int8 dot-product instructions present: ``avx512_vnni``, ``avx_vnni``, ``asimddp``, or None."""
        return next((f for f in ("avx512_vnni", "avx_vnni", "asimddp") if f in self.flags), None)

    def key(self) -> str:
        """A short stable name of this CPU for caches: model and ISA, no spaces."""
        return "-".join([self.model, *self.isa]).replace(" ", "_").replace("/", "_")

    def describe(self) -> str:
        """One line for reports: ``model (machine; N CPUs; isa ...)``."""
        return f"{self.model} ({self.machine}; {self.cores} CPUs; {' '.join(self.isa) or 'no SIMD extensions listed'})"


def read_cpuinfo(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


@functools.cache
def host() -> Host:
    """This process's CPU."""
    return host_from(read_cpuinfo())


def host_from(info: dict[str, str]) -> Host:
    """The CPU the /proc/cpuinfo fields ``info`` describe (this machine's count of usable CPUs)."""
    flags = info.get("flags") or info.get("Features") or ""
    model = info.get("model name") or info.get("Model name") or platform.processor() or platform.machine()
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    return Host(model=model, machine=platform.machine(), flags=frozenset(flags.split()), cores=cores)
