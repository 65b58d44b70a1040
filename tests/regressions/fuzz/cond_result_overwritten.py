# found: bench/fuzz.py --differential --seed 1, case 117 (shrunk from 5 steps)
# contender: edgetorch on edgetorch runtime (and edgetorch on executorch runtime: the program was wrong)
# status: mismatch: v3 == v1 all True; the cond's result (moved in from the branch output) shared bytes with silu's output
# fixed: exir/memory_planning.py keeps each cond branch's output bytes live as long as the cond's result
import torch


class Fuzzed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1000120)

    def forward(self, x0):
        v1 = torch.cond(x0.sum() > 0, lambda t: torch.relu(t) - 0.5, lambda t: torch.relu(t) - 0.5, (x0,))
        v2 = torch.nn.functional.leaky_relu(v1, 0.1)
        v3 = torch.nn.functional.silu(v2)
        v4 = v3 == v1
        return (v4,)


def make_inputs(seed=1000120, batch=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn((1, 1, 2, 4), generator=g),)


def factory():
    return Fuzzed(), make_inputs(), None
