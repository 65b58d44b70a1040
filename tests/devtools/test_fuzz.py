"""Differential fuzzing (edgetorch.devtools.fuzz, ``edgetorch fuzz``): the generator is reproducible and broad,
a planted divergence is found and shrunk to the one operator that causes it, refusals are judged against the
reference, and the command reports the first finding."""

from __future__ import annotations

import collections
import textwrap

import numpy as np
import pytest
import torch

from edgetorch.cli import main
from edgetorch.devtools.fuzz import case_subject, check, fuzz, generate, shrink, source
from edgetorch.devtools.fuzz.generator import Case, Step, build, render
from edgetorch.devtools.fuzz.harness import (
    EDGETORCH,
    EDGETORCH_RUNTIME,
    ERROR,
    MISMATCH,
    REFUSED,
    SHARED,
    Contender,
    Lowering,
    Runner,
)
from edgetorch.errors import UnsupportedOperatorError
from edgetorch.runtime import Runtime
from edgetorch.runtime.kernels.registry import KERNELS


def test_a_case_is_reproduced_from_seed_and_index():
    cases = [generate(5, i) for i in range(40)]
    assert cases == [generate(5, i) for i in range(40)]
    assert [source(c) for c in cases] == [source(generate(5, i)) for i in range(40)]
    assert len({source(c) for c in cases}) == len(cases)
    assert generate(6, 0) != cases[0]


def test_generated_modules_run_eagerly_and_cover_the_features():
    seen: collections.Counter = collections.Counter()
    for i in range(60):
        case = generate(0, i)
        module, args, dynamic = build(case)["factory"]()
        if not any(s.op == "cond" for s in case.steps):  # eager torch.cond compiles its branches: slow
            with torch.no_grad():
                module(*args)
        seen.update(s.op for s in case.steps)
        seen["dynamic"] += case.dynamic
        seen["int or bool input"] += any(dtype != "float32" for dtype, _ in case.inputs)
        seen["two outputs"] += len(render(case).outputs) > 1
    for feature in ("dynamic", "buffer", "cond", "int or bool input", "two outputs", "linear", "conv2d", "where"):
        assert seen[feature] > 0, f"no case with {feature} in 60: {sorted(seen)}"


def _corrupting_runner(operator: str) -> Runner:
    """edgetorch's runtime, made wrong on purpose: a program calling ``operator`` gets 1 added to its outputs."""

    def run(pte: bytes, calls: list) -> list:
        outputs = EDGETORCH_RUNTIME.run(pte, calls)
        if operator in Runtime.get().load_program(pte).operators("forward"):
            outputs = [[o + 1 if o.is_floating_point() else o for o in call] for call in outputs]
        return outputs

    return Runner("wrong runtime", run)


PLANTED = Case(
    seed=7,
    base=(3, 6),
    inputs=(("float32", (False, False)), ("float32", (False, True))),
    steps=(Step("linear", (0,), 3), Step("add", (0, 2), 0), Step("tanh", (0,), 0), Step("sum", (0,), 1)),
    outputs=(0,),
)


def test_a_planted_divergence_is_found_and_shrunk_to_its_operator():
    contenders = (Contender(EDGETORCH, _corrupting_runner("aten::tanh.out")),)
    [outcome] = check(case_subject(PLANTED), contenders).findings
    assert outcome.status == MISMATCH and outcome.contender == "edgetorch on wrong runtime"

    def fails(case: Case) -> bool:
        return any(o.signature() == outcome.signature() for o in check(case_subject(case), contenders).findings)

    minimal, calls = shrink(PLANTED, fails, budget=30)
    assert [s.op for s in minimal.steps] == ["tanh"], source(minimal)
    assert len(minimal.inputs) == 1 and minimal.base == (1,), source(minimal)
    assert 0 < calls <= 30
    assert "torch.tanh(x0)" in source(minimal)
    # The printed source is a FILE.py:factory: it runs as it reads.
    module, args, _ = build(minimal)["factory"]()
    assert torch.equal(module(*args)[0], torch.tanh(args[0]))


def _lowering(name: str, error: Exception | None, reference: bool = False) -> Lowering:
    def lower(ep):
        if error is not None:
            raise error
        return EDGETORCH.lower(ep)

    return Lowering(name, "portable", lower, reference)


def test_a_refusal_the_reference_shares_is_no_finding_and_an_untyped_error_is_one():
    subject = case_subject(PLANTED.with_(steps=PLANTED.steps[:1]))
    ours = Contender(_lowering("ours", UnsupportedOperatorError("no kernel")), EDGETORCH_RUNTIME)
    their_runtime = Runner("their runtime", EDGETORCH_RUNTIME.run, reference=True)
    theirs_refuses = Contender(_lowering("theirs", RuntimeError("unsupported"), reference=True), their_runtime)
    theirs_lowers = Contender(_lowering("theirs", None, reference=True), their_runtime)
    statuses = [o.status for o in check(subject, (ours, theirs_refuses)).outcomes]
    assert statuses == [SHARED, REFUSED] and not check(subject, (ours, theirs_refuses)).findings
    assert [o.status for o in check(subject, (ours, theirs_lowers)).findings] == [REFUSED]
    untyped = Contender(_lowering("ours", KeyError("oops")), EDGETORCH_RUNTIME)
    [finding] = check(subject, (untyped,)).findings
    assert finding.status == ERROR and "KeyError" in finding.detail


