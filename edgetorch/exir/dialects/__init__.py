"""The Edge dialect: ``exir_ops.edge.<namespace>.<op>.<overload>``."""

from edgetorch.exir.dialects._ops import EdgeOpOverload, exir_ops, to_aten

__all__ = ["EdgeOpOverload", "exir_ops", "to_aten"]
