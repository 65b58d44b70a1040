"""What takes the space in a lowered model: its constant tensors and its delegate blobs.

``generate_model_size_information(model)`` walks an ``ExportedProgram`` (lifted parameters and buffers,
``get_attr`` constants, nested graph modules) and returns a JSON-ready dict: ``tensor_data`` (one record
per tensor: name, numel, dtype, element_size, shape, num_bytes, nn_module_stack), ``delegate_blob_data``
(one per lowered module: name, backend_id, num_bytes, plus whatever a ``delegate_deserializers[backend_id]``
callable reads from the blob), each sorted largest first, and an ``overview`` of the totals (with the
program's size and what is neither tensor nor blob when the ``.pte`` bytes are given). As a command it does
this for every graph of an ETRecord. May import torch.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import torch

from edgetorch.exir.backend.lowered_backend_module import LoweredBackendModule

__all__ = ["generate_model_size_information", "main"]

DelegateDeserializers = dict[str, Callable[[bytes], dict[str, Any]]]


def _tensor_record(node: torch.fx.Node, tensor: torch.Tensor) -> dict[str, Any]:
    stack = node.meta.get("nn_module_stack")
    return {
        "name": node.name,
        "numel": tensor.numel(),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "element_size": tensor.element_size(),
        "shape": list(tensor.shape),
        "num_bytes": tensor.numel() * tensor.element_size(),
        "nn_module_stack": None if stack is None else str(stack),
    }


def _blob_record(
    node: torch.fx.Node, lowered: LoweredBackendModule, deserializers: DelegateDeserializers | None
) -> dict[str, Any]:
    blob = bytes(lowered.processed_bytes)
    record: dict[str, Any] = {"name": node.name, "backend_id": lowered.backend_id, "num_bytes": len(blob)}
    reader = (deserializers or {}).get(lowered.backend_id)
    if reader is not None:
        record.update(reader(blob))
    return record


def _walk(
    graph_module: torch.fx.GraphModule,
    deserializers: DelegateDeserializers | None,
    tensors: list[dict[str, Any]],
    blobs: list[dict[str, Any]],
    program: Any = None,
) -> None:
    signature = getattr(program, "graph_signature", None)
    lifted: dict[str, str] = {}
    if signature is not None:
        lifted.update(getattr(signature, "inputs_to_parameters", {}) or {})
        lifted.update(getattr(signature, "inputs_to_buffers", {}) or {})
    for node in graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in lifted:
            tensor = program.state_dict.get(lifted[node.name])
            if isinstance(tensor, torch.Tensor):
                tensors.append(_tensor_record(node, tensor))
        elif node.op == "get_attr":
            value = getattr(node.graph.owning_module, node.target)
            if isinstance(value, LoweredBackendModule):
                blobs.append(_blob_record(node, value, deserializers))
            elif isinstance(value, torch.fx.GraphModule):
                _walk(value, deserializers, tensors, blobs)
            elif isinstance(value, torch.Tensor):
                tensors.append(_tensor_record(node, value))


def generate_model_size_information(
    model: Any, delegate_deserializers: DelegateDeserializers | None = None, flatbuffer: bytes | None = None
) -> dict[str, Any]:
    """The size records of ``model`` (an ``ExportedProgram``); ``flatbuffer``: its ``.pte`` bytes, for the
    overview's ``model_size`` and ``serialization_metadata_size``."""
    tensors: list[dict[str, Any]] = []
    blobs: list[dict[str, Any]] = []
    _walk(model.graph_module, delegate_deserializers, tensors, blobs, model)
    tensors.sort(key=lambda r: r["num_bytes"], reverse=True)
    blobs.sort(key=lambda r: r["num_bytes"], reverse=True)
    tensor_bytes = sum(r["num_bytes"] for r in tensors)
    blob_bytes = sum(r["num_bytes"] for r in blobs)
    overview: dict[str, int] = {"total_tensor_data_size": tensor_bytes, "total_delegate_blob_data_size": blob_bytes}
    if flatbuffer is not None:
        overview["serialization_metadata_size"] = len(flatbuffer) - tensor_bytes - blob_bytes
        overview["model_size"] = len(flatbuffer)
    return {"tensor_data": tensors, "delegate_blob_data": blobs, "overview": overview}


def main(argv: list[str] | None = None) -> None:
    """``--etrecord_path`` in, ``--output_path`` (JSON: one record per graph of the ETRecord) out."""
    from edgetorch.devtools import parse_etrecord

    parser = argparse.ArgumentParser(description="Size information of each graph of an ETRecord, as JSON")
    parser.add_argument("--etrecord_path", required=True, help="the ETRecord of the model")
    parser.add_argument("--output_path", default="model_size_information.json", help="where to write the JSON")
    args = parser.parse_args(argv)
    etrecord = parse_etrecord(args.etrecord_path)
    records = [generate_model_size_information(program) for program in etrecord.graph_map.values()]
    with open(args.output_path, "w", encoding="utf-8") as f:
        json.dump(records, f)


if __name__ == "__main__":
    main()
