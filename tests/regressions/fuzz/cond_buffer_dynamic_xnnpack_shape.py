# found: bench/fuzz.py --differential --seed 1, case 13 (shrunk from 6 steps)
# contender: edgetorch+xnnpack on edgetorch runtime
# status: mismatch: the output has shape (8,) (the batch's upper bound), eager (2,)
# also: the same program runs right on ExecuTorch's runtime; portable lowering runs right on edgetorch's
# fixed: runtime/plan_analysis.py delegate_outputs counts a MoveCall's destination (the cond's result) as produced, so the delegate reads it at its run size, not its planned upper bound
import torch


class Fuzzed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1000016)
        self.register_buffer("state2", torch.ones(1))

    def forward(self, x0):
        v1 = torch.cond(x0.sum() > 0, lambda t: torch.relu(t) - 0.5, lambda t: t.abs() + 1, (x0,))
        self.state2.mul_(2.0).add_(v1.mean())
        v3 = v1 - self.state2
        return (v3,)


def make_inputs(seed=1000016, batch=2):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn((batch,), generator=g),)


def factory():
    batch = torch.export.Dim("batch", min=2, max=8)
    return Fuzzed(), make_inputs(), ({0: batch},)
