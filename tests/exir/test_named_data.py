"""Named data: the store backends and external constants use, and where ``to_executorch`` puts it.

A backend's ``data_store_output`` entries without a tag go into the ``.pte``'s named data, tagged ones
into ``<tag>.ptd``; the runtime hands both to the backend by key.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import export

from edgetorch.exir import to_edge
from edgetorch.exir._serialize._cord import Cord, FileBackedData
from edgetorch.exir.backend.backend_api import to_backend
from edgetorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.named_data_store import DataEntry, NamedDataStore
from edgetorch.format.program import ScalarType
from edgetorch.format.ptd import TensorLayout, load_ptd
from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime
from edgetorch.runtime.backends import BackendInterface, register_backend


def test_store_keeps_equal_bytes_once_and_refuses_a_key_with_new_bytes():
    store = NamedDataStore()
    store.add_named_data("a", b"12345678", alignment=16)
    store.add_named_data("b", b"12345678", external_tag="weights")
    store.add_named_data("a", b"12345678", alignment=32)
    out = store.get_named_data_store_output()
    assert out.buffers == [b"12345678"]
    assert out.pte_data["a"].alignment == 32
    assert out.external_data == {"weights": {"b": out.external_data["weights"]["b"]}}
    with pytest.raises(ValueError, match="'a' was added twice with different bytes"):
        store.add_named_data("a", b"87654321")
    with pytest.raises(ValueError, match="alignment"):
        store.add_named_data("c", b"x", alignment=0)


def test_tensor_data_carries_its_layout_and_a_strided_view_is_refused():
    store = NamedDataStore()
    weight = torch.arange(24, dtype=torch.float32).reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)
    store.add_named_data("w", weight, 16)
    out = store.get_named_data_store_output()
    assert out.buffers == [bytes(weight.untyped_storage())]
    assert out.pte_data["w"] == DataEntry(0, 16, TensorLayout(ScalarType.FLOAT, [1, 2, 3, 4], [0, 2, 3, 1]))
    with pytest.raises(ValueError, match="layout"):
        store.add_named_data("v", weight, 16, None, TensorLayout(ScalarType.FLOAT, [24], [0]))
    with pytest.raises(ValueError, match="dense"):
        store.add_named_data("t", torch.ones(3, 4).t()[:2], 1)


def test_same_length_and_prefix_but_other_bytes_are_two_buffers():
    store = NamedDataStore()
    first, second = b"A" * 32 + b"x" * 8, b"A" * 32 + b"y" * 8
    for key, blob in (("a", first), ("b", second), ("c", first)):
        store.add_named_data(key, blob)
    assert [store.pte_data[k].buffer_index for k in "abc"] == [0, 1, 0]


def test_externalize_moves_pte_entries_into_capped_files_by_key_order():
    store = NamedDataStore()
    store.add_named_data("b", b"2" * 6, 16)
    store.add_named_data("a", b"1" * 6, 16)
    store.add_named_data("a_alias", b"1" * 6, 32)  # shares a's buffer: counted once
    store.add_named_data("kept", b"3", 1, "mine")
    store.externalize_pte_data(12, "shard")
    out = store.get_named_data_store_output()
    assert out.pte_data == {}
    files = {tag: sorted(entries) for tag, entries in out.external_data.items()}
    assert files.pop("mine") == ["kept"]
    assert sorted(files.values()) == [["a", "a_alias", "b"]]
    store.add_named_data("big", b"4" * 13)
    with pytest.raises(ValueError, match="exceeds external data shard cap"):
        store.externalize_pte_data(12, "shard")
    assert "big" in store.pte_data  # refused as a whole: nothing moved


def test_file_backed_data_is_deduplicated_without_loading_and_removed_on_close(tmp_path):
    for name in ("one", "two"):
        (tmp_path / name).write_bytes(b"file-backed")
    with FileBackedData.move_from(str(tmp_path / "one")) as one, FileBackedData.move_from(str(tmp_path / "two")) as two:
        assert not (tmp_path / "one").exists() and len(one) == 11
        store = NamedDataStore()
        store.add_named_data("x", one, external_tag="model")
        store.add_named_data("y", two, external_tag="model")
        assert store.buffers == [one]
        cord = Cord(b"<")
        cord.append(Cord(one))
        assert bytes(cord) == b"<file-backed" and len(cord) == 12
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(TypeError, match="bytes, FileBackedData or Cords"):
        Cord().append("text")  # type: ignore[arg-type]


def test_merge_keeps_tags_and_layouts():
    layout = TensorLayout(ScalarType.FLOAT, [2], [0])
    first = NamedDataStore()
    first.add_named_data("w", np.ones(2, np.float32).tobytes(), 16, "weights", layout)
    first.add_named_data("blob", b"abc")
    merged = NamedDataStore()
    merged.merge_named_data_store(first.get_named_data_store_output())
    out = merged.get_named_data_store_output()
    assert set(out.pte_data) == {"blob"}
    assert out.external_data["weights"]["w"].tensor_layout == layout


class ScaleByNamedFactor(BackendDetails):
    """Lowers ``x * c`` (``c`` a one-element constant) and keeps ``c`` as named data (tagged when ``TAG`` is set), not in its blob."""

    TAG: str | None = None

    @classmethod
    def preprocess(cls, edge_program, compile_specs):
        (mul,) = [n for n in edge_program.graph.nodes if n.op == "call_function"]
        assert to_aten(mul.target) == torch.ops.aten.mul.Tensor
        sig = edge_program.graph_signature
        fqn = {**sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}[mul.args[1].name]
        factor = {**edge_program.state_dict, **edge_program.constants}[fqn]
        store = NamedDataStore()
        store.add_named_data("factor", factor.to(torch.float32).numpy().tobytes(), 4, cls.TAG)
        return PreprocessResult(b"scale-by-named-factor", data_store_output=store.get_named_data_store_output())


class _ScaleRuntime(BackendInterface):
    def init(self, processed, compile_specs, named_data):
        return float(np.frombuffer(named_data["factor"], np.float32)[0])

    def execute(self, handle, args):
        x, out = args
        np.multiply(x, handle, out=out)


register_backend("ScaleByNamedFactor", _ScaleRuntime())


class _Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2.5


@pytest.mark.parametrize("tag", [None, "weights"])
def test_backend_named_data_goes_to_the_program_or_a_data_file(tag, monkeypatch):
    monkeypatch.setattr(ScaleByNamedFactor, "TAG", tag)
    x = torch.randn(3)
    edge = to_edge(export(_Scale(), (x,))).exported_program()
    lowered = to_backend("ScaleByNamedFactor", edge, [])
    program = lowered.program()
    from edgetorch.exir import ExecutorchProgramManager

    manager = ExecutorchProgramManager(program)
    keys = [nd.key for nd in load_pte(manager.buffer).program.named_data or []]
    if tag is None:
        assert keys == ["factor"] and manager.data_files == {}
        loaded = Runtime.get().load_program(manager.buffer)
    else:
        assert keys == [] and set(manager.data_files) == {tag}
        assert set(load_ptd(manager.data_files[tag]).named_data()) == {"factor"}
        loaded = Runtime.get().load_program(manager.buffer, data_files=[manager.data_files[tag]])
    (got,) = loaded.load_method("forward").execute([x.numpy()])
    np.testing.assert_allclose(got, (x * 2.5).numpy(), rtol=1e-6)


def test_extended_header_fields_as_read_and_as_written():
    from edgetorch.exir._serialize._program import _ExtendedHeader, _get_extended_header, _program_to_json
    from edgetorch.exir._serialize.padding import aligned_size, padding_required

    header = _ExtendedHeader(program_size=0x1122, segment_base_offset=0x3344, segment_data_size=7)
    data = header.to_bytes()
    assert data[:8] == b"eh00\x20\x00\x00\x00" and len(data) == 32
    short = _ExtendedHeader.from_bytes(b"eh00\x18\x00\x00\x00" + data[8:24] + b"\xff" * 8)
    assert short.is_valid() and (short.length, short.segment_data_size) == (24, 0)
    assert not _ExtendedHeader.from_bytes(b"ABCD" + data[4:]).is_valid()
    with pytest.raises(ValueError, match="needs 32 bytes"):
        _ExtendedHeader.from_bytes(data[:16])
    program = to_edge(export(torch.nn.Linear(2, 2), (torch.ones(1, 2),))).to_executorch()
    found = _get_extended_header(program.buffer)
    assert found is not None and found.program_size < len(program.buffer)
    assert _get_extended_header(b"\x00" * 16) is None
    assert '"val_type": "Tensor"' in _program_to_json(program.executorch_program)
    assert (aligned_size(17, 16), padding_required(32, 16)) == (32, 0)
