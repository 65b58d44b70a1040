"""ExecuTorch's last step at its own path: an emitter's output -> the ``.pte`` and its ``.ptd`` files.

:func:`serialize_for_executorch` writes the program with its inline data moved into segments
(``_program.serialize_pte_binary``) and hands each ``.ptd`` file's contents to a
:class:`~edgetorch.exir._serialize.data_serializer.DataSerializer`. May import edgetorch.exir.
"""

from __future__ import annotations

from typing import Any

from edgetorch.exir._serialize._cord import Cord
from edgetorch.exir._serialize._program import PTEFile, serialize_pte_binary
from edgetorch.exir._serialize.data_serializer import DataPayload, DataSerializer
from edgetorch.exir.named_data_store import NamedDataStore, NamedDataStoreOutput
from edgetorch.exir.tensor_layout import TensorLayout
from edgetorch.format.program import Program, Tensor, TensorDataLocation

__all__ = ["serialize_for_executorch"]


def serialize_for_executorch(
    emitter_output: Any,
    config: Any,
    data_serializer: DataSerializer,
    named_data_store: NamedDataStoreOutput | None = None,
) -> tuple[Cord, dict[str, Cord]]:
    """The ``.pte`` bytes and, by file tag, the ``.ptd`` files of an emitted program.

    ``emitter_output`` is an :class:`~edgetorch.exir.emit.EmitterOutput` (data inline); ``config`` an
    ``ExecutorchBackendConfig`` (its segment, constant and delegate alignments); ``named_data_store`` what
    backends stored by key: its ``.pte`` entries go into the program, its tagged entries into the files, next
    to the constants the emitter kept outside (``external_constant_map``).
    """
    pte_named = None
    if named_data_store is not None and named_data_store.pte_data:
        pte_named = NamedDataStoreOutput(named_data_store.buffers, named_data_store.pte_data, {})
    pte = serialize_pte_binary(
        PTEFile(emitter_output.program, emitter_output.mutable_data, pte_named),
        extract_delegate_segments=config.extract_delegate_segments,
        segment_alignment=config.segment_alignment,
        constant_tensor_alignment=config.constant_tensor_alignment,
        delegate_alignment=config.delegate_alignment,
    )
    files = NamedDataStore()
    layouts = _external_layouts(emitter_output.program)
    for tag, entries in (emitter_output.external_constant_map or {}).items():
        for fqn, index in entries.items():
            files.add_named_data(
                fqn, emitter_output.external_constant_buffer[index], external_tag=tag, tensor_layout=layouts.get(fqn)
            )
    tags = dict.fromkeys(emitter_output.external_constant_map or {})
    if named_data_store is not None:
        files.merge_named_data_store(NamedDataStoreOutput(named_data_store.buffers, {}, named_data_store.external_data))
        tags.update(dict.fromkeys(named_data_store.external_data))
    out = files.get_named_data_store_output()
    ptd = {
        tag: data_serializer.serialize(DataPayload(buffers=out.buffers, named_data=out.external_data.get(tag, {})))
        for tag in tags
    }
    return Cord(pte), ptd


def _external_layouts(program: Program) -> dict[str, TensorLayout]:
    """fqn -> layout of every tensor the program reads from a ``.ptd`` file."""
    layouts: dict[str, TensorLayout] = {}
    for plan in program.execution_plan:
        for value in plan.values:
            tensor = value.val
            info = tensor.extra_tensor_info if isinstance(tensor, Tensor) else None
            if info is not None and info.fully_qualified_name and info.location == TensorDataLocation.EXTERNAL:
                layouts[info.fully_qualified_name] = TensorLayout(tensor.scalar_type, tensor.sizes, tensor.dim_order)
    return layouts
