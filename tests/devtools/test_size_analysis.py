"""size_analysis_tool: constant tensors and delegate blobs of a lowered program, sized and sorted."""

from __future__ import annotations

import json

import torch

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from edgetorch.devtools.size_analysis_tool.size_analysis_tool import generate_model_size_information
from edgetorch.exir import to_edge, to_edge_transform_and_lower


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.register_buffer("scale", torch.full((4,), 2.0, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale.float()


def test_portable_program_lists_its_parameters_largest_first() -> None:
    program = to_edge(torch.export.export(_Net(), (torch.ones(2, 8),))).to_executorch()
    info = generate_model_size_information(program.exported_program(), flatbuffer=program.buffer)
    records = {r["numel"]: r for r in info["tensor_data"]}
    assert [r["num_bytes"] for r in info["tensor_data"]] == sorted(
        (r["num_bytes"] for r in info["tensor_data"]), reverse=True
    )
    assert records[32]["shape"] == [4, 8] and records[32]["num_bytes"] == 128
    assert records[4]["dtype"] in ("float32", "float64")
    assert info["delegate_blob_data"] == []
    overview = info["overview"]
    assert overview["total_tensor_data_size"] == sum(r["num_bytes"] for r in info["tensor_data"])
    assert overview["model_size"] == len(program.buffer) > overview["serialization_metadata_size"] > 0
    json.dumps(info)


def test_delegate_blobs_are_counted_and_deserializers_add_fields() -> None:
    lowered = to_edge_transform_and_lower(
        torch.export.export(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()), (torch.ones(2, 8),)),
        partitioner=[XnnpackPartitioner()],
    ).to_executorch()
    seen: list[int] = []
    info = generate_model_size_information(
        lowered.exported_program(), {"XnnpackBackend": lambda blob: seen.append(len(blob)) or {"magic": "read"}}
    )
    (blob,) = info["delegate_blob_data"]
    assert blob["backend_id"] == "XnnpackBackend" and blob["num_bytes"] == seen[0] > 0 and blob["magic"] == "read"
    assert info["overview"]["total_delegate_blob_data_size"] == blob["num_bytes"]
    assert "model_size" not in info["overview"]
