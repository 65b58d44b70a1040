"""Suite-wide setup.

ExecuTorch and edgetorch both define the ``dim_order_ops`` torch library with the same
schemas; whichever registers first owns it. Importing ExecuTorch's registration first
lets tests use the real ExecuTorch (the format oracle) after edgetorch has lowered a model.
"""

import executorch.exir.passes.dim_order_ops_registry  # noqa: F401
