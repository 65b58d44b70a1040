"""A damaged ETRecord is an ETRecordError (typed), whatever part of the zip the damage hits."""

from __future__ import annotations

import io

import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.exir.etrecord import ETRecordError, generate_etrecord, parse_etrecord


@pytest.fixture(scope="module")
def etrecord_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("etrecord") / "etrecord.bin"
    edge = to_edge(torch.export.export(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),)))
    generate_etrecord(path, edge, edge.to_executorch())
    return path.read_bytes()


def test_the_intact_record_parses(etrecord_bytes):
    assert parse_etrecord(io.BytesIO(etrecord_bytes)).edge_dialect_program is not None


@pytest.mark.parametrize("where", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_a_damaged_record_is_a_typed_error(etrecord_bytes, where):
    data = bytearray(etrecord_bytes)
    at = int(len(data) * where)
    data[at : at + 16] = b"\xff" * 16
    try:
        parse_etrecord(io.BytesIO(bytes(data)))
    except ETRecordError:
        pass  # the damage was noticed and reported as such (a few bytes of padding may go unnoticed: no error)
