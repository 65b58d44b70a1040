"""Programs written by the real ExecuTorch 1.5.1 run on the edgetorch runtime and match PyTorch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.runtime import Runtime
from tests.interop.models import MODELS, Counter, KVCache
from tests.oracle import assert_close, eager, executorch_pte


def _numpy(args):
    return [a.numpy() if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_eager(name):
    factory, make_args, dynamic = MODELS[name]
    model, args = factory().eval(), make_args()
    pte = executorch_pte(model, args, dynamic_shapes=dynamic)
    method = Runtime.get().load_program(pte).load_method("forward")
    assert_close(method.execute(_numpy(args)), eager(model, args), rtol=1e-4, atol=1e-4)


def test_dynamic_batch_several_sizes():
    factory, make_args, dynamic = MODELS["dynamic_mlp"]
    model = factory().eval()
    method = (
        Runtime.get().load_program(executorch_pte(model, make_args(), dynamic_shapes=dynamic)).load_method("forward")
    )
    for batch in (1, 3, 16, 5):
        x = torch.randn(batch, 8)
        assert_close(method.execute([x.numpy()]), eager(model, (x,)))


def test_stateful_counter_three_calls():
    pte = executorch_pte(Counter(), (torch.ones(2),))
    method = Runtime.get().load_program(pte).load_method("forward")
    for step in (1, 2, 3):
        np.testing.assert_array_equal(method.execute([np.ones(2, np.float32)])[0], [step, step])


def test_kv_cache_index_copy():
    model = KVCache()
    pte = executorch_pte(KVCache(), (torch.tensor([0]), torch.ones(1, 4)))
    method = Runtime.get().load_program(pte).load_method("forward")
    for pos in (0, 3, 5):
        val = torch.full((1, 4), float(pos + 1))
        want = eager(model, (torch.tensor([pos]), val))
        assert_close(method.execute([np.array([pos]), val.numpy()]), want)


def test_two_methods():
    from executorch.exir import to_edge

    class A(torch.nn.Module):
        def forward(self, x):
            return x + 1

    class B(torch.nn.Module):
        def forward(self, x, y):
            return x * y, x - y

    x = torch.randn(3)
    eps = {
        "forward": torch.export.export(A(), (x,)),
        "combine": torch.export.export(B(), (x, x)),
    }
    pte = to_edge(eps).to_executorch().buffer
    program = Runtime.get().load_program(pte)
    assert sorted(program.method_names) == ["combine", "forward"]
    assert_close(program.load_method("forward").execute([x.numpy()]), [(x + 1).numpy()])
    got = program.load_method("combine").execute([x.numpy(), x.numpy()])
    assert_close(got, [(x * x).numpy(), (x - x).numpy()])
