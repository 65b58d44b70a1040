"""The runtime side of delegation: BackendInterface and the backend registry. Torch-free.

A DelegateCall's arguments are the delegate's inputs followed by its outputs
(EValue indices). At ``load_method`` the runtime calls ``init`` once per
delegate; at ``execute`` it calls ``execute(handle, args)`` with the resolved
values (inputs, then the output tensors at their planned upper-bound shapes).
``execute`` writes the outputs in place and returns None, or returns a
sequence of output arrays (for example resized views), which the runtime
stores as the delegate's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgetorch.errors import UnsupportedBackendError


class BackendInterface:
    """What a backend's runtime half implements; ExecuTorch's BackendInterface in Python."""

    def is_available(self) -> bool:
        return True

    def init(
        self, processed: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
    ) -> Any:
        """Prepare a delegate blob (parse, prepack weights) and return a handle for ``execute``."""
        raise NotImplementedError

    def execute(self, handle: Any, args: Sequence[Any]) -> Sequence[Any] | None:
        """Run a prepared delegate on ``args`` (inputs then outputs)."""
        raise NotImplementedError

    def destroy(self, handle: Any) -> None:
        """Release a handle; the default keeps nothing to release."""


_BACKENDS: dict[str, BackendInterface] = {}


def register_backend(name: str, backend: BackendInterface) -> None:
    """Make ``backend`` the runtime half for delegates whose id is ``name``."""
    _BACKENDS[name] = backend


def get_backend(name: str) -> BackendInterface:
    """The registered backend ``name``, or UnsupportedBackendError saying what is registered."""
    _load_builtin_backends()
    backend = _BACKENDS.get(name)
    if backend is None or not backend.is_available():
        raise UnsupportedBackendError(
            f"the program delegates to backend {name!r}, which is not registered in this runtime "
            f"(registered: {sorted(_BACKENDS) or 'none'}); import its runtime module or call "
            "edgetorch.runtime.register_backend(name, backend)"
        )
    return backend


def registered_backends() -> list[str]:
    _load_builtin_backends()
    return sorted(_BACKENDS)


class BackendRegistry:
    """The backends this runtime can run delegates on; ``Runtime.get().backend_registry``, as in ExecuTorch."""

    @property
    def registered_backend_names(self) -> list[str]:
        """The ids of every registered backend (for example ``"XnnpackBackend"``)."""
        return registered_backends()

    def is_available(self, backend_name: str) -> bool:
        """Whether ``backend_name`` is registered and says it can run on this machine."""
        _load_builtin_backends()
        backend = _BACKENDS.get(backend_name)
        return backend is not None and backend.is_available()


_builtins_loaded = False


def _load_builtin_backends() -> None:
    """Import the runtime halves that ship with edgetorch; each registers itself."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    import importlib

    for module in BUILTIN_BACKEND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise


BUILTIN_BACKEND_MODULES = (
    "edgetorch.backends.xnnpack.runtime",
    "edgetorch.backends.demo.runtime",
)
