"""Our Inspector against ExecuTorch's on the same files: ours (edgetorch runtime + ETRecord) and theirs."""

from __future__ import annotations

import io
import math

import pytest
import torch

from edgetorch.devtools import Inspector, TimeScale, parse_etrecord
from edgetorch.devtools.numerical_comparator import L1Comparator, MSEComparator, NumericalComparatorBase, SNRComparator


def _pair(etdump, etrecord):
    from executorch.devtools import Inspector as ETInspector

    kw = {"etdump_path": str(etdump[0]), "etrecord": str(etrecord), "debug_buffer_path": str(etdump[1])}
    return Inspector(**kw), ETInspector(**kw)


def _summary(inspector) -> list[tuple]:
    """Per event what both must agree on, the runtime's own events (instruction 0's handles, no ops) included."""
    return [
        (b.name, e.name, len(e.perf_data.raw), e._instruction_id, e.debug_handles, tuple(e.op_types))
        + (len(e.debug_data),)
        for b in inspector.event_blocks
        for e in b.events
    ]


@pytest.mark.parametrize("which", ["edgetorch", "executorch"])
def test_same_events_as_executorch_inspector(traced, which):
    model, args, _, etrecord, ours, theirs = traced
    mine, reference = _pair(ours if which == "edgetorch" else theirs, etrecord)
    got, want = _summary(mine), _summary(reference)
    assert got == want and len(got) > 10
    (a,), (b,) = ([blk for blk in i.event_blocks if blk.name == "Execute"] for i in (mine, reference))
    for x, y in zip(a.events, b.events):
        assert x.perf_data.raw == pytest.approx(y.perf_data.raw)
        if "::" not in x.name:  # ExecuTorch keys traces by node name + "_"; the traces are the same
            assert sorted(x.stack_traces.values()) == sorted(y.stack_traces.values())
            assert sorted(map(str, x.module_hierarchy.values())) == sorted(map(str, y.module_hierarchy.values()))
        for p, q in zip(x.debug_data, y.debug_data):
            torch.testing.assert_close(p, q)
    torch.testing.assert_close(a.run_output, b.run_output)
    torch.testing.assert_close(mine.event_blocks[-1].run_output[0], model(*args))


def test_tables_and_module_totals(traced):
    _, _, _, etrecord, ours, _ = traced
    mine, reference = _pair(ours, etrecord)
    df = mine.to_dataframe()
    assert {"event_block_name", "event_name", "p50 (ms)", "op_types", "is_delegated_op"} <= set(df.columns)
    assert "p50" in mine.to_dataframe(include_units=False).columns
    out = io.StringIO()
    mine.print_data_tabular(out)
    assert "Method::execute" in out.getvalue() and "OPERATOR_CALL" not in out.getvalue()
    conv = mine.find_total_for_module("conv")
    theirs = reference.find_total_for_module("conv")  # the runtime's own events have no module: not counted
    assert conv == pytest.approx(theirs) and conv > 0
    assert mine.find_total_for_module("no_such_module") == 0.0
    execute = next(e for b in mine.event_blocks for e in b.events if e.name == "Method::execute")
    assert conv <= execute.perf_data.avg
    assert mine.get_op_list()[0] == "aten.convolution.default"


def test_numeric_gap_is_zero_for_fp32(traced):
    _, _, _, etrecord, ours, _ = traced
    mine, _ = _pair(ours, etrecord)
    df = mine.calculate_numeric_gap("L1")
    assert list(df.columns) == [
        "aot_debug_handle",
        "aot_ops",
        "aot_intermediate_output",
        "runtime_ops",
        "runtime_debug_handle",
        "runtime_intermediate_output",
        "gap",
        "stacktraces",
    ]
    assert len(df) >= 4 and all(g[0] < 1e-3 for g in df.gap)
    assert all(set(traces) == set(ops) for traces, ops in zip(df.stacktraces, df.aot_ops))
    assert len(mine.calculate_numeric_gap("mse")) == len(df)

    class Seven(NumericalComparatorBase):
        def element_compare(self, a, b):
            return 7.0

    assert all(g == [7.0] for g in mine.calculate_numeric_gap(Seven()).gap)
    with pytest.raises(ValueError, match="Unsupported distance"):
        mine.calculate_numeric_gap("foo")


def test_constructor_errors_and_no_etrecord(traced, recwarn):
    _, _, _, etrecord, ours, _ = traced
    plain = Inspector(etdump_path=str(ours[0]))
    assert any("Output Buffer not found" in str(w.message) for w in recwarn.list)
    assert plain.find_total_for_module("conv") == 0.0 and plain.get_exported_program() is None
    with pytest.raises(ValueError, match="exactly one"):
        Inspector()
    with pytest.raises(ValueError, match="exactly one"):
        Inspector(etdump_path=str(ours[0]), etdump_data=b"x")
    with pytest.raises(TypeError, match="Unsupported ETRecord type"):
        Inspector(etdump_path=str(ours[0]), etrecord=123)
    with pytest.raises(RuntimeError, match="cycles"):
        Inspector(etdump_path=str(ours[0]), source_time_scale=TimeScale.CYCLES, target_time_scale=TimeScale.MS)
    with pytest.raises(ValueError, match="representative inputs"):
        Inspector(etdump_path=str(ours[0]), etrecord=_without_inputs(parse_etrecord(etrecord))).calculate_numeric_gap(
            "L1"
        )