def test_a_lazy_reference_runs_only_to_judge_a_failure():
    """The cheaper campaign (``rotate``): ExecuTorch's pair runs only when another contender failed on its
    backend, and still turns a refusal it shares into no finding."""
    subject = case_subject(PLANTED.with_(steps=PLANTED.steps[:1]))
    calls = collections.Counter()

    def counted(name: str, error: Exception | None) -> Lowering:
        inner = _lowering(name, error, reference=True).lower

        def lower(ep):
            calls[name] += 1
            return inner(ep)

        return Lowering(name, "portable", lower, reference=True)

    their_runtime = Runner("their runtime", EDGETORCH_RUNTIME.run, reference=True)
    theirs = Contender(counted("theirs", RuntimeError("unsupported")), their_runtime)
    good = Contender(EDGETORCH, EDGETORCH_RUNTIME)
    report = check(subject, (good, theirs), lazy_reference=True)
    assert [o.contender for o in report.outcomes] == [good.name] and not calls  # all agree: no reference
    refuses = Contender(_lowering("ours", UnsupportedOperatorError("no kernel")), EDGETORCH_RUNTIME)
    report = check(subject, (refuses, theirs), lazy_reference=True)
    assert [o.status for o in report.outcomes] == [SHARED, REFUSED] and calls["theirs"] == 1


def test_rotation_takes_turns_and_keeps_the_references():
    from edgetorch.devtools.fuzz import rotation

    players = [Contender(_lowering(f"c{i}", None), EDGETORCH_RUNTIME) for i in range(6)]
    judge = Contender(_lowering("theirs", None, reference=True), Runner("r", EDGETORCH_RUNTIME.run, reference=True))
    every = (*players, judge)
    turns = [rotation(every, 2, i) for i in range(3)]
    assert all(t[-1] is judge and len(t) == 3 for t in turns)
    assert sorted(c.name for t in turns for c in t[:2]) == sorted(c.name for c in players)  # each once in 3 cases


WRONG_OP = """
import numpy as np
import torch

from edgetorch.runtime import register_kernel


@torch.library.custom_op("fuzz_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


torch.library.define("fuzz_test::twice.out", "(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")


@torch.library.impl("fuzz_test::twice.out", "CompositeExplicitAutograd")
def _(x, out):
    return out.copy_(x * 2)


def wrong_twice(x, out):  # deliberately wrong: three times, not two
    return np.multiply(x, 3, out=out)


register_kernel("fuzz_test::twice.out", wrong_twice)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.ops.fuzz_test.twice(torch.relu(x) + 1).sum(-1)


def factory():
    return Model(), (torch.ones(2, 4),)
"""


def test_cli_reports_the_first_divergence_of_a_factory(tmp_path, capsys):
    path = tmp_path / "wrong_op.py"
    path.write_text(textwrap.dedent(WRONG_OP))
    try:
        code = main(["fuzz", f"{path}:factory", "--cases", "3", "--backend", "portable", "--quiet"])
    finally:
        KERNELS.pop("fuzz_test::twice.out", None)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "1 cases (seed 0)" in out and "finding in case 0: edgetorch on edgetorch runtime: mismatch" in out
    assert "first divergence: instruction" in out and "fuzz_test.twice" in out


def test_cli_on_generated_cases_that_agree(capsys):
    assert main(["fuzz", "--cases", "2", "--seed", "1", "--backend", "portable", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "2 cases (seed 1)" in out and "2 agree with eager" in out


def test_cli_refuses_a_factory_that_returns_no_module(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_text("def factory(index):\n    return 42\n")
    assert main(["fuzz", f"{path}:factory", "--cases", "1"]) == 1
    assert "FACTORY must return (module, example_args)" in capsys.readouterr().err


@pytest.mark.parametrize("index", [0, 1])
def test_factory_cases_run_new_inputs_of_the_same_shapes(index):
    from edgetorch.devtools.fuzz import factory_subjects

    subject = factory_subjects(lambda: (torch.nn.ReLU(), (torch.ones(2, 3), torch.arange(4))), seed=0)(index)
    assert [tuple(x.shape) for x in subject.calls[1]] == [(2, 3), (4,)]
    assert subject.calls[1][1].dtype == torch.int64 and not torch.equal(subject.calls[1][0], torch.ones(2, 3))
    assert torch.equal(subject.calls[0][0], torch.ones(2, 3)) == (index == 0)
    assert np.all((subject.calls[1][1].numpy() >= 0) & (subject.calls[1][1].numpy() <= 3))


def test_fuzz_stops_at_the_first_finding():
    contenders = (Contender(_lowering("ours", UnsupportedOperatorError("no kernel")), EDGETORCH_RUNTIME),)
    campaign = fuzz(5, seed=0, contenders=contenders, shrink_budget=2)
    assert campaign.cases == 1 and len(campaign.findings) == 1
    assert campaign.findings[0].minimal is not None and campaign.findings[0].shrink_calls == 2
