"""edgetorch.extension.ray: programs run and evaluated over a dataset on a real local Ray (2 workers).

The actor class (ProgramPredictor) is tested in this process first, where its batching is cheap to watch; then
one module-scoped local Ray (num_cpus=2, no dashboard) runs the pipelines: results against a reference, a
worker killed mid-batch, eager references, the command line.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.extension.ray import ProgramPredictor, SampleError, SampleReader, list_samples, measure, read_sample
from edgetorch.runtime.program import Method
from tests.extension import ray_hooks
from tests.runtime.test_torch_free import BLOCKER

FACTORY = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh())
"""
CLASSES, PER_CLASS = 4, 5


def _net(noise: float = 0.0) -> torch.nn.Module:
    exec(FACTORY, namespace := {})
    model = namespace["make"]().eval()
    with torch.no_grad():
        model[0].weight.add_(noise)
    return model


def _pte(model: torch.nn.Module, batch: int, dynamic: bool = False) -> bytes:
    shapes = ({0: torch.export.Dim("batch", max=8)},) if dynamic else None
    ep = torch.export.export(model, (torch.randn(batch, 8),), dynamic_shapes=shapes, strict=False)
    return to_edge(ep).to_executorch().buffer


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """Paths of the same model as static batch 1, static batch 4 and dynamic batch (<= 8), and a perturbed copy
    (the stand-in for a quantized build) as static batch 1."""
    root = tmp_path_factory.mktemp("programs")
    made = {
        "static1": _pte(_net(), 1),
        "static4": _pte(_net(), 4),
        "dynamic": _pte(_net(), 4, dynamic=True),
        "perturbed": _pte(_net(0.01), 1),
    }
    for name, data in made.items():
        (root / f"{name}.pte").write_bytes(data)
    (root / "model.py").write_text(FACTORY)
    return {name: str(root / f"{name}.pte") for name in made} | {"factory": f"{root / 'model.py'}:make"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Class subfolders 0..3 of .npy samples, plus a corrupt file and one of the wrong shape (no label)."""
    root = tmp_path_factory.mktemp("samples")
    rng = np.random.default_rng(0)
    for c in range(CLASSES):
        (root / str(c)).mkdir()
        for i in range(PER_CLASS):
            np.save(root / str(c) / f"s{i}.npy", rng.standard_normal(8).astype(np.float32))
    (root / "corrupt.npy").write_bytes(b"not a numpy file")
    np.save(root / "wrong.npy", np.zeros(5, np.float32))
    return root


def _eager(x: np.ndarray, noise: float = 0.0) -> np.ndarray:
    with torch.no_grad():
        return _net(noise)(torch.from_numpy(np.asarray(x, np.float32))).numpy()


# --- the actor class, in this process -----------------------------------------------------------------------


@pytest.fixture
def calls(monkeypatch):
    """The batch size of every Method.execute call."""
    seen: list[int] = []
    execute = Method.execute

    def counted(self, inputs=(), clone_outputs=True):
        seen.append(int(np.shape(inputs[0])[0]))
        return execute(self, inputs, clone_outputs)

    monkeypatch.setattr(Method, "execute", counted)
    return seen


@pytest.mark.parametrize(
    "program,expected_calls",
    [("static1", [1] * 11), ("static4", [4, 4, 4]), ("dynamic", [8, 3])],
)
def test_batches_as_the_program_allows(programs, calls, program, expected_calls):
    x = np.random.default_rng(1).standard_normal((11, 8)).astype(np.float32)
    predictor = ProgramPredictor(programs[program], reader=SampleReader(input_columns=("x",)))
    out = predictor({"sample": np.arange(11), "x": x})
    assert calls == expected_calls
    assert set(out) == {"sample", "output_0", "error_type", "error"}  # the input column is dropped
    np.testing.assert_allclose(out["output_0"], _eager(x), rtol=1e-5, atol=1e-6)
    assert list(out["error"]) == [""] * 11


def test_samples_with_a_batch_dimension_keep_it(programs):
    x = np.random.default_rng(2).standard_normal((3, 1, 8)).astype(np.float64)  # float64: cast to float32
    out = ProgramPredictor(programs["dynamic"], reader=SampleReader(input_columns=("x",)))({"x": x})
    assert out["output_0"].shape == (3, 1, 4)
    np.testing.assert_allclose(out["output_0"][:, 0], _eager(x[:, 0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("program,error", [("static4", "SampleError"), ("dynamic", "ExecutionError")])
def test_a_bad_sample_gets_an_error_row(programs, calls, program, error):
    rng = np.random.default_rng(3)
    good = [rng.standard_normal(8).astype(np.float32) for _ in range(5)]
    column = np.empty(6, dtype=object)
    column[:] = [*good[:2], np.ones(6, np.float32), *good[2:]]  # 6 values: within the dynamic bound of 8
    out = ProgramPredictor(programs[program], reader=SampleReader(input_columns=("x",)))({"x": column})
    assert list(out["error_type"]) == ["", "", error, "", "", ""]
    assert "input 0 has shape [6]" in out["error"][2] if error == "SampleError" else "addmm" in out["error"][2]
    assert np.isnan(out["output_0"][2]).all()  # the error row's outputs are NaN, shaped as the others
    np.testing.assert_allclose(
        np.stack([out["output_0"][i] for i in (0, 1, 3, 4, 5)]), _eager(np.stack(good)), rtol=1e-5
    )
    assert len(calls) <= 3  # the good samples still ran in batches


def test_predictor_metric_against_a_reference_program(programs):
    x = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
    predictor = ProgramPredictor(
        programs["perturbed"], reader=SampleReader(input_columns=("x",)), reference=programs["static1"], metric="mse"
    )
    out = predictor({"x": x})
    want = ((_eager(x, 0.01) - _eager(x)) ** 2).mean(axis=1)
    np.testing.assert_allclose(out["mse"], want, rtol=1e-4)
    assert want.min() > 0


def test_predictor_imports_no_torch(programs, tmp_path):
    script = BLOCKER + textwrap.dedent(
        f"""
        import numpy as np
        from edgetorch.extension.ray import ProgramPredictor, SampleReader
        p = ProgramPredictor({programs["dynamic"]!r}, reader=SampleReader(input_columns=("x",)))
        out = p({{"x": np.ones((3, 8), np.float32)}})
        assert out["output_0"].shape == (3, 4) and list(out["error"]) == [""] * 3, out
        assert not any(m.split(".")[0] in ("torch", "executorch", "ray") for m in sys.modules), "torch was imported"
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_metrics():
    a, b = [np.array([1.0, 2.0, 3.0])], [np.array([1.0, 2.0, 4.0])]
    assert measure("mse", a, b, None) == pytest.approx(1 / 3)
    assert measure("max_abs", a, b, None) == 1.0
    assert measure("sqnr", a, b, None) == pytest.approx(10 * np.log10(21.0))
    assert measure("sqnr", a, a, None) == float("inf")
    assert measure("top1", a, None, 2) == 1.0 and measure("top1", a, [np.array([5.0, 0, 0])], None) == 0.0
    with pytest.raises(ValueError, match="top1 needs a label"):
        measure("top1", a, None, None)
    with pytest.raises(ValueError, match="1 outputs, the reference 2"):
        measure("mse", a, b * 2, None)
    with pytest.raises(ValueError, match="unknown metric 'acc'"):
        measure("acc", a, b, None)


def test_listing_and_reading_samples(folder, tmp_path):
    rows = list_samples(folder)
    assert [r["sample"] for r in rows] == list(range(CLASSES * PER_CLASS + 2))
    labelled = {r["name"]: r["label"] for r in rows}
    assert labelled["2/s0.npy"] == 2 and labelled["corrupt.npy"] == -1
    with pytest.raises(SampleError, match="cannot read sample .*corrupt.npy"):
        read_sample(str(folder / "corrupt.npy"), [(1, 8)])
    np.savez(tmp_path / "pair.npz", np.ones(2), np.zeros(3), label=np.int64(7))
    arrays, label = read_sample(str(tmp_path / "pair.npz"), [])
    assert [a.shape for a in arrays] == [(2,), (3,)] and label == 7
    with pytest.raises(SampleError, match="holds no sample"):
        list_samples(tmp_path / "pair.npz" if False else _empty(tmp_path))


def _empty(tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


@pytest.mark.parametrize(
    "scale,red,other",
    [
        ("symmetric", 1.0, -1.0),
        ("unit", 1.0, 0.0),
        ("imagenet", (1 - 0.485) / 0.229, [[-0.456 / 0.224], [-0.406 / 0.225]]),
        (((0.5,), (0.25,)), 2.0, -2.0),  # a (mean, std) pair of one value for every channel
    ],
)
def test_reading_an_image(tmp_path, scale, red, other):
    image = pytest.importorskip("PIL.Image")
    pixels = np.zeros((10, 20, 3), np.uint8)
    pixels[..., 0] = 255
    image.fromarray(pixels).save(tmp_path / "red.png")
    (x,), label = read_sample(str(tmp_path / "red.png"), [(1, 3, 4, 6)], scale)
    assert x.shape == (3, 4, 6) and x.dtype == np.float32 and label is None  # resized to the planned 4 x 6
    np.testing.assert_allclose(x[0], red, rtol=1e-6)
    np.testing.assert_allclose(x[1:].reshape(2, -1), np.broadcast_to(other, (2, 24)), rtol=1e-6)
    (y,), _ = read_sample(str(tmp_path / "red.png"), [(1, 3, 4, 6)], scale, image_size=(5, 7))
    assert y.shape == (3, 5, 7)


def test_image_options_are_checked_in_the_driver():
    with pytest.raises(ValueError, match="unknown image scale 'tf'; expected one of imagenet, unit, symmetric"):
        SampleReader(image_scale="tf")
    with pytest.raises(ValueError, match="image_size must be a positive int or \\(height, width\\), got 0"):
        SampleReader(image_size=0)
    assert SampleReader(image_scale="symmetric", image_size=224).image_size == 224


# --- on a real local Ray -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module: 2 CPUs (2 workers), no dashboard. Skips where Ray is absent (the tests
    above run without it)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'edgetorch[ray]'")
    pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow: pip install 'edgetorch[ray]'")
    ray.cloudpickle.register_pickle_by_value(ray_hooks)  # the workers must not import the tests (and torch)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _good_rows(table):
    return [i for i, e in enumerate(table.column("error").to_pylist()) if not e]


def test_evaluate_against_a_reference_program(local_ray, programs, folder, tmp_path):
    from edgetorch.extension.ray import evaluate

    result = evaluate(
        programs["perturbed"],
        folder,
        reference=programs["static1"],
        metric="sqnr",
        output=tmp_path / "results.parquet",
        histogram=tmp_path / "sqnr.png",
        progress=False,
        batch_size=4,
        reader=SampleReader(transform=ray_hooks.NoTorch()),
    )
    table = result.table
    names = table.column("name").to_pylist()
    assert table.column("sample").to_pylist() == list(range(len(list_samples(folder))))  # one row per sample
    errors = dict(zip(names, table.column("error_type").to_pylist()))
    assert errors.pop("corrupt.npy") == "SampleError" and errors.pop("wrong.npy") == "SampleError"
    assert set(errors.values()) == {""}, errors  # no worker imported torch
    for i in _good_rows(table)[:3]:
        x = np.load(folder / names[i])[None]
        want, got = _eager(x), _eager(x, 0.01)
        expected = 10 * np.log10((want.astype(np.float64) ** 2).sum() / ((got - want).astype(np.float64) ** 2).sum())
        assert table.column("sqnr")[i].as_py() == pytest.approx(expected, abs=0.05)
    import pyarrow.parquet as pq

    written = pq.read_table(tmp_path / "results.parquet")
    assert written.drop(["sqnr"]).equals(table.drop(["sqnr"]))  # sqnr is NaN on error rows: NaN != NaN
    np.testing.assert_array_equal(written.column("sqnr").to_numpy(), table.column("sqnr").to_numpy())
    assert (tmp_path / "sqnr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = result.summary()
    assert summary["samples"] == CLASSES * PER_CLASS + 2 and summary["errors SampleError"] == 2
    assert "sqnr" in result.format_summary()


def test_a_worker_killed_mid_batch_loses_and_repeats_no_row(local_ray, programs, folder, tmp_path):
    from edgetorch.extension.ray import evaluate

    trigger = float(np.load(folder / "2" / "s3.npy")[0])  # mid-batch: the 14th of 22 samples, batches of 4
    marker = tmp_path / "crashed"
    result = evaluate(
        programs["dynamic"],
        folder,
        metric="top1",
        progress=False,
        batch_size=4,
        reader=SampleReader(transform=ray_hooks.CrashOnce(str(marker), trigger)),
    )
    assert marker.exists()  # a worker did die
    table = result.table
    assert table.column("sample").to_pylist() == list(range(CLASSES * PER_CLASS + 2))
    names, predictions = table.column("name").to_pylist(), table.column("prediction").to_pylist()
    for i in _good_rows(table):
        assert predictions[i] == int(np.argmax(_eager(np.load(folder / names[i])))), names[i]
    assert len(_good_rows(table)) == CLASSES * PER_CLASS


def test_map_program_adds_output_columns(local_ray, programs):
    from edgetorch.extension.ray import map_program

    x = np.random.default_rng(5).standard_normal((10, 8)).astype(np.float32)
    dataset = local_ray.data.from_items([{"id": i, "x": x[i]} for i in range(10)], override_num_blocks=2)
    rows = sorted(map_program(dataset, programs["dynamic"], input_columns=["x"]).take_all(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(10)) and "x" not in rows[0]
    np.testing.assert_allclose(np.stack([r["output_0"] for r in rows]), _eager(x), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # another full Ray evaluation (~20-40 s of CI's 10 minutes); the reference-program one covers the path
def test_evaluate_against_eager(local_ray, programs, folder):
    from edgetorch.extension.ray import evaluate

    result = evaluate(programs["static1"], folder, eager=programs["factory"], metric="max_abs", progress=False)
    table = result.table
    assert table.num_rows == CLASSES * PER_CLASS + 2 and len(_good_rows(table)) == CLASSES * PER_CLASS
    assert max(table.column("max_abs")[i].as_py() for i in _good_rows(table)) < 1e-5


def test_cli_eval_over_parquet(local_ray, programs, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edgetorch.cli import main

    x = np.random.default_rng(6).standard_normal((9, 8)).astype(np.float32)
    labels = _eager(x).argmax(axis=1)
    labels[0] = (labels[0] + 1) % 4  # one wrong label: top1 is 8/9
    pq.write_table(pa.table({"x": pa.array(list(x), pa.list_(pa.float32())), "label": labels}), tmp_path / "d.parquet")
    out = tmp_path / "r.parquet"
    code = main(["eval", programs["static4"], "--data", str(tmp_path / "d.parquet"), "--output", str(out)])
    captured = capsys.readouterr()
    printed = captured.out
    assert code == 0, printed
    assert "evaluating" in captured.err and "9/9" in captured.err  # the progress bar, at its end
    assert "top1" in printed and f"wrote {out} (9 rows)" in printed and (tmp_path / "r.png").exists()
    table = pq.read_table(out)
    assert table.column("top1").to_pylist() == [0.0] + [1.0] * 8
    assert table.column("name").to_pylist() == [str(i) for i in range(9)]
