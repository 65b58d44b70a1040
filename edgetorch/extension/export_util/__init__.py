"""Export helpers, as in ``executorch.extension.export_util``."""
