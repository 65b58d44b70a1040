"""The memory-plan views (PNG timeline, Chrome trace) and the HTML graph view, rendered in headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.devtools.extras import MissingDependencyError
from edgetorch.devtools.html_view import program_to_html
from edgetorch.devtools.memory_plan import memory_timeline, plot_memory_timeline
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.runtime import Runtime
from edgetorch.util.activation_memory_profiler import generate_memory_trace
from tests.devtools.models import mixed, tinynet
from tests.runtime.test_torch_free import BLOCKER

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """TinyNet lowered by edgetorch: (program manager, .pte path)."""
    model, args = tinynet()
    prog = to_edge(torch.export.export(model, args)).to_executorch()
    path = tmp_path_factory.mktemp("visual") / "tiny.pte"
    path.write_bytes(prog.buffer)
    return prog, path


def _sound(tensors) -> None:
    """Tensors alive at once never share bytes, unless one is a view of the other."""
    for a in tensors:
        for b in tensors:
            if a.value < b.value and a.nbytes and b.nbytes and a.memory_id == b.memory_id:
                share_bytes = a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes
                share_time = a.first <= b.last and b.first <= a.last
                assert not (share_bytes and share_time) or "view" in (a.producer, b.producer), (a, b)


def test_timeline_reads_executorch_plans_too():
    from tests.oracle import executorch_pte

    model, args = tinynet()
    pte = executorch_pte(model, args)
    tensors = memory_timeline(pte)
    sizes = Runtime.get().load_program(pte).metadata("forward").planned_buffer_sizes
    assert len(tensors) >= 6 and all(t.offset + t.nbytes <= sizes[t.memory_id - 1] for t in tensors)
    assert {"aten::convolution.out", "aten::relu.out", "aten::addmm.out"} <= {t.producer for t in tensors}
    _sound(tensors)


def test_timeline_places_every_tensor_inside_its_arena_and_never_two_live_ones_on_the_same_bytes(tiny):
    prog, path = tiny
    tensors = memory_timeline(path)
    meta = Runtime.get().load_program(path).metadata("forward")
    sizes = dict(enumerate(meta.planned_buffer_sizes, start=1))
    assert len(tensors) >= 6 and {t.memory_id for t in tensors} == set(sizes)
    assert all(0 <= t.offset and t.offset + t.nbytes <= sizes[t.memory_id] for t in tensors)
    last = meta.num_instructions - 1
    assert [t.first for t in tensors if t.producer == "input"] == [0]
    plan = prog.executorch_program.execution_plan[0]
    (output,) = [t for t in tensors if t.value == plan.outputs[0]]
    assert output.last == last and output.producer == "aten::addmm.out"
    assert {"aten::convolution.out", "aten::relu.out", "aten::mean.out"} <= {t.producer for t in tensors}
    _sound(tensors)


def test_chrome_trace_has_a_row_per_instruction_with_the_live_tensors(tiny, tmp_path):
    prog, _ = tiny
    tensors = memory_timeline(prog)
    generate_memory_trace(prog, tmp_path / "trace.json", enable_memory_offsets=True)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert len(events) == sum(t.last - t.first + 1 for t in tensors)
    by_name = {t.value: t for t in tensors}
    for e in events:
        t = by_name[int(e["name"][1:])]
        assert (e["ts"], e["dur"], e["pid"]) == (t.offset, t.nbytes, t.memory_id) and t.first <= e["tid"] <= t.last
    generate_memory_trace(prog, tmp_path / "packed.json", ommit_metadata=True)
    packed = json.loads((tmp_path / "packed.json").read_text())["traceEvents"]
    for step in {e["tid"] for e in packed}:  # packed rows start at 0 and leave no gaps
        row = sorted((e["ts"], e["dur"]) for e in packed if e["tid"] == step)
        assert row[0][0] == 0 and all(a + d == b for (a, d), (b, _) in zip(row, row[1:]))
    assert all("args" not in e for e in packed)


def test_memory_plot_png(tiny, tmp_path):
    from matplotlib.image import imread

    _, path = tiny
    plot_memory_timeline(path, tmp_path / "mem.png")
    image = imread(tmp_path / "mem.png")
    assert image.shape[:2] == (320, 1000)  # one panel: 10 x 3.2 inches at 100 dpi
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 20  # bars, labels, axes: not blank


def test_missing_optional_packages_are_a_typed_error(tiny, tmp_path, monkeypatch):
    from edgetorch.devtools import Inspector
    from edgetorch.runtime.etdump import ETDumpGen

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import now fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'edgetorch\[devtools\]'"):
        plot_memory_timeline(tiny[1], tmp_path / "mem.png")
    tracer = ETDumpGen()
    Runtime.get().load_program(tiny[1]).load_method("forward", event_tracer=tracer).execute(
        [np.zeros((1, 3, 16, 16), np.float32)]
    )
    inspector = Inspector(etdump_data=tracer.get_etdump_data())
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingDependencyError, match="Inspector.to_dataframe needs the optional package 'pandas'"):
        inspector.to_dataframe()


def test_html_view_lists_operators_shapes_offsets_and_delegates():
    model, args = mixed()
    ep = torch.export.export(model, args)
    page = program_to_html(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch())
    assert "class='delegate'" in page and "XnnpackBackend" in page
    assert "XNNPACK nodes: " in page and "XNNFullyConnected x1" in page  # read from the delegate's blob
    assert "<script" not in page and "src=" not in page and "https://" not in page  # self-contained
    page = program_to_html(to_edge(ep).to_executorch())
    assert "aten::addmm.out" in page and "2x3 f32 @ 1+" in page and "class='delegate'" not in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_inspect_html_and_memory_plot_torch_free_then_render_in_chromium(tiny, tmp_path):
    from matplotlib.image import imread

    _, path = tiny
    html, png = tmp_path / "tiny.html", tmp_path / "mem.png"
    script = BLOCKER + textwrap.dedent(
        f"""
        from edgetorch.cli import main
        assert main(["inspect", {str(path)!r}, "--html", {str(html)!r}, "--memory-plot", {str(png)!r}]) == 0
        assert not any(m.split(".")[0] in ("torch", "executorch") for m in sys.modules), "torch was imported"
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert png.stat().st_size > 0 and "aten::convolution.out" in html.read_text()

    shot = tmp_path / "shot.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={shot}",
           "--window-size=1000,900", html.as_uri()]  # fmt: skip
    subprocess.run(cmd, capture_output=True, timeout=120, check=True)
    image = imread(shot)[..., :3]
    assert image.shape[:2] == (900, 1000)
    colors, counts = np.unique((image * 255).astype(np.uint8).reshape(-1, 3), axis=0, return_counts=True)
    assert len(colors) > 50 and counts.max() < 0.95 * counts.sum()  # text, boxes and arrows, not one colour
    assert any(abs(c.astype(int) - (0xDB, 0xE8, 0xFB)).max() <= 2 for c in colors)  # the kernel boxes' fill
