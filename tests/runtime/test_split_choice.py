"""How a call site that may split chooses between its parallel and serial variants (policy.SplitChoice): fed
made-up durations, never timed, so that the decisions are checked exactly."""

from __future__ import annotations

from functools import partial

import pytest

from edgetorch.runtime import policy
from edgetorch.runtime.policy import SplitChoice


def _drive(choice: SplitChoice, serial_ns: int, parallel_ns: int, calls: int) -> list[bool]:
    """``calls`` calls with fixed durations per variant; the variants run, in order."""
    ran = []
    for _ in range(calls):
        p = choice.next_parallel()
        choice.record(p, parallel_ns if p else serial_ns)
        ran.append(p)
    return ran


def _explored(serial_ns: int, parallel_ns: int) -> SplitChoice:
    choice = SplitChoice()
    _drive(choice, serial_ns, parallel_ns, 2 * (SplitChoice.TRIALS + 1))
    assert choice.countdown >= 0, "exploration ends after TRIALS timed calls of each variant"
    return choice


def test_explores_both_variants_in_turn_parallel_first():
    ran = _drive(SplitChoice(), 100, 50, 2 * (SplitChoice.TRIALS + 1))
    assert ran == [True, False] * (SplitChoice.TRIALS + 1)


def test_the_first_call_of_each_variant_is_not_counted():
    """A first call may compile the kernel: a huge first parallel time must not decide."""
    choice = SplitChoice()
    durations = iter([10**9, 1000] + [400, 1000] * SplitChoice.TRIALS)
    for _ in range(2 * (SplitChoice.TRIALS + 1)):
        p = choice.next_parallel()
        choice.record(p, next(durations))
    assert choice.parallel


@pytest.mark.parametrize(
    ("serial_ns", "parallel_ns", "splits"),
    [(1000, 500, True), (1000, 2000, False), (1000, 950, False), (1000, 900, True)],
)
def test_splits_only_where_parallel_wins_by_the_margin(serial_ns, parallel_ns, splits):
    assert _explored(serial_ns, parallel_ns).parallel is splits


def test_stops_splitting_when_the_threads_become_slow():
    """A busy neighbour arrives: the parallel calls' times rise past the serial estimate."""
    choice = _explored(1000, 500)
    ran = _drive(choice, 1000, 5000, 40)
    assert not ran[-1] and ran.count(True) < 10


def test_tries_the_loser_less_often_while_it_keeps_losing():
    choice = _explored(1000, 5000)
    ran = _drive(choice, 1000, 5000, 2000)
    trials = [i for i, p in enumerate(ran) if p]
    gaps = [b - a for a, b in zip(trials, trials[1:])]
    assert gaps == sorted(gaps) and gaps[-1] == SplitChoice.MAX_INTERVAL + 1
    assert len(trials) < 12


def test_splits_again_once_a_trial_finds_the_threads_fast():
    """The neighbour leaves: the next trial of the parallel variant is believed at once."""
    choice = _explored(1000, 5000)
    _drive(choice, 1000, 5000, 100)
    for _ in range(SplitChoice.MAX_INTERVAL + 1):
        if _drive(choice, 1000, 400, 1) == [True]:
            break
    assert choice.parallel and choice.interval == SplitChoice.FIRST_INTERVAL
    assert _drive(choice, 1000, 400, 10) == [True] * 10


def test_one_slow_trial_of_the_loser_does_not_flip_a_choice():
    choice = _explored(1000, 500)  # parallel chosen
    before = choice.estimate[0]
    while not choice.trying:
        p = choice.next_parallel()
        choice.record(p, 500 if p else 1000)
        if choice.next_parallel() is False:
            break
    choice.record(False, 4000)  # the serial trial, slow once
    assert choice.parallel and choice.estimate[0] == (before + 4000) / 2


def _fake_site():
    ran: list[object] = []
    return ran, (lambda: ran.append("serial")), partial(lambda parts: ran.append(parts))


def test_split_runs_both_variants_and_keeps_its_choice_on_the_site(kernel_threads, monkeypatch):
    pytest.importorskip("numba")
    from edgetorch.runtime.kernels import compiled

    monkeypatch.setattr(compiled, "SPLITS", True)
    kernel_threads(2)
    ran, serial, parallel = _fake_site()
    for _ in range(4):
        compiled.split(serial, parallel, 8)
    assert ran == [2, "serial", 2, "serial"]
    assert isinstance(parallel.edgetorch_split, SplitChoice)


def test_split_without_adapting_always_splits(kernel_threads, monkeypatch):
    pytest.importorskip("numba")
    from edgetorch.runtime.kernels import compiled

    monkeypatch.setattr(compiled, "SPLITS", True)
    kernel_threads(2)
    ran, serial, parallel = _fake_site()
    with policy.using(split_adapts=False):
        for _ in range(4):
            compiled.split(serial, parallel, 8)
    assert ran == [2, 2, 2, 2]


def test_one_thread_never_splits(kernel_threads):
    from edgetorch.runtime.kernels import compiled

    kernel_threads(1)
    ran, serial, parallel = _fake_site()
    compiled.split(serial, parallel, 8)
    assert ran == ["serial"]
