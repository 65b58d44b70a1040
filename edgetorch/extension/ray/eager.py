"""An eager PyTorch model as the reference of an evaluation, run in actors of its own.

This is the only part of the extension that imports torch, and only inside its actors: the program's actors stay
torch-free. Each row gets the model's outputs as ``reference_0``, ``reference_1``, ... columns, which
:class:`~edgetorch.extension.ray.predictor.ProgramPredictor` compares against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edgetorch.extension.ray.predictor import REFERENCE_PREFIX, SampleReader, error_columns, load_method, output_columns


class EagerReference:
    """Runs ``factory()`` (an ``nn.Module``, or a tuple whose first item is one) on each row's inputs.

    ``factory`` is a callable or ``"FILE.py:FACTORY"`` (imported in the actor); the inputs are read and shaped
    as the program at ``program`` plans them, so both see the same arrays. Rows pass through with the
    reference columns added; a row the model fails on gets ``error_type``/``error`` and no reference.
    """

    def __init__(
        self,
        factory: str | Callable[[], Any],
        program: str,
        method: str = "forward",
        *,
        reader: SampleReader | None = None,
        threads: int = 1,
    ):
        import torch

        from edgetorch.cli._common import load_factory

        torch.set_num_threads(threads)
        made = (load_factory(factory) if isinstance(factory, str) else factory)()
        self._model = (made[0] if isinstance(made, tuple) else made).eval()
        meta = load_method(program, method).metadata
        self._infos = [meta.input_tensor_meta(i) for i in range(meta.num_inputs)]
        self._outputs = [meta.output_tensor_meta(i) for i in range(meta.num_outputs)]  # the reference's shapes too
        self._reader = reader or SampleReader()
        self._torch = torch

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self._torch
        n = len(next(iter(batch.values())))
        outputs: list[list[np.ndarray] | None] = [None] * n
        errors: list[Exception | tuple[str, str] | None] = [None] * n
        for i in range(n):
            if "error" in batch and batch["error"][i]:
                errors[i] = (str(batch["error_type"][i]), str(batch["error"][i]))
                continue
            try:
                arrays, _ = self._reader.read(batch, i, self._infos)
                sample = self._reader.prepare(arrays, self._infos)
                args = [
                    torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in sample.arrays
                ]
                with torch.no_grad():
                    result = self._model(*args)
                flat = list(result) if isinstance(result, (tuple, list)) else [result]
                values = [t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in flat]
                outputs[i] = [v[0] if sample.item and v.ndim >= 1 and v.shape[0] == 1 else v for v in values]
            except Exception as e:
                errors[i] = e
        columns = {c: v for c, v in batch.items() if c not in ("error_type", "error")}
        columns.update(output_columns(REFERENCE_PREFIX, outputs, self._outputs))
        columns["error_type"], columns["error"] = error_columns(errors)
        return columns
