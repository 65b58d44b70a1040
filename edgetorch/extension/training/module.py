"""TrainingModule: run a joint-graph method (forward and backward) and hand out its gradients and parameters.

A joint-graph method ``m`` (compiled by edgetorch.exir or by ExecuTorch) returns its user outputs (the
loss first), then one gradient per trainable parameter, then the parameters themselves. Three constant
methods say where each part starts and name the parameters: ``__et_training_gradients_index_m``,
``__et_training_parameters_index_m`` and ``__et_training_fqn_m``. The parameters live in the method's
planned memory and keep their values from one run to the next, so the arrays ``named_parameters``
returns are that memory: an optimizer that updates them in place trains the model. Once a method has been
run on torch tensors, outputs, gradients and parameters come back as torch tensors (parameters still
sharing the method's memory), as ExecuTorch's module returns them. Torch-free (torch is only used when
the caller passes its tensors).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetorch.errors import InvalidInputError, ProgramLoadError
from edgetorch.runtime import Method, Program, Runtime

GRADIENTS_INDEX = "__et_training_gradients_index_"
PARAMETERS_INDEX = "__et_training_parameters_index_"
FQN = "__et_training_fqn_"

Source = str | os.PathLike | bytes | bytearray | memoryview


@dataclass(frozen=True)
class _Layout:
    """Where a joint method's outputs change from user outputs to gradients to parameters."""

    gradients: int
    parameters: int
    names: list[str]


class TrainingModule:
    """A loaded program with joint-graph methods, as ExecuTorch's ``TrainingModule``.

    Methods load on first use. ``method_name`` arguments left out mean the method last run by
    :meth:`forward_backward` (``"forward"`` before any).
    """

    def __init__(self, program: Program):
        self.program = program
        self._methods: dict[str, Method] = {}
        self._layouts: dict[str, _Layout] = {}
        self._gradients: dict[str, dict[str, np.ndarray]] = {}
        self._last = "forward"
        self._torch: Any = None  # the caller's torch module, once inputs came as torch tensors

    def forward_backward(self, method_name: str, inputs: Sequence[Any]) -> list[Any]:
        """Run ``method_name`` (forward and backward) on ``inputs``.

        Returns the user outputs (the loss first) as copies and keeps the gradients for
        :meth:`named_gradients`.
        """
        layout = self._layout(method_name)
        torch = sys.modules.get("torch")
        if torch is not None and any(isinstance(x, torch.Tensor) for x in inputs):
            self._torch = torch
        outputs = self._method(method_name).execute(list(inputs), clone_outputs=False)
        grads = outputs[layout.gradients : layout.parameters]
        self._gradients[method_name] = {name: np.array(g, copy=True) for name, g in zip(layout.names, grads)}
        self._last = method_name
        # the outputs are views of the method's memory, which the next run overwrites: hand out copies
        return [self._out(np.array(o, copy=True)) if _is_array(o) else o for o in outputs[: layout.gradients]]

    def named_gradients(self, method_name: str | None = None) -> dict[str, np.ndarray]:
        """The gradients of the last :meth:`forward_backward` of the method, by parameter name."""
        name = method_name or self._last
        if name not in self._gradients:
            raise InvalidInputError(
                f"no gradients for method {name!r} yet; call forward_backward({name!r}, inputs) first"
            )
        return {key: self._out(g) for key, g in self._gradients[name].items()}

    def named_parameters(self, method_name: str | None = None) -> dict[str, np.ndarray]:
        """The method's trainable parameters by name: views of its memory, so writing to them changes the
        parameters the next run uses (available before the first run, holding the initial values)."""
        name = method_name or self._last
        layout = self._layout(name)
        params = self._method(name).outputs(clone_outputs=False)[layout.parameters :]
        return {key: self._out(p) for key, p in zip(layout.names, params)}

    def _out(self, array: np.ndarray) -> Any:
        """``array`` as the caller's kind of tensor: a torch tensor sharing its memory once torch inputs were seen."""
        return array if self._torch is None or not isinstance(array, np.ndarray) else self._torch.from_numpy(array)

    def _method(self, name: str) -> Method:
        if name not in self._methods:
            self._methods[name] = self.program.load_method(name)
        return self._methods[name]

    def _layout(self, name: str) -> _Layout:
        if name not in self._layouts:
            self._layouts[name] = self._read_layout(name)
        return self._layouts[name]

    def _read_layout(self, name: str) -> _Layout:
        names = self.program.method_names
        missing = [p + name for p in (GRADIENTS_INDEX, PARAMETERS_INDEX, FQN) if p + name not in names]
        if name not in names or missing:
            raise InvalidInputError(
                f"method {name!r} is not a training method of this program: it lacks "
                f"{[name] if name not in names else missing}; its methods are {names}. Export the model with "
                "torch.export.experimental._export_forward_backward before to_edge/to_executorch"
            )
        gradients = self._constant(GRADIENTS_INDEX + name)
        parameters = self._constant(PARAMETERS_INDEX + name)
        fqns = self._method(FQN + name).execute()
        outputs = self.program.metadata(name).num_outputs
        if not all(isinstance(f, str) for f in fqns) or not (
            0 <= gradients <= parameters == outputs - len(fqns) == gradients + len(fqns)
        ):
            raise ProgramLoadError(
                f"training metadata of method {name!r} does not fit its {outputs} outputs: gradients from "
                f"{gradients}, parameters from {parameters}, {len(fqns)} parameter names; expected "
                "user outputs, then one gradient and one parameter per name"
            )
        return _Layout(gradients, parameters, list(fqns))

    def _constant(self, method: str) -> int:
        values = self._method(method).execute()
        if len(values) != 1 or not isinstance(values[0], int) or isinstance(values[0], bool):
            raise ProgramLoadError(f"constant method {method!r} must return one int, found {values!r}")
        return values[0]


def _is_array(value: Any) -> bool:
    """A NumPy array, or a torch tensor (what the runtime returns for torch inputs)."""
    torch = sys.modules.get("torch")
    return isinstance(value, np.ndarray) or (torch is not None and isinstance(value, torch.Tensor))


def _load_for_executorch_for_training(path: Source, data_path: Source | None = None) -> TrainingModule:
    """Load a training program from a path (memory-mapped) or bytes, with its ``.ptd`` data file if the
    program keeps tensors outside itself."""
    files = [data_path] if data_path is not None else []
    return TrainingModule(Runtime.get().load_program(path, data_files=files))


def _load_for_executorch_for_training_from_buffer(
    buffer: bytes | bytearray | memoryview, data_buffer: bytes | None = None
) -> TrainingModule:
    """Load a training program from bytes, as ExecuTorch's function of that name."""
    return _load_for_executorch_for_training(buffer, data_buffer)
