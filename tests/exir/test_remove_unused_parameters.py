"""lower_to_edge drops parameters that no node reads (ExecuTorch's remove_unused_parameters_pass): they do not
reach the .pte; read parameters and every buffer (read, mutated or not) stay, as in ExecuTorch."""

from __future__ import annotations

import numpy as np
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime


class Leftovers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(8, 4)
        self.unused = torch.nn.Linear(256, 256)  # 256 KiB of float32 that the graph never reads
        self.register_buffer("stale", torch.ones(1000))
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)  # mutated, never read by another node
        return self.used(x)


def test_unused_state_is_dropped_and_the_rest_is_kept():
    model, x = Leftovers().eval(), torch.randn(2, 8)
    ep = torch.export.export(model, (x,))
    edge = to_edge(ep)
    targets = {spec.target for spec in edge.exported_program().graph_signature.input_specs if spec.target}
    assert {"used.weight", "used.bias", "count", "stale"} <= targets
    assert not targets & {"unused.weight", "unused.bias"}
    assert "unused.weight" in {s.target for s in ep.graph_signature.input_specs}  # the user's program is untouched
    pte = edge.to_executorch().buffer
    assert len(pte) < 64 * 1024
    (got,) = Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-6, atol=1e-6)
