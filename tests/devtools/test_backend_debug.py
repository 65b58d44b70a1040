"""get_delegation_info agrees with ExecuTorch's on edgetorch's and on ExecuTorch's lowered graphs."""

from __future__ import annotations

import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.devtools.backend_debug import get_delegation_info
from edgetorch.exir import to_edge_transform_and_lower
from tests.devtools.models import tinynet


def test_delegation_info_matches_executorch():
    import executorch.exir as et
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner as ETPartitioner
    from executorch.devtools.backend_debug import get_delegation_info as et_info

    model, args = tinynet()
    ours = to_edge_transform_and_lower(torch.export.export(model, args), partitioner=[XnnpackPartitioner()])
    theirs = et.to_edge_transform_and_lower(torch.export.export(model, args), partitioner=[ETPartitioner()])
    for gm in (ours.exported_program().graph_module, theirs.exported_program().graph_module):
        mine, reference = get_delegation_info(gm), et_info(gm)
        assert mine.get_summary() == reference.get_summary()
        assert mine.num_delegated_subgraphs >= 1 and mine.num_delegated_nodes > 0
        df, ref = mine.get_operator_delegation_dataframe(), reference.get_operator_delegation_dataframe()
        assert list(df.columns) == ["op_type", "occurrences_in_delegated_graphs", "occurrences_in_non_delegated_graphs"]
        assert df.values.tolist() == ref.values.tolist() and df.op_type.iloc[-1] == "Total"
