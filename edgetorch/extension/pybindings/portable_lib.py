"""ExecuTorch's ``portable_lib`` entry points, served by edgetorch's runtime. Torch-free.

Code written against ``executorch.extension.pybindings.portable_lib`` runs unchanged:
``_load_for_executorch("model.pte", "model.ptd").forward([x])``. The returned module is
:class:`PybindModule`, an :class:`edgetorch.runtime.Module` that returns torch tensors whenever the
process has imported torch (as ExecuTorch's pybindings do), NumPy arrays otherwise. Errors are the
runtime's typed errors, ``RuntimeError`` subclasses whose message carries ExecuTorch's
error code (``error 0x12``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from edgetorch.errors import Error, InvalidInputError, ProgramLoadError
from edgetorch.format import bundled_program as fbp
from edgetorch.runtime.backends import BackendRegistry
from edgetorch.runtime.bundled import load_bundled_program
from edgetorch.runtime.kernels.compiled import get_num_threads, set_num_threads
from edgetorch.runtime.program import (
    Method,
    MethodMeta,
    Module,
    Program,
    Runtime,
    TensorInfo,
    Verification,
    _to_torch,
)


class PybindModule(Module):
    """What ``_load_for_executorch*`` return: a :class:`~edgetorch.runtime.Module` whose outputs are torch
    tensors whenever the process has imported torch, as ExecuTorch's pybindings always return them (also for a
    method with no tensor inputs, e.g. a constant getter); NumPy arrays in a torch-free process.

    As in ExecuTorch, the program is read when the module is made and its data files (``.ptd``) when a method
    first loads: a damaged data file fails the first run, not the load."""

    _pending_data: list[Any] | None = None

    def load(self, verification: Verification | None = None) -> None:
        if self._program is None:
            self._pending_data, self._data = self._data, []
            super().load(verification)

    def load_method(self, method_name: str = "forward") -> Method:
        pending, self._pending_data = self._pending_data, None
        for data in pending or ():
            self.program.add_data_file(data)
        return super().load_method(method_name)

    def execute(self, method_name: str = "forward", inputs: Any = None) -> list[Any]:
        return _torch_outputs(super().execute(method_name, inputs))

    def plan_execute(self, method_name: str = "forward", clone_outputs: bool = True) -> list[Any]:
        return _torch_outputs(super().plan_execute(method_name, clone_outputs))


def _torch_outputs(outputs: list[Any]) -> list[Any]:
    torch = sys.modules.get("torch")
    return outputs if torch is None else [_to_torch(v, torch) for v in outputs]


class PybindProgram:
    """What ``_load_program*`` return, as ExecuTorch's ``ExecuTorchProgram``: ``num_methods()``,
    ``get_method_name(i)``, ``method_meta(name)`` and ``load_method(name)``, which gives a
    :class:`PybindMethod`. Anything else is the underlying :class:`~edgetorch.runtime.Program`'s."""

    def __init__(self, program: Program):
        self._program = program

    def num_methods(self) -> int:
        return int(self._program.num_methods)

    def get_method_name(self, method_index: int) -> str:
        return self._program.get_method_name(method_index)

    def load_method(self, method_name: str) -> PybindMethod:
        return PybindMethod(self._program.load_method(method_name))

    def method_meta(self, method_name: str) -> MethodMeta:
        return self._program.metadata(method_name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._program, name)


class PybindMethod:
    """A loaded method as ExecuTorch's ``ExecuTorchMethod``: run it in one call (``method(inputs)``,
    ``call(inputs)``) or by parts (``set_inputs``, ``execute``, ``get_outputs``); read its named tensors
    with ``get_attribute``. Outputs are torch tensors whenever the process has imported torch."""

    def __init__(self, method: Method):
        self._method = method
        self._inputs: list[Any] | None = None

    def set_inputs(self, inputs: Any) -> None:
        """Stage the inputs for ``execute()``; torch tensors are read now (one on a device the host cannot read
        is refused here)."""
        staged, _ = self._method.read_inputs(_input_list(inputs))
        self._inputs = staged

    def execute(self) -> None:
        if self._inputs is None:
            raise InvalidInputError(
                f"method {self._method.name!r} has no inputs set; call set_inputs(inputs) before execute()",
                code=Error.InvalidState,
            )
        self._method.execute(self._inputs)

    def get_outputs(self, clone_outputs: bool = True) -> list[Any]:
        return _torch_outputs(self._method.outputs(clone_outputs))

    def call(self, inputs: Any, clone_outputs: bool = True) -> list[Any]:
        return _torch_outputs(self._method.execute(_input_list(inputs), clone_outputs))

    __call__ = call

    def method_meta(self) -> MethodMeta:
        return self._method.metadata

    def get_attribute(self, name: str) -> Any:
        return _torch_outputs([self._method.get_attribute(name)])[0]


ExecuTorchModule = PybindModule
ExecuTorchProgram = PybindProgram
ExecuTorchMethod = PybindMethod


def _input_list(inputs: Any) -> list[Any]:
    """A method's inputs as ExecuTorch's pybindings take them: a sequence of values, or one tensor alone."""
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


