"""ExecuTorch's export helpers (``executorch.extension.export_util.utils``): ``export_to_edge``,
``export_to_exec_prog`` and ``save_pte_program``. May import torch (``save_pte_program`` only through the
program manager it is given)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["export_to_edge", "export_to_exec_prog", "save_pte_program"]


def _default_edge_config() -> Any:
    from edgetorch.exir import EdgeCompileConfig

    # The dim-order ops stay out, as ExecuTorch's helpers choose for their iOS users.
    return EdgeCompileConfig(_check_ir_validity=True, _skip_dim_order=True)


def export_to_edge(
    model: Any,
    example_inputs: tuple,
    *,
    example_kwarg_inputs: Mapping[str, Any] | None = None,
    dynamic_shapes: Any = None,
    edge_constant_methods: Mapping[str, Any] | None = None,
    edge_compile_config: Any = None,
    strict: bool = True,
    verbose: bool = True,
    generate_etrecord: bool = False,
) -> Any:
    """``torch.export`` ``model`` on ``example_inputs``, then ``to_edge``; returns the EdgeProgramManager.

    ``edge_compile_config`` defaults to an IR-checked config without dim-order ops; ``verbose`` logs the
    graphs at INFO level.
    """
    import logging

    import torch

    from edgetorch.exir import to_edge

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be an nn.Module or GraphModule; found {type(model).__name__}")
    program = torch.export.export(
        model, tuple(example_inputs), dict(example_kwarg_inputs or {}), dynamic_shapes=dynamic_shapes, strict=strict
    )
    if verbose:
        logging.getLogger(__name__).info("Core ATen graph:\n%s", program.graph)
    edge = to_edge(
        program,
        constant_methods=edge_constant_methods,
        compile_config=edge_compile_config if edge_compile_config is not None else _default_edge_config(),
        generate_etrecord=generate_etrecord,
    )
    if verbose:
        logging.getLogger(__name__).info("Edge graph:\n%s", edge.exported_program().graph)
    return edge


def export_to_exec_prog(
    model: Any,
    example_inputs: tuple,
    *,
    example_kwarg_inputs: Mapping[str, Any] | None = None,
    dynamic_shapes: Any = None,
    edge_constant_methods: Mapping[str, Any] | None = None,
    edge_compile_config: Any = None,
    backend_config: Any = None,
    strict: bool = True,
) -> Any:
    """``model`` (put in eval mode) exported, lowered to Edge and to an ExecutorchProgramManager with
    ``backend_config``."""
    edge = export_to_edge(
        model.eval(),
        example_inputs,
        example_kwarg_inputs=example_kwarg_inputs,
        dynamic_shapes=dynamic_shapes,
        edge_constant_methods=edge_constant_methods,
        edge_compile_config=edge_compile_config,
        strict=strict,
        verbose=False,
    )
    return edge.to_executorch(backend_config)


def save_pte_program(prog: Any, model_name: str, output_dir: str | os.PathLike = "") -> str:
    """Write ``prog`` (an ExecutorchProgramManager) to ``model_name`` if it ends in ``.pte``, else to
    ``output_dir/model_name.pte``, plus any ``.ptd`` files of its external tensors into ``output_dir``.

    Returns the path of the ``.pte`` file.
    """
    filename = model_name if model_name.endswith(".pte") else os.path.join(output_dir, f"{model_name}.pte")
    with open(filename, "wb") as file:
        prog.write_to_file(file)
    write_data = getattr(prog, "write_tensor_data_to_file", None)
    if write_data is not None:
        write_data(os.fspath(output_dir) or ".")
    return filename
