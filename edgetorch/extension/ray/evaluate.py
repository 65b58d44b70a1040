"""The driver side: a Ray Dataset from a folder or a Parquet file, the actors mapped over it, results gathered.

``map_program`` adds a program's outputs to any Ray Dataset as columns; ``evaluate`` runs a whole evaluation
(program, optional reference, a per-sample metric) and returns an :class:`EvalResult` with the per-sample table,
a summary and a histogram. Ray is started on first use (``ray.init()``: a local instance) unless it is already
running; ``address`` joins a cluster instead, whose workers must see the program, the data and any eager
model file at the same paths (a shared filesystem), or be given a Ray Dataset of their own.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.extension.ray.metrics import METRICS
from edgetorch.extension.ray.predictor import ProgramPredictor, SampleReader
from edgetorch.extension.ray.samples import RESERVED_COLUMNS, SampleError, list_samples

# A task retried this often after its actor died fails the job: a sample that kills every worker it reaches
# must end the run, not loop forever.
TASK_RETRIES = 3


def init_ray(address: str | None = None, **options: Any) -> Any:
    """The ``ray`` module with Ray running: already started, else joined at ``address``, else started locally."""
    try:
        import ray
    except ImportError:
        raise ImportError("edgetorch.extension.ray needs Ray: pip install 'edgetorch[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, **options)
    return ray


def _map(dataset: Any, actor: type, workers: int, batch_size: int, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``dataset.map_batches`` with ``workers`` actors of ``actor(*args, **kwargs)``, one CPU each."""
    from ray.data import ActorPoolStrategy

    with warnings.catch_warnings():
        # Ray 2.60 deprecates passing max_restarts/max_task_retries through **ray_remote_args but names no
        # replacement for them yet; the extra pins that Ray.
        warnings.simplefilter("ignore", DeprecationWarning)
        return dataset.map_batches(
            actor,
            batch_size=batch_size,
            batch_format="numpy",
            compute=ActorPoolStrategy(size=workers),
            num_cpus=1,
            fn_constructor_args=args,
            fn_constructor_kwargs=kwargs,
            max_restarts=-1,  # an actor that died is replaced ...
            max_task_retries=TASK_RETRIES,  # ... and its batch runs again, from the start, on a live one
        )


def map_program(
    dataset: Any,
    program: str | pathlib.Path,
    method: str = "forward",
    *,
    input_columns: Sequence[str] | None = None,
    reference: str | pathlib.Path | None = None,
    eager: str | Callable[[], Any] | None = None,
    metric: str | None = None,
    keep_outputs: bool = True,
    workers: int = 2,
    batch_size: int = 16,
    reader: SampleReader | None = None,
) -> Any:
    """``dataset`` (a Ray Dataset) with ``method`` of ``program`` run over it, lazily, by ``workers`` actors.

    Rows with a ``path`` column are read from their files; other rows take ``input_columns`` (default: the
    reader's, else every column but ``sample``, ``name``, ``path`` and ``label``, in order) as the inputs;
    ``reader`` also brings a user's own ``transform`` of each sample. ``reference`` (another
    program) or ``eager`` (a model factory, run in torch actors of its own) gives the reference ``metric``
    compares against. See :class:`ProgramPredictor` for the columns added.
    """
    if metric is not None and metric not in METRICS:
        raise InvalidArgumentError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if reference is not None and eager is not None:
        raise InvalidArgumentError("give a reference program or an eager model, not both")
    if workers < 1 or batch_size < 1:
        raise InvalidArgumentError(f"workers and batch_size must be >= 1, got {workers} and {batch_size}")
    program = str(pathlib.Path(program).resolve())
    reader = reader or SampleReader()
    if input_columns is not None:
        reader = dataclasses.replace(reader, input_columns=tuple(input_columns))
    elif not reader.input_columns:
        names = list(dataset.columns() or ())
        if "path" not in names:
            reader = dataclasses.replace(reader, input_columns=tuple(c for c in names if c not in RESERVED_COLUMNS))
    if eager is not None:
        from edgetorch.extension.ray.eager import EagerReference

        dataset = _map(dataset, EagerReference, workers, batch_size, (eager, program, method), {"reader": reader})
    constructor = {
        "method": method,
        "reader": reader,
        "reference": None if reference is None else str(pathlib.Path(reference).resolve()),
        "metric": metric,
        "keep_outputs": keep_outputs,
    }
    return _map(dataset, ProgramPredictor, workers, batch_size, (program,), constructor)


def read_dataset(data: str | pathlib.Path, batch_size: int = 16) -> tuple[Any, int]:
    """A Ray Dataset of the samples in ``data`` (a folder or a ``.parquet`` file) and its row count.

    Every row gets ``sample`` (its index, the key of the results) and ``name``; a folder's rows name their
    files in ``path`` and are read by the actors. One block per ``batch_size`` rows, so that the actors share
    the work and a retried batch is small.
    """
    ray = init_ray()
    path = pathlib.Path(data)
    if path.is_file() and path.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        n = table.num_rows
        if "sample" in table.column_names:
            raise SampleError(f"{str(path)!r} has a column 'sample'; that name is kept for the row index")
        table = table.append_column("sample", pa.array(np.arange(n, dtype=np.int64)))
        if "name" not in table.column_names:
            table = table.append_column("name", pa.array([str(i) for i in range(n)]))
        blocks = [table.slice(i, batch_size) for i in range(0, n, batch_size)] or [table]
        return ray.data.from_arrow(blocks), n
    if path.is_file():
        raise SampleError(f"expected a folder of samples or a .parquet file, found the file {str(path)!r}")
    rows = list_samples(path)
    return ray.data.from_items(rows, override_num_blocks=math.ceil(len(rows) / batch_size)), len(rows)


