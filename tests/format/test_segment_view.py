"""``SegmentView``: a segment that is a byte range of an earlier one, listed in the table and written once."""

from __future__ import annotations

import pytest

from edgetorch.format.program import Program
from edgetorch.format.pte import SegmentView, load_pte, save_pte


def _program() -> Program:
    return Program(version=0, execution_plan=[], constant_buffer=[], backend_delegate_data=[], segments=[])


def test_a_view_reads_the_range_of_its_segment_and_adds_no_bytes():
    stored = bytes(range(200))
    with_view = save_pte(_program(), [stored, SegmentView(0, 32, 100), b"tail"])
    without = save_pte(_program(), [stored, b"tail"])
    pte = load_pte(with_view)
    assert bytes(pte.segment(1)) == stored[32:132]
    assert bytes(pte.segment(2)) == b"tail"
    # Only the table entry is new: the segment data is the same bytes in the same places.
    plain = load_pte(without).header
    assert with_view[pte.header.segment_base_offset :] == without[plain.segment_base_offset :]
    assert pte.header.segment_data_size == plain.segment_data_size


@pytest.mark.parametrize(
    "view, match",
    [(SegmentView(1, 0, 1), "earlier stored segment"), (SegmentView(0, 150, 100), "outside segment 0")],
)
def test_a_view_outside_its_segment_is_refused(view, match):
    with pytest.raises(ValueError, match=match):
        save_pte(_program(), [bytes(200), view])
