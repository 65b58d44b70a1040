"""PyTorch's OpInfo samples, exported, lowered by edgetorch, run on the edgetorch runtime, compared with eager.

One test per OpInfo × dtype. The CI set is the OpInfos of Core ATen ops at their
first supported dtype, one sample each; ``EDGETORCH_OPINFO_FULL=1`` sweeps all of
``op_db`` at float32, float16, bfloat16, int64, int32 and bool with two samples.

A failure is a real failure. Cases that fail today are listed in KNOWN_FAILURES
with the stage and the error text; they xfail while they still fail that way and
fail the test once fixed (remove the entry then). torch.export failures are
torch's limits: recorded, not counted against edgetorch.
"""

from __future__ import annotations

import os

import pytest

from edgetorch.devtools import ops_coverage as oc

FULL = os.environ.get("EDGETORCH_OPINFO_FULL") == "1"
SAMPLES = 2 if FULL else 1

# (OpInfo, dtype) -> (stage, text the error contains). Found by this suite; owners listed in the report.
KNOWN_FAILURES: dict = {}


def _cases() -> list:
    return [
        pytest.param(op, dtype, id=f"{oc.opinfo_name(op)}-{str(dtype).removeprefix('torch.')}")
        for op in oc.opinfos(FULL)
        for dtype in oc.op_dtypes(op, FULL)
    ]


@pytest.mark.parametrize(("op", "dtype"), _cases())
def test_opinfo_sample_matches_eager(op, dtype, opinfo_results):
    results = oc.check_op(op, dtype, SAMPLES)
    opinfo_results.extend(results)
    failures = [r for r in results if r.status in oc.FAILURES]
    key = (oc.opinfo_name(op), str(dtype).removeprefix("torch."))
    if key in KNOWN_FAILURES:
        stage, text = KNOWN_FAILURES[key]
        assert failures, f"{key} passes now: remove it from KNOWN_FAILURES"
        assert failures[0].status == stage and text in failures[0].detail, f"{key} fails differently: {failures[0]}"
        pytest.xfail(f"{stage}: {failures[0].detail}")
    assert not failures, "\n".join(f"sample {r.index}: {r.status}: {r.detail}" for r in failures)
    if not any(r.status == oc.PASS for r in results):
        pytest.skip("; ".join(sorted({f"{r.status}: {r.detail}" for r in results})) or "no samples")


def test_core_aten_table_maps_ops_to_out_variants():
    rows = {r.name: r for r in oc.core_aten_ops()}
    assert len(rows) >= 180
    assert rows["aten::add.Tensor"].out_variant == "aten::add.out" and rows["aten::add.Tensor"].kernel
    assert rows["aten::view"].out_variant == "aten::view_copy.out"
    assert rows["aten::sym_size.int"].out_variant is None