@dataclasses.dataclass
class EvalResult:
    """An evaluation's per-sample results (a pyarrow Table sorted by ``sample``) and how long it took."""

    table: Any
    metric: str
    seconds: float
    workers: int

    @property
    def values(self) -> np.ndarray:
        """The metric of the rows without an error."""
        column = self.table.column(self.metric).to_numpy(zero_copy_only=False)
        return column[self.errors() == ""]

    def errors(self) -> np.ndarray:
        return np.asarray(self.table.column("error").to_pylist(), dtype=object)

    def summary(self) -> dict[str, Any]:
        """Counts, the metric's statistics over the good rows, error counts by type, and samples per second."""
        values = self.values
        finite = values[np.isfinite(values)]
        kinds = [k for k in self.table.column("error_type").to_pylist() if k]
        stats = {"samples": self.table.num_rows, "ok": int(values.size), "errors": len(kinds)}
        stats.update({f"errors {k}": kinds.count(k) for k in sorted(set(kinds))})
        if finite.size:
            stats.update(
                mean=float(finite.mean()),
                median=float(np.median(finite)),
                min=float(finite.min()),
                p5=float(np.percentile(finite, 5)),
                max=float(finite.max()),
            )
        if finite.size < values.size:
            stats["not finite"] = int(values.size - finite.size)  # sqnr of an exact match is inf
        stats["samples/s"] = self.table.num_rows / self.seconds if self.seconds > 0 else float("inf")
        return stats

    def format_summary(self) -> str:
        """The summary as a two-column text table."""
        rows = [("metric", self.metric), ("workers", str(self.workers))]
        rows += [(k, f"{v:.6g}" if isinstance(v, float) else str(v)) for k, v in self.summary().items()]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def save_histogram(self, path: str | pathlib.Path) -> pathlib.Path:
        """A PNG histogram of the per-sample metric (needs matplotlib: ``pip install 'edgetorch[devtools]'``)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("the histogram needs matplotlib: pip install 'edgetorch[devtools]'") from None
        values = self.values[np.isfinite(self.values)]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.hist(values, bins=min(50, max(10, int(np.sqrt(max(values.size, 1))))))
        ax.set_xlabel(self.metric)
        ax.set_ylabel("samples")
        ax.set_title(f"{self.metric} per sample ({values.size} of {self.table.num_rows})")
        fig.tight_layout()
        path = pathlib.Path(path)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


def evaluate(
    program: str | pathlib.Path,
    data: str | pathlib.Path,
    *,
    reference: str | pathlib.Path | None = None,
    eager: str | Callable[[], Any] | None = None,
    metric: str | None = None,
    method: str = "forward",
    address: str | None = None,
    workers: int = 2,
    batch_size: int = 16,
    output: str | pathlib.Path | None = None,
    histogram: str | pathlib.Path | None = None,
    progress: bool = True,
    reader: SampleReader | None = None,
) -> EvalResult:
    """Evaluate ``program`` over ``data`` on Ray; one result row per sample.

    ``metric`` defaults to ``sqnr`` with a reference and ``top1`` (against the labels) without. ``output``
    writes the per-sample table as Parquet, ``histogram`` the metric's histogram as a PNG; ``progress`` shows
    a progress bar (tqdm's, else Ray's own).
    """
    init_ray(address)
    from ray.data import DataContext

    metric = metric or ("sqnr" if reference is not None or eager is not None else "top1")
    tqdm = _tqdm() if progress else None
    # Ray's own progress output only without tqdm's bar; a Dataset keeps the context it was made in, so set it first
    DataContext.get_current().enable_progress_bars = progress and tqdm is None
    dataset, n = read_dataset(data, batch_size)
    mapped = map_program(
        dataset,
        program,
        method,
        reference=reference,
        eager=eager,
        metric=metric,
        keep_outputs=False,
        workers=workers,
        batch_size=batch_size,
        reader=reader,
    )
    start = time.perf_counter()
    table = _gather(mapped, None if tqdm is None else tqdm(total=n, unit="sample", desc="evaluating"))
    result = EvalResult(table, metric, time.perf_counter() - start, workers)
    if output is not None:
        import pyarrow.parquet as pq

        pq.write_table(table, output)
    if histogram is not None:
        result.save_histogram(histogram)
    return result


def _tqdm() -> Any:
    """tqdm's progress bar class, or None without tqdm (Ray's own progress output shows instead)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def _gather(dataset: Any, bar: Any) -> Any:
    """Run ``dataset`` and return its rows as one pyarrow Table sorted by ``sample``; ``bar`` counts them."""
    import pyarrow as pa

    tables = []
    try:
        for block in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            tables.append(block)
            if bar is not None:
                bar.update(block.num_rows)
    finally:
        if bar is not None:
            bar.close()
    table = pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
    return table.sort_by("sample") if "sample" in table.column_names else table