def test_comparators():
    a = torch.randn(100, dtype=torch.float64)
    noise = 0.01 * torch.randn(100, dtype=torch.float64)
    expected = 10 * torch.log10((a**2).mean() / (noise**2).mean()).item()
    assert SNRComparator().element_compare(a, a + noise) == pytest.approx(expected, abs=1e-4)
    assert L1Comparator().element_compare(a, a + noise) == pytest.approx(noise.abs().sum().item())
    assert MSEComparator().element_compare(a, a + noise) == pytest.approx((noise**2).mean().item())
    pairs = {((1,), a): ((1, 2), a + noise), ((3,), a): ((3,), None)}  # a pair without a runtime value is left out
    df = MSEComparator().compare(pairs, {(1,): ["conv"]}, {(1, 2): ["DELEGATE_CALL"]})
    assert df.aot_ops.tolist() == [["conv"]] and df.runtime_ops.tolist() == [["DELEGATE_CALL"]]
    assert df.gap[0] == [pytest.approx((noise**2).mean().item())]

    class Bad(MSEComparator):
        def preprocessing(self, mapping):
            return [mapping]

    with pytest.raises(TypeError, match="must return a dict"):
        Bad().compare(pairs, {}, {})


def _without_inputs(record):
    record._representative_inputs = None
    return record


def test_compare_results(tmp_path, monkeypatch, capsys):
    from edgetorch.devtools.inspector import compare_results

    ref = [torch.randn(3, 4), torch.randn(5)]
    same = compare_results(ref, ref)
    assert list(same) == ["snr", "mse", "cosine_similarity"] and same["mse"] == [0.0, 0.0]
    assert same["snr"] == [float("inf")] * 2 and same["cosine_similarity"] == pytest.approx([1.0, 1.0])
    noise = [torch.full_like(r, 0.1) for r in ref]
    noisy = compare_results(ref, [r + n for r, n in zip(ref, noise)], metrics=["mse", "snr"])
    assert list(noisy) == ["mse", "snr"] and noisy["mse"] == pytest.approx([0.01, 0.01])
    signal = [float((r.double() ** 2).mean()) for r in ref]
    assert noisy["snr"] == pytest.approx([10 * math.log10(s / 0.01) for s in signal], rel=1e-4)
    opposite = compare_results([ref[0]], [-ref[0]], metrics=["cosine_similarity"])
    assert opposite["cosine_similarity"] == pytest.approx([-1.0])
    assert compare_results([ref[0], 3], [ref[0], 3])["mse"] == [0.0, None]  # a scalar output: no metric
    with pytest.raises(ValueError, match="unknown metrics"):
        compare_results(ref, ref, metrics=["psnr"])
    with pytest.raises(ValueError, match="shape"):
        compare_results([ref[0]], [ref[0].flatten()])
    monkeypatch.chdir(tmp_path)
    assert compare_results(ref, ref, plot=True)["mse"] == [0.0, 0.0]
    assert (tmp_path / "mse_output_plot.png").stat().st_size > 0
    assert "cosine_similarity" in capsys.readouterr().out


def test_inspector_cli_on_files(traced, tmp_path, capsys):
    from edgetorch.devtools.inspector import inspector_cli

    _, _, _, etrecord, ours, _ = traced
    tsv = tmp_path / "events.tsv"
    inspector_cli.main(
        ["--etdump_path", str(ours[0]), "--etrecord_path", str(etrecord), "--debug_buffer_path", str(ours[1])]
        + ["--tsv_path", str(tsv), "--target_time_scale", "us", "--compare_results"]
    )
    out = capsys.readouterr().out
    assert "native_call_convolution.out" in out and "p50 (us)" in out and "nothing to compare" in out
    lines = tsv.read_text().splitlines()
    assert "event_name" in lines[0] and any("aten.convolution.default" in line for line in lines[1:])


def test_etdump_schema_under_executorch_paths(traced):
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc as executorch_reads

    from edgetorch.devtools.etdump.schema_flatcc import PROFILE_EVENT_ENUM, ETDumpFlatCC, ProfileEvent
    from edgetorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc, serialize_to_etdump_flatcc

    *_, ours, theirs = traced
    etdump = deserialize_from_etdump_flatcc(theirs[0].read_bytes())
    assert isinstance(etdump, ETDumpFlatCC)
    names = [
        e.profile_event.name for r in etdump.run_data for e in r.events if isinstance(e.profile_event, ProfileEvent)
    ]
    assert {m.value for m in PROFILE_EVENT_ENUM} - {"DELEGATE_CALL"} <= set(names)  # TinyNet has no delegate
    again = executorch_reads(serialize_to_etdump_flatcc(etdump))
    assert [len(r.events) for r in again.run_data] == [len(r.events) for r in etdump.run_data]
