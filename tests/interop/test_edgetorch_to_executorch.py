"""Programs written by edgetorch's compiler run on the real ExecuTorch 1.5.1 runtime and on edgetorch's, matching eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime
from tests.interop.models import MODELS, Counter, KVCache
from tests.oracle import assert_close, eager, run_executorch, run_executorch_calls


def _lower(model, args, dynamic=None) -> bytes:
    return to_edge(torch.export.export(model, args, dynamic_shapes=dynamic)).to_executorch().buffer


def _numpy(args):
    return [a.numpy() if isinstance(a, torch.Tensor) else a for a in args]


# Outputs where ExecuTorch 1.5.1's portable kernels themselves differ from eager, so only
# edgetorch's runtime is compared there: remainder.Scalar_out on negative integers
# follows C's fmod sign rule (-5 % 3 gives -2; torch gives 1), in ET's own programs too.
EXECUTORCH_KERNEL_BUGS = {"elementwise": {3}}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_on_both_runtimes(name):
    factory, make_args, dynamic = MODELS[name]
    model, args = factory().eval(), make_args()
    pte = _lower(model, args, dynamic)
    want = eager(model, args)
    skip = EXECUTORCH_KERNEL_BUGS.get(name, set())
    et_out = run_executorch(pte, _numpy(args))
    keep = [k for k in range(len(want)) if k not in skip]
    assert_close([et_out[k] for k in keep], [want[k] for k in keep], rtol=1e-4, atol=1e-4)
    assert_close(
        Runtime.get().load_program(pte).load_method("forward").execute(_numpy(args)), want, rtol=1e-4, atol=1e-4
    )


def test_dynamic_batch_on_both_runtimes():
    factory, make_args, dynamic = MODELS["dynamic_mlp"]
    model = factory().eval()
    pte = _lower(model, make_args(), dynamic)
    ours = Runtime.get().load_program(pte).load_method("forward")
    for batch in (1, 7, 16):
        x = torch.randn(batch, 8)
        want = eager(model, (x,))
        assert_close(run_executorch(pte, [x.numpy()]), want)
        assert_close(ours.execute([x.numpy()]), want)


def test_buffer_state_persists_on_both_runtimes():
    pte = _lower(Counter(), (torch.ones(2),))
    theirs = run_executorch_calls(pte, [[np.ones(2, np.float32)]] * 3)
    ours = Runtime.get().load_program(pte).load_method("forward")
    for step in (1, 2, 3):
        np.testing.assert_array_equal(theirs[step - 1][0], [step, step])
        np.testing.assert_array_equal(ours.execute([np.ones(2, np.float32)])[0], [step, step])


def test_kv_cache_on_both_runtimes():
    pte = _lower(KVCache(), (torch.tensor([0]), torch.ones(1, 4)))
    reference = KVCache()
    ours = Runtime.get().load_program(pte).load_method("forward")
    calls = [[np.array([pos]), np.full((1, 4), float(pos), np.float32)] for pos in (2, 6, 2)]
    theirs = run_executorch_calls(pte, calls)
    for call, et_out in zip(calls, theirs):
        want = eager(reference, tuple(torch.from_numpy(x) for x in call))
        assert_close([et_out[0]], want)
        assert_close(ours.execute(call), want)


def test_forward_argument_named_input():
    # torch modules such as nn.Hardswish name their argument ``input``; lowering renames the placeholder
    # and must keep the signature and the lifted scalar constants consistent.
    model, x = torch.nn.Hardswish(), torch.randn(3, 4)
    pte = _lower(model, (x,))
    want = eager(model, (x,))
    assert_close(run_executorch(pte, [x.numpy()]), want)
    assert_close(Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()]), want)
