"""Failures while a method runs: a runaway loop is stopped in traced and untraced runs alike."""

from __future__ import annotations

import signal

import numpy as np
import pytest
import torch

from edgetorch.errors import ExecutionError
from edgetorch.format import program as fbp
from edgetorch.runtime import EventTracer, Runtime
from edgetorch.runtime import executor as executor_module
from tests.runtime.edit_program import add_value, edgetorch_pte, patched


class AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


def _loop_forever(program: fbp.Program) -> None:
    """After the method's kernels, jump back to instruction 0 unconditionally (a condition that is always False)."""
    plan = program.execution_plan[0]
    never = add_value(plan, fbp.Bool(False))
    plan.chains[0].instructions.append(fbp.Instruction(fbp.JumpFalseCall(never, 0)))


@pytest.fixture
def hang_guard():
    """Fails a test that runs for minutes (a regression to an endless loop) instead of hanging the suite."""

    def expire(signum, frame):
        raise AssertionError("the run did not stop: the step cap is not enforced")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_a_runaway_loop_is_stopped(traced, monkeypatch):
    monkeypatch.setattr(executor_module, "MAX_STEPS_PER_RUN", 1000)
    data = patched(edgetorch_pte(AddOne(), (torch.randn(4),)), _loop_forever)
    method = Runtime().load_program(data).load_method("forward")
    tracer = EventTracer()
    if traced:
        method.set_event_tracer(tracer)
    with pytest.raises(ExecutionError, match="ran more than 1000 instructions"):
        method.execute([np.zeros(4, np.float32)])
    assert len(tracer.events) > 1000 if traced else not tracer.events
