"""Operator libraries edgetorch shares with the real ``executorch`` package, in either import order.

Some operator namespaces (``dim_order_ops``) are defined by ExecuTorch too: one of its modules runs
``torch.library.Library(ns, "DEF")`` and ``define``s the schemas when it is imported, and torch refuses
a second definition of an operator. edgetorch needs the very same operators (the ``.pte`` names them),
never imports ``executorch``, and must not stop a later import of it. So a :class:`SharedLibrary`

* uses the operators when they exist already (ExecuTorch was imported first);
* otherwise defines them itself, with its own kernels, and watches the import system for the ExecuTorch
  module that defines the namespace. Just before that module runs, edgetorch withdraws its definitions,
  so ExecuTorch's succeed; from then on everyone uses ExecuTorch's definitions and kernels.

The ``OpOverload`` objects handed out before the hand-over (graph node targets, lookup tables keyed by
op) stay valid and stay the ones ``torch.ops.<ns>`` returns: a fall-through kernel on ``AutocastCPU``
(a key every operator already falls through) keeps torch's operator entry in place while its schema is
withdrawn, and the cached packets go back into ``torch.ops.<ns>`` so that ExecuTorch's ``define``
refreshes them instead of creating new ones. May import torch only.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType

import torch

__all__ = ["SharedLibrary", "SHARED_LIBRARIES"]


class SharedLibrary:
    """An operator namespace edgetorch defines unless ExecuTorch's module ``executorch_module`` does."""

    def __init__(
        self,
        namespace: str,
        schemas: dict[str, str],
        kernels: dict[str, Callable],
        executorch_module: str,
        fakes: dict[str, Callable] | None = None,
    ) -> None:
        self.namespace = namespace
        self.schemas = schemas
        self.kernels = kernels
        self.fakes = fakes or {}
        self.executorch_module = executorch_module
        self._library: torch.library.Library | None = None
        self._anchor: torch.library.Library | None = None
        SHARED_LIBRARIES[namespace] = self

    @property
    def packets(self) -> list[str]:
        """The operator names (without overload) the namespace holds."""
        return sorted({name.split(".")[0] for name in self.schemas})

    @property
    def defined_by_edgetorch(self) -> bool:
        """True while edgetorch's own definitions are the live ones."""
        return self._library is not None

    def ensure_registered(self) -> None:
        """Make ``torch.ops.<namespace>`` hold the operators: ExecuTorch's if present, else edgetorch's."""
        if self._library is not None or hasattr(getattr(torch.ops, self.namespace), self.packets[0]):
            return
        if self._anchor is None:
            self._anchor = torch.library.Library(self.namespace, "FRAGMENT")
            for name in self.schemas:
                self._anchor.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")
        lib = torch.library.Library(self.namespace, "FRAGMENT")
        for name, schema in self.schemas.items():
            lib.define(schema)
            lib.impl(name, self.kernels[name], "CompositeExplicitAutograd")
            # Fake tensors run the same ATen calls on fake inputs, unless a shape-only fake kernel is given.
            fake = self.fakes.get(name, self.kernels[name])
            torch.library.register_fake(f"{self.namespace}::{name}", fake, lib=lib)
        self._library = lib
        sys.meta_path.insert(0, _HandOver(self))

    def hand_over(self) -> None:
        """Withdraw edgetorch's definitions (ExecuTorch is about to define the namespace)."""
        if self._library is None:
            return
        namespace = getattr(torch.ops, self.namespace)
        packets = {name: getattr(namespace, name) for name in self.packets}
        for packet in packets.values():
            for overload in packet.overloads():
                getattr(packet, overload)  # cache every OpOverload on its packet before the schema goes
        self._library._destroy()
        self._library = None
        for name, packet in packets.items():
            setattr(namespace, name, packet)
            if name not in namespace._dir:
                namespace._dir.append(name)


SHARED_LIBRARIES: dict[str, SharedLibrary] = {}
"""Namespace -> the :class:`SharedLibrary` that registers it."""


class _HandOver(importlib.abc.MetaPathFinder):
    """Finds ExecuTorch's defining module with the other finders and hands the library over before it runs."""

    def __init__(self, library: SharedLibrary) -> None:
        self.library = library

    def find_spec(self, fullname: str, path, target=None):
        if fullname != self.library.executorch_module:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _HandOverLoader(spec.loader, self.library)
                return spec
        return None


class _HandOverLoader(importlib.abc.Loader):
    """ExecuTorch's own loader for the module, run after the hand-over."""

    def __init__(self, loader: importlib.abc.Loader, library: SharedLibrary) -> None:
        self.loader = loader
        self.library = library

    def create_module(self, spec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.library.hand_over()
        self.loader.exec_module(module)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)
