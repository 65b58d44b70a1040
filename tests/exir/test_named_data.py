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
from edgetorch.exir.backend.backend_api import to_backend
from edgetorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.named_data_store import NamedDataStore
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
