"""The work each Ray actor does: a program loaded once, run over the NumPy batches ``map_batches`` hands it.

``ProgramPredictor`` is a plain callable class (Ray instantiates it once per actor), so it needs neither Ray nor
torch: the actors of an evaluation import only the runtime. Every input row gives exactly one output row; a row
whose sample cannot be read or run gets its error's type and message in the ``error_type`` and ``error``
columns instead of failing the job.

Batching follows the program. A static batch of 1 runs sample by sample; a static batch of B runs B samples a
call (the last call padded); a dynamic batch runs as many samples a call as its upper bound allows. A call that
fails reruns its samples one by one, so that a bad sample costs only its own row, and a dynamic program that
refuses a batch its samples pass alone (its dynamic dimension is not the batch) runs one sample a call from then
on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.extension.ray.metrics import measure, prediction
from edgetorch.extension.ray.samples import SampleError, fit_to_input, image_normalization, read_sample

ERROR_COLUMNS = ("error_type", "error")
REFERENCE_PREFIX = "reference_"
OUTPUT_PREFIX = "output_"


@dataclasses.dataclass(frozen=True)
class SampleReader:
    """How a row of the dataset becomes a method's inputs (shared by the program and eager reference actors).

    A row with a ``path`` is read from that file (see :mod:`edgetorch.extension.ray.samples`); any other row
    takes its inputs from ``input_columns``, in order. An image is resized to ``image_size`` (an int for a
    square, or (height, width); default: the method's planned input size) and its pixels scaled as
    ``image_scale`` says: ``"imagenet"`` (torchvision's mean/std), ``"unit"`` ([0, 1]), ``"symmetric"``
    ([-1, 1]) or a (mean, std) pair of per-channel values for ``pixel / 255``. ``transform``, when given, maps
    the list of input arrays of one sample to the list the method gets (a user's own preprocessing).
    """

    input_columns: tuple[str, ...] = ()
    image_scale: str | tuple[tuple[float, ...], tuple[float, ...]] = "imagenet"
    image_size: int | tuple[int, int] | None = None
    transform: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None

    def __post_init__(self) -> None:
        image_normalization(self.image_scale)  # an unknown scale fails here, in the driver, not once per row
        size = self.image_size
        if size is not None:
            pair = (size, size) if isinstance(size, int) else tuple(size)
            if len(pair) != 2 or not all(isinstance(n, int) and n > 0 for n in pair):
                raise InvalidArgumentError(f"image_size must be a positive int or (height, width), got {size!r}")

    def read(self, batch: Mapping[str, np.ndarray], i: int, infos: Sequence[Any]) -> tuple[list[Any], int | None]:
        """Row ``i``'s input arrays, as the method's inputs ``infos`` plan them, and its label (or None)."""
        label = int(batch["label"][i]) if "label" in batch else None
        if "path" in batch:
            sizes = [info.sizes for info in infos if not isinstance(info, str)]
            size = self.image_size
            square = (size, size) if isinstance(size, int) else size
            arrays, own = read_sample(str(batch["path"][i]), sizes, self.image_scale, square)
            label = own if own is not None else label
        else:
            arrays = [batch[c][i] for c in self.input_columns]
        if self.transform is not None:
            arrays = list(self.transform(arrays))
        return arrays, label

    def prepare(self, arrays: Sequence[Any], infos: Sequence[Any]) -> _Sample:
        """``arrays`` fitted to the inputs ``infos`` (see :func:`fit_to_input`)."""
        if len(arrays) != len(infos):
            raise SampleError(f"the sample has {len(arrays)} inputs; the method takes {len(infos)}")
        fitted, items = [], set()
        for j, (x, info) in enumerate(zip(arrays, infos)):
            if isinstance(info, str):  # a scalar input (Int, Double, Bool) goes as it is
                fitted.append(x.item() if isinstance(x, np.ndarray) else x)
                continue
            array, item = fit_to_input(x, info.sizes, info.numpy_dtype, info.dynamic, j)
            fitted.append(array)
            items.add(item)
        if len(items) > 1:
            raise SampleError("some inputs of the sample carry a batch dimension and some do not; give all or none")
        batchable = all(isinstance(x, np.ndarray) and x.ndim >= 1 and x.shape[0] == 1 for x in fitted)
        return _Sample(fitted, items == {True}, batchable)


@dataclasses.dataclass
class _Sample:
    arrays: list[Any]
    item: bool  # the arrays were one rank short: outputs drop the batch dimension again
    batchable: bool  # every input has a leading dimension of 1 to stack along

    def key(self) -> tuple:
        return tuple((a.shape, a.dtype.str) for a in self.arrays)


class _Runner:
    """Runs one loaded method over a list of samples, batching as the method's inputs allow."""

    def __init__(self, method: Any):
        self.method = method
        meta = method.metadata
        self.infos = [meta.input_tensor_meta(i) for i in range(meta.num_inputs)]
        self.outputs = [meta.output_tensor_meta(i) for i in range(meta.num_outputs)]
        tensors = [t for t in self.infos if not isinstance(t, str)]
        leading = {t.sizes[0] if len(t.sizes) else 0 for t in tensors}
        batched = len(tensors) == len(self.infos) > 0 and len(leading) == 1 and min(leading) >= 1
        self.batch = min(leading) if batched else 1
        self.padded = batched and not any(t.dynamic for t in tensors)  # a static batch: every call has B rows
        self.stacks = self.batch > 1  # turned off when a dynamic method refuses batches its samples pass alone

    def run(self, samples: Sequence[_Sample | None]) -> list[list[Any] | Exception | None]:
        """Each sample's outputs (or the exception that stopped it), in order; None stays None."""
        results: list[list[Any] | Exception | None] = [None] * len(samples)
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(samples):
            if s is not None and s.batchable:
                groups.setdefault(s.key(), []).append(i)
            elif s is not None:
                results[i] = self._alone(s)
        for members in groups.values():
            start = 0
            while start < len(members):
                chunk = members[start : start + (self.batch if self.stacks else 1)]
                start += len(chunk)
                try:
                    outs: list[list[Any] | Exception] = list(self._call([samples[i] for i in chunk]))  # type: ignore[misc]
                except Exception as e:
                    if len(chunk) == 1:
                        outs = [e]
                    else:  # find the sample that failed the call; the others keep their rows
                        outs = [self._one(samples[i]) for i in chunk]  # type: ignore[arg-type]
                        if not self.padded and not any(isinstance(r, Exception) for r in outs):
                            self.stacks = False
                for i, r in zip(chunk, outs):
                    results[i] = r
        return results

    def _one(self, sample: _Sample) -> list[Any] | Exception:
        try:
            return self._call([sample])[0]
        except Exception as e:
            return e

    def _alone(self, sample: _Sample) -> list[Any] | Exception:
        """A sample that cannot be stacked (no leading 1) runs as it is, its outputs whole."""
        try:
            return [np.asarray(o) for o in self.method.execute(sample.arrays)]
        except Exception as e:
            return e

    def _call(self, chunk: list[_Sample]) -> list[list[Any]]:
        rows = self.batch if self.padded else len(chunk)
        padded = chunk + [chunk[-1]] * (rows - len(chunk))
        inputs = [
            padded[0].arrays[j] if rows == 1 else np.concatenate([s.arrays[j] for s in padded])
            for j in range(len(self.infos))
        ]
        outs = self.method.execute(inputs)
        per: list[list[Any]] = [[] for _ in chunk]
        for j, o in enumerate(outs):
            o = np.asarray(o)
            if o.ndim >= 1 and o.shape[0] == rows:
                for k, s in enumerate(chunk):
                    per[k].append(o[k] if s.item else o[k : k + 1])
            elif rows == 1:
                per[0].append(o)
            else:
                raise SampleError(
                    f"output {j} has shape {list(o.shape)}, no leading batch dimension of {rows}; "
                    "it cannot be split per sample"
                )
        return per


def load_method(program: str, method: str) -> Any:
    """``method`` of the program at ``program`` (memory-mapped, so the actors of a node share its pages)."""
    from edgetorch.runtime import Runtime

    return Runtime.get().load_program(program).load_method(method)


class ProgramPredictor:
    """Runs ``method`` of the program at ``program`` over Ray Data batches, one loaded method per actor.

    Output columns: every column of the batch except the inputs and ``reference_*`` ones; ``output_0``,
    ``output_1``, ... (with ``keep_outputs``); with ``metric``: that metric (NaN on an error row), and for
    ``top1`` the ``prediction``; always ``error_type`` and ``error`` ("" on a good row). The reference is the
    same method of the program at ``reference``, else the batch's ``reference_*`` columns (an earlier stage's,
    such as :class:`~edgetorch.extension.ray.eager.EagerReference`), else none. ``threads`` caps the
    runtime's threads in the actor (one per CPU the actor asks Ray for).
    """

    def __init__(
        self,
        program: str,
        method: str = "forward",
        *,
        reader: SampleReader | None = None,
        reference: str | None = None,
        metric: str | None = None,
        keep_outputs: bool = True,
        threads: int = 1,
    ):
        from edgetorch.runtime import set_num_threads

        set_num_threads(threads)
        self._runner = _Runner(load_method(program, method))
        self._reference = _Runner(load_method(reference, method)) if reference else None
        self._reader = reader or SampleReader()
        self._metric = metric
        self._keep_outputs = keep_outputs

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(next(iter(batch.values())))
        errors: list[Exception | tuple[str, str] | None] = [None] * n
        samples: list[_Sample | None] = [None] * n
        labels: list[int | None] = [None] * n
        infos = self._runner.infos
        for i in range(n):
            if "error" in batch and batch["error"][i]:  # an earlier stage failed this row: keep its error
                errors[i] = (str(batch["error_type"][i]), str(batch["error"][i]))
                continue
            try:
                arrays, labels[i] = self._reader.read(batch, i, infos)
                samples[i] = self._reader.prepare(arrays, infos)
            except Exception as e:
                errors[i] = e
        outputs = self._runner.run(samples)
        references = self._references(batch, samples, n)
        for i, out in enumerate(outputs):
            if isinstance(out, Exception):
                errors[i], outputs[i] = out, None
            ref = references[i]
            if isinstance(ref, Exception) and errors[i] is None:
                errors[i] = SampleError(f"the reference failed: {type(ref).__name__}: {ref}")
        columns = self._passed_through(batch)
        if self._keep_outputs:
            columns.update(output_columns(OUTPUT_PREFIX, outputs, self._runner.outputs))
        if self._metric is not None:
            values = np.full(n, np.nan)
            for i, out in enumerate(outputs):
                if errors[i] is None and isinstance(out, list):
                    ref = references[i]
                    try:
                        values[i] = measure(self._metric, out, ref if isinstance(ref, list) else None, labels[i])
                    except Exception as e:
                        errors[i] = e
            columns[self._metric] = values
            if self._metric == "top1":
                columns["prediction"] = np.array(
                    [prediction(o) if isinstance(o, list) and errors[i] is None else -1 for i, o in enumerate(outputs)],
                    np.int64,
                )
        columns["error_type"], columns["error"] = error_columns(errors)
        return columns

    def _references(self, batch: Mapping[str, np.ndarray], samples: list[_Sample | None], n: int) -> list[Any]:
        if self._reference is not None:
            return self._reference.run(samples)
        names = sorted(
            (c for c in batch if c.startswith(REFERENCE_PREFIX)), key=lambda c: int(c[len(REFERENCE_PREFIX) :])
        )
        if not names:
            return [None] * n
        return [
            None if any(batch[c][i] is None for c in names) else [np.asarray(batch[c][i]) for c in names]
            for i in range(n)
        ]

    def _passed_through(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        dropped = {*self._reader.input_columns, *ERROR_COLUMNS}
        return {c: v for c, v in batch.items() if c not in dropped and not c.startswith(REFERENCE_PREFIX)}


def output_columns(prefix: str, outputs: Sequence[list[Any] | Any], infos: Sequence[Any]) -> dict[str, np.ndarray]:
    """Columns ``prefix0``, ``prefix1``, ... of per-row outputs, one per entry of ``infos`` (the method's outputs).

    A row without outputs (an error row) holds NaN (zeros for integers) shaped as the column's other rows, so
    that every block of a column has one dtype and Ray can join the blocks.
    """
    columns = {}
    for j, info in enumerate(infos):
        values = [o[j] if isinstance(o, list) and j < len(o) else None for o in outputs]
        good = next((np.asarray(v) for v in values if v is not None), None)
        if good is None:
            good = np.zeros(info.sizes[1:], info.numpy_dtype) if not isinstance(info, str) else np.zeros(())
        fill = np.full_like(good, np.nan if good.dtype.kind in "fc" else 0)
        rows = [fill if v is None else np.asarray(v) for v in values]
        if all(r.shape == fill.shape and r.dtype == fill.dtype for r in rows):
            columns[f"{prefix}{j}"] = np.stack(rows) if rows else np.empty((0, *fill.shape), fill.dtype)
        else:  # shapes vary (a dynamic output): Ray stores a variable-shaped tensor column
            column = np.empty(len(rows), dtype=object)
            column[:] = [None] * len(rows)
            for i, r in enumerate(rows):
                column[i] = r
            columns[f"{prefix}{j}"] = column
    return columns


def error_columns(errors: Sequence[Exception | tuple[str, str] | None]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [
        ("", "") if e is None else e if isinstance(e, tuple) else (type(e).__name__, str(e) or repr(e)) for e in errors
    ]
    kinds, messages = np.empty(len(pairs), dtype=object), np.empty(len(pairs), dtype=object)
    kinds[:] = [k for k, _ in pairs]
    messages[:] = [m for _, m in pairs]
    return kinds, messages
