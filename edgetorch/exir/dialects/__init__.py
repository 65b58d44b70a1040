"""The Edge dialect: ``exir_ops.edge.<namespace>.<op>.<overload>``.

Code inside edgetorch imports from here; ``_ops`` keeps its name because ExecuTorch's docs import
``exir.dialects._ops.ops``.
"""

from edgetorch.exir.dialects._ops import EdgeOpOverload, edge_op, exir_ops, to_aten

__all__ = ["EdgeOpOverload", "edge_op", "exir_ops", "to_aten"]
