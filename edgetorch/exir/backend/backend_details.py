"""``BackendDetails`` and ``PreprocessResult``: the ahead-of-time half of a backend.

A backend is a ``BackendDetails`` subclass whose class name is its backend id;
``to_backend`` finds it by that name and calls ``preprocess`` to turn an Edge
program into the blob the runtime half executes. May import torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from torch.export import ExportedProgram

from edgetorch.exir.backend.compile_spec_schema import CompileSpec

__all__ = ["BackendDetails", "PreprocessResult", "find_backend"]


@dataclass
class PreprocessResult:
    """What ``preprocess`` returns.

    ``processed_bytes``: the blob stored in the program for the runtime backend.
    ``debug_handle_map``: delegate-internal id -> debug handles of the Edge nodes it
    covers (for ETRecord and the Inspector). ``data_store_output``: named data
    (weights shared through the program's named data map), if the backend uses it.
    ``_delegate_info_meta``: anything the backend wants kept on the lowered module's ``meta``
    for tools (not written to the program).
    """

    processed_bytes: bytes = b""
    debug_handle_map: dict[int | str, tuple[int, ...]] | None = None
    data_store_output: Any = None
    _delegate_info_meta: Any = None


class BackendDetails(ABC):
    """Base class of a backend's compiler half; subclass it once per backend (the class name is the id)."""

    @classmethod
    @abstractmethod
    def preprocess(cls, edge_program: ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
        """Compile ``edge_program`` (an Edge-dialect program the backend owns a copy of) into a blob.

        Raise RuntimeError naming the node when the program holds something the backend cannot run.
        """

    @classmethod
    def preprocess_multimethod(
        cls,
        edge_programs: dict[str, list[ExportedProgram]],
        compile_specs: dict[str, list[list[CompileSpec]]],
    ) -> dict[str, list[PreprocessResult]]:
        """Compile every partition of every method at once: method -> one result per program, in order.

        ``compile_specs[method][i]`` goes with ``edge_programs[method][i]``. Override it to share data
        between partitions (through each result's ``data_store_output``); by default each partition
        is preprocessed on its own.
        """
        results = {}
        for method, programs in edge_programs.items():
            specs = compile_specs.get(method)
            if specs is None or len(specs) != len(programs):
                raise ValueError(
                    f"method {method!r} has {len(programs)} partitions but "
                    f"{'no' if specs is None else len(specs)} compile spec lists; give one list per partition"
                )
            results[method] = [cls.preprocess(program, spec) for program, spec in zip(programs, specs)]
        return results


def find_backend(backend_id: str) -> type[BackendDetails]:
    """The ``BackendDetails`` subclass named ``backend_id``; NotImplementedError if none is imported."""
    found = {cls.__name__: cls for cls in _subclasses(BackendDetails)}
    if backend_id not in found:
        raise NotImplementedError(
            f"Backend {backend_id} was not found: no imported BackendDetails subclass has that name "
            f"(known: {sorted(found) or 'none'}). Import the module that defines the backend first."
        )
    return found[backend_id]


def _subclasses(cls: type) -> list[type]:
    direct = cls.__subclasses__()
    return direct + [sub for c in direct for sub in _subclasses(c)]
