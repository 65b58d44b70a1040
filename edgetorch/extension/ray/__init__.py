"""Run and evaluate programs over a dataset on Ray (``pip install 'edgetorch[ray]'``).

``map_program(dataset, "model.pte")`` runs a program over a Ray Dataset with ``map_batches``: one actor per
worker loads the program once (memory-mapped) and runs NumPy batches through it; the outputs come back as
columns. ``evaluate("model.pte", "data/", reference="fp32.pte", metric="sqnr")`` (and ``edgetorch eval``)
evaluates it over a folder of ``.npy``/``.npz`` files or images, or a Parquet file, against a reference
program, an eager PyTorch model or the labels: per-sample results, a summary and a histogram. Each input row
gives exactly one result row: a worker that dies has its batch rerun by Ray, a bad sample gets an error row.

The actors that run programs import the runtime only (no torch); an eager reference runs in actors of its own.
Ray is imported when a function needs it, so that this package imports without it.
"""

from edgetorch.extension.ray.evaluate import EvalResult, evaluate, init_ray, map_program, read_dataset
from edgetorch.extension.ray.metrics import METRICS, measure
from edgetorch.extension.ray.predictor import ProgramPredictor, SampleReader
from edgetorch.extension.ray.samples import SampleError, list_samples, read_sample

__all__ = [
    "METRICS",
    "EvalResult",
    "ProgramPredictor",
    "SampleError",
    "SampleReader",
    "evaluate",
    "init_ray",
    "list_samples",
    "map_program",
    "measure",
    "read_dataset",
    "read_sample",
]
