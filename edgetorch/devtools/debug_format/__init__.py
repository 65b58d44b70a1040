"""The developer tools' graph description, as ExecuTorch's ``devtools.debug_format``: a program's graph as
value and operator nodes grouped into named subgraphs, for viewers and the Inspector.

:mod:`.base_schema` holds the node and graph records (torch-free); :mod:`.et_schema` builds them from an FX
graph module (imports torch)."""
