# found: bench/fuzz.py --differential --seed 1, case 197 (shrunk from 6 steps)
# contender: edgetorch+xnnpack on edgetorch runtime (and on executorch runtime: the lowering failed)
# status: error at lower: AssertionError: Expected output node, got op=call_function
# fixed: exir/backend/backend_api.py puts the output node back last after legalize_graph sorted a dead node (the unused round) after it
import torch


class Fuzzed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1000200)

    def forward(self, x0):
        v1 = x0.clamp(-100, 100).round().to(torch.int32)  # noqa: F841  (the dead value is the point)
        v2 = torch.nn.functional.hardsigmoid(x0)
        return (v2,)


def make_inputs(seed=1000200, batch=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn((1,), generator=g),)


def factory():
    return Fuzzed(), make_inputs(), None
