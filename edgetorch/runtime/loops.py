"""How many jumps one run of a method may take: the bound that ends a damaged loop in a fraction of a second.

Both emitters (ours and ExecuTorch's) write a loop only for ``torch.map`` and ``torch.scan``: a counter starts
at 0, is compared with ``sym_size`` of the scanned tensor's first dimension after each turn, and a
``JumpFalseCall`` goes back to the loop's top until the two are equal (ExecuTorch emits no ``while_loop``).
A loop therefore turns at most as many times as the largest dimension of the method's tensors (their planned,
upper-bound sizes: no run makes a dimension larger), loops nested ``k`` deep at most that to the power ``k``,
and each jump instruction, inside loops or not, runs at most that often. Every other jump is a ``cond`` branch.
A run that takes more jumps than ``jumps x (largest dimension + 1) ** depth`` is in a loop no emitter wrote (a
damaged condition or counter) and would not end, so the executor stops it there. Counting taken jumps, not
steps, keeps the check off the steps that do not jump.

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgetorch.format import program as fbp

# The most jumps any run takes, whatever its loops allow: a bound on a program whose sizes claim huge dimensions.
MAX_JUMPS_PER_RUN = 50_000_000


@dataclass(frozen=True)
class JumpBudget:
    """The most jumps one run may take, and what it was derived from (for the message that stops a run)."""

    jumps: int  # JumpFalseCall instructions in the method
    depth: int  # the deepest nesting of backward jumps' ranges (loops)
    largest_dim: int  # the largest dimension of any tensor value, at its upper bound
    limit: int

    def exceeded(self, method: str | None, pc: int, dest: int) -> str:
        """The message for a run stopped at the jump from instruction ``pc`` to ``dest``."""
        return (
            f"method {method!r} took more than {self.limit} jumps in one run, the most its loops allow "
            f"({self.jumps} jump instructions, loops nested {self.depth} deep, each turning at most "
            f"{self.largest_dim} times: the largest dimension of its tensors); its last jump went from "
            f"instruction {pc} back to {dest}. A loop whose condition or counter never reaches its end does not "
            "stop: the program is damaged or was not written by an ExecuTorch emitter; re-export it"
        )


def jump_budget(instructions: list[fbp.Instruction], values: list[fbp.EValue]) -> JumpBudget:
    """The jump budget of a method with these instructions and values (see the module's docstring)."""
    jumps = []
    for pc, ins in enumerate(instructions):
        if isinstance(ins.instr_args, fbp.JumpFalseCall):
            jumps.append((pc, ins.instr_args.destination_instruction))
    largest = max((int(s) for v in values if isinstance(v.val, fbp.Tensor) for s in v.val.sizes), default=1)
    largest = max(largest, 1)
    # Nesting depth: the most backward-jump ranges [destination, jump] that hold one instruction (a sweep over
    # where ranges open and close).
    opens: dict[int, int] = {}
    for pc, dest in jumps:
        if 0 <= dest <= pc:
            opens[dest] = opens.get(dest, 0) + 1
            opens[pc + 1] = opens.get(pc + 1, 0) - 1
    depth = open_now = 0
    for at in sorted(opens):
        open_now += opens[at]
        depth = max(depth, open_now)
    limit = min(len(jumps) * (largest + 1) ** depth, MAX_JUMPS_PER_RUN) if jumps else 0
    return JumpBudget(len(jumps), depth, largest, limit)