class BundledModule(fbp.BundledProgram):
    """What ``_load_bundled_program_from_buffer`` returns: the parsed BundledProgram (its program and test
    cases), which can also run its own test cases (``verify_result_with_bundled_expected_output``)."""

    _module: Module | None = None

    @classmethod
    def of(cls, bundle: fbp.BundledProgram) -> BundledModule:
        return cls(**{f.name: getattr(bundle, f.name) for f in dataclasses.fields(bundle)})

    def verify_result_with_bundled_expected_output(
        self, method_name: str, testset_idx: int, rtol: float = 1e-5, atol: float = 1e-8
    ) -> list[Any]:
        """Run test case ``testset_idx`` of ``method_name`` on the bundled program and check its outputs against
        the expected ones (``BundledVerificationError``, an AssertionError, on a mismatch); returns the outputs."""
        if self._module is None:
            self._module = _load_for_executorch_from_buffer(bytes(self.program))
        module = self._module
        module.load_bundled_input(self, method_name, testset_idx)
        outputs = module.plan_execute(method_name)
        module.verify_result_with_bundled_expected_output(self, method_name, testset_idx, rtol, atol)
        return outputs


def _load_for_executorch(
    program_path: str | os.PathLike,
    data_path: str | os.PathLike | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
) -> Module:
    """Load a .pte file (and the .ptd file holding its external tensors, if any) as a Module.

    ``enable_etdump`` records an ETDump of every run (``write_etdump_result_to_file``);
    ``debug_buffer_size`` > 0 also records each instruction's output values.
    """
    module = PybindModule(
        program_path,
        data_path,
        verification=program_verification,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
    )
    module.load()
    return module


def _load_for_executorch_from_buffer(
    buffer: bytes,
    data_map_buffer: bytes | str | os.PathLike | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
) -> Module:
    """As :func:`_load_for_executorch`, from the bytes of a .pte (and of a .ptd)."""
    data = data_map_buffer
    if data is not None and not isinstance(data, (str, os.PathLike)):
        data = bytes(data)  # a path is read when a method loads, as ExecuTorch's bundled-program loader takes one
    module = PybindModule(
        bytes(buffer),
        data,
        verification=program_verification,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
    )
    module.load()
    return module


def _load_bundled_program_from_buffer(buffer: bytes, non_const_pool_size: int = 0) -> BundledModule:
    """Parse a BundledProgram (``.bpte``). ``non_const_pool_size`` sizes ExecuTorch's fixed pool for bundled
    inputs; edgetorch allocates inputs as it stages them, so any size works."""
    if not fbp.is_bundled_program(buffer):
        raise ProgramLoadError("the buffer is not a BundledProgram (no 'BP08' identifier); expected a .bpte file")
    return BundledModule.of(load_bundled_program(buffer))


def _load_for_executorch_from_bundled_program(
    module: BundledModule,
    data_map_buffer: bytes | str | os.PathLike | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
) -> Module:
    """The program inside a parsed BundledProgram as a Module; stage a test case with
    ``load_bundled_input(module, method, i)``, run ``plan_execute(method)``, then check it with
    ``verify_result_with_bundled_expected_output(module, method, i)``."""
    if not isinstance(module, BundledModule):
        raise TypeError(f"expected the result of _load_bundled_program_from_buffer; found {type(module).__name__}")
    return _load_for_executorch_from_buffer(bytes(module.program), data_map_buffer, enable_etdump, debug_buffer_size)


def _load_program(
    path: str | os.PathLike,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_path: str | os.PathLike | None = None,
) -> PybindProgram:
    """Load a .pte file as a Program (methods loaded with ``load_method``)."""
    module = _load_for_executorch(path, data_path, enable_etdump, debug_buffer_size, program_verification)
    return PybindProgram(module.program)


def _load_program_from_buffer(
    buffer: bytes,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_path: str | os.PathLike | None = None,
) -> PybindProgram:
    module = PybindModule(
        bytes(buffer),
        data_path,
        verification=program_verification,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
    )
    return PybindProgram(module.program)


def _get_operator_names() -> list[str]:
    """Every operator the runtime has a kernel for, as ``namespace::op.overload``."""
    return sorted(Runtime.get().operator_registry.operator_names)


def _get_registered_backend_names() -> list[str]:
    return BackendRegistry().registered_backend_names


def _is_available(backend_name: str) -> bool:
    return BackendRegistry().is_available(backend_name)


def _unsafe_reset_threadpool(num_threads: int) -> None:
    """Use ``num_threads`` threads for the runtime's parallel kernels from now on (``set_num_threads``)."""
    if not isinstance(num_threads, int) or isinstance(num_threads, bool):
        raise TypeError(f"num_threads must be an int; found {type(num_threads).__name__}")
    set_num_threads(num_threads)


def _threadpool_get_thread_count() -> int:
    return get_num_threads()


# ExecuTorch's pre-ETDump profiler is a build option its pip wheel leaves out: there, as here, blocks are
# accepted and the results are empty. Profile with ETDump (enable_etdump=True) instead.


def _create_profile_block(name: str) -> None:
    """Accepted for ExecuTorch compatibility; the legacy profiler records nothing (use ETDump)."""
    if not isinstance(name, str):
        raise TypeError(f"a profile block's name is a str; found {type(name).__name__}")


def _dump_profile_results() -> bytes:
    """The legacy profiler's results: empty, as in ExecuTorch's pip wheel (use ETDump)."""
    return b""


def _reset_profile_results() -> None:
    """Clear the legacy profiler's results (there are none to clear; use ETDump)."""


__all__ = [
    "BundledModule",
    "ExecuTorchMethod",
    "ExecuTorchModule",
    "ExecuTorchProgram",
    "MethodMeta",
    "TensorInfo",
    "Verification",
    "_create_profile_block",
    "_dump_profile_results",
    "_get_operator_names",
    "_get_registered_backend_names",
    "_is_available",
    "_load_bundled_program_from_buffer",
    "_load_for_executorch",
    "_load_for_executorch_from_buffer",
    "_load_for_executorch_from_bundled_program",
    "_load_program",
    "_load_program_from_buffer",
    "_reset_profile_results",
    "_threadpool_get_thread_count",
    "_unsafe_reset_threadpool",
]
