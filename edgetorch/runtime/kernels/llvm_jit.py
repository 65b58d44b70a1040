"""LLVM IR compiled for this host by llvmlite's JIT (numba's code generator, present with the [fast] tier).

For the few kernels no numba loop becomes: an instruction numba does not emit, such as VNNI's ``vpdpbusd`` or
AVX2's ``vpmaddubsw`` (the XNNPACK delegate's qgemv_vnni.py and qgemv_vnni8.py). Imports llvmlite on the first compile only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_functions: dict[str, tuple[Any, Any]] = {}  # name -> (the ctypes function, the engine that owns its code)


def usable() -> bool:
    """Whether llvmlite imports."""
    try:
        import llvmlite.binding  # noqa: F401
    except ImportError:
        return False
    return True


def jit(ir: str, assembly: bool = True, cpu: str | None = None) -> tuple[Any, str | None]:
    """LLVM IR compiled for this host's CPU and features at -O3: the execution engine (which owns the code;
    keep it alive while its functions are called) and, when ``assembly``, the assembly text (for probes that
    check which instructions were emitted; None otherwise). With ``cpu`` (an LLVM CPU name such as
    ``icelake-server``) the code is for that CPU and its features instead, to read, not to run here. Needs
    llvmlite."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(ir)
    module.verify()
    cpu, features = (cpu, "") if cpu else (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
    machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3)
    passes = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    passes.getModulePassManager().run(module, passes)
    text = machine.emit_assembly(module) if assembly else None
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return engine, text


def function(name: str, ir: Callable[[], str], proto: Any) -> Any:
    """The function ``name`` of the IR ``ir()`` as the ctypes prototype ``proto``, compiled once per process
    (the engine that owns its code is kept for the process's life)."""
    with _lock:
        if name not in _functions:
            engine = jit(ir(), assembly=False)[0]
            _functions[name] = (proto(engine.get_function_address(name)), engine)
    return _functions[name][0]
