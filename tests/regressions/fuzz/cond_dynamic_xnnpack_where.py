# found: bench/fuzz.py --differential --seed 1, case 5 (shrunk from 7 steps)
# contender: edgetorch+xnnpack on edgetorch runtime
# status: refused at run: ExecutionError at aten::where.self_out: shapes (2,) and (8,) do not broadcast
# also: ExecuTorch's own XNNPACK program of this module fails the same way on edgetorch's runtime; both programs run right on ExecuTorch's
# fixed: runtime/plan_analysis.py delegate_outputs counts a MoveCall's destination (the cond's result) as produced, so the delegate reads it at its run size, not its planned upper bound
import torch


class Fuzzed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1000008)

    def forward(self, x0):
        v1 = torch.cond(x0.sum() > 0, lambda t: t.abs() + 1, lambda t: torch.relu(t) - 0.5, (x0,))
        v2 = torch.nn.functional.softplus(v1)
        return (v2,)


def make_inputs(seed=1000008, batch=2):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn((batch,), generator=g),)


def factory():
    batch = torch.export.Dim("batch", min=2, max=8)
    return Fuzzed(), make_inputs(), ({0: batch},)
