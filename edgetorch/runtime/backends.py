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
    """The registered backend ``name``, or UnsupportedBackendError saying what is registered.

    A backend not registered yet is looked up among the installed ``edgetorch.backends`` entry points
    (the runtime halves that ship with edgetorch, and any a plug-in package declares) and imported.
    """
    if name not in _BACKENDS:
        _load_entry_points(name)
    backend = _BACKENDS.get(name)
    if backend is None or not backend.is_available():
        raise UnsupportedBackendError(
            f"the program delegates to backend {name!r}, which is not registered in this runtime "
            f"(registered: {sorted(_BACKENDS) or 'none'}); import its runtime module or call "
            "edgetorch.runtime.register_backend(name, backend)"
        )
    return backend


def registered_backends() -> list[str]:
    """Every backend this runtime can run: those registered and those installed as entry points."""
    _load_entry_points()
    return sorted(_BACKENDS)


ENTRY_POINT_GROUP = "edgetorch.backends"


class BackendRegistry:
    """The backends this runtime can run delegates on; ``Runtime.get().backend_registry``, as in ExecuTorch."""

    @property
    def registered_backend_names(self) -> list[str]:
        """The ids of every registered backend (for example ``"XnnpackBackend"``)."""
        return registered_backends()

    def is_available(self, backend_name: str) -> bool:
        """Whether ``backend_name`` is registered and says it can run on this machine."""
        if backend_name not in _BACKENDS:
            _load_entry_points(backend_name)
        backend = _BACKENDS.get(backend_name)
        return backend is not None and backend.is_available()


def _load_entry_points(name: str | None = None) -> None:
    """Import the runtime modules that the ``edgetorch.backends`` entry points name (all, or ``name``'s).

    Each entry point maps a backend id to a torch-free module that calls ``register_backend`` when imported.
    """
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        if name is None or point.name == name:
            point.load()
