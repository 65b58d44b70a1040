"""``save_pte_program``: write a lowered program to ``<name>.pte``, as ExecuTorch's export_util does.

May import torch (through the program manager it is given).
"""

from __future__ import annotations

import os
from typing import Any


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
