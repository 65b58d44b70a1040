"""How a call site that may split chooses between its parallel and serial variants (policy.SplitChoice): fed
made-up durations, never timed, so that the decisions are checked exactly."""

from __future__ import annotations

from functools import partial

import pytest

from edgetorch.runtime import policy
from edgetorch.runtime.policy import SplitChoice, TrialBudget

_clock = [0]


def _drive(choice: SplitChoice, serial_ns: int, parallel_ns: int, calls: int, gap_ns: int = 10**6) -> list[bool]:
    """``calls`` calls with fixed durations per variant, ``gap_ns`` apart on a made-up clock; the variants run,
    in order."""
    ran = []
    for _ in range(calls):
        _clock[0] += gap_ns
        p = choice.next_parallel(_clock[0])
        took = parallel_ns if p else serial_ns
        _clock[0] += took
        choice.record(p, took, _clock[0])
        ran.append(p)
    return ran


def _explored(serial_ns: int, parallel_ns: int) -> SplitChoice:
    choice = SplitChoice(TrialBudget())
    _drive(choice, serial_ns, parallel_ns, 2 * (SplitChoice.TRIALS + 1))
    assert choice.countdown >= 0, "exploration ends after TRIALS timed calls of each variant"
    return choice


def test_explores_both_variants_in_turn_serial_first():
    ran = _drive(SplitChoice(TrialBudget()), 100, 50, 2 * (SplitChoice.TRIALS + 1))
    assert ran == [False, True] * (SplitChoice.TRIALS + 1)


def test_the_first_call_of_each_variant_is_not_counted():
    """A first call may compile the kernel: a huge first parallel time must not decide."""
    choice = SplitChoice(TrialBudget())
    durations = iter([1000, 10**9] + [1000, 400] * SplitChoice.TRIALS)
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
    ran = _drive(choice, 1000, 5000, 2000, gap_ns=10_000)  # 2,000 calls well within MAX_WAIT_NS
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
    while choice.countdown > 0:
        _drive(choice, 1000, 500, 1)
    assert choice.next_parallel() is False and choice.trying
    choice.record(False, 4000)  # the serial trial, slow once: it counts for at most OUTLIER times the estimate
    assert choice.parallel and choice.estimate[0] == (before + SplitChoice.OUTLIER * before) / 2


def test_one_slow_call_does_not_stop_a_site_from_splitting():
    """A descheduled moment: one parallel call 100 times slower than usual, then the threads are fast again."""
    choice = _explored(1000, 500)
    _drive(choice, 1000, 500, 5)
    _drive(choice, 1000, 50_000, 1)
    assert _drive(choice, 1000, 500, 20) == [True] * 20


def test_a_neighbour_that_stays_stops_the_splitting_within_a_few_calls():
    choice = _explored(1000, 500)
    ran = _drive(choice, 1000, 50_000, 12)
    assert not choice.parallel and ran.count(True) <= 8


def test_a_site_called_seldom_tries_the_loser_again_after_max_wait():
    """A site called once an image or a token: its next trial is due after MAX_WAIT_NS, not after hundreds of
    calls."""
    choice = _explored(1000, 5000)
    _drive(choice, 1000, 5000, 100, gap_ns=10_000)  # the interval has grown
    assert choice.interval > 8
    gap = SplitChoice.MAX_WAIT_NS // 4
    ran = _drive(choice, 1000, 400, 6, gap_ns=gap)  # the neighbour left; calls 1/4 of MAX_WAIT_NS apart
    assert True in ran[:5] and choice.parallel


def test_a_site_that_splits_keeps_splitting_when_called_seldom():
    """A site called once an inference of about MAX_WAIT_NS (GPT-2's layers) whose split wins: no serial trial
    comes due by the clock, so the inferences do not alternate between split and serial."""
    choice = _explored(5000, 1000)  # parallel chosen
    ran = _drive(choice, 5000, 1000, 20, gap_ns=SplitChoice.MAX_WAIT_NS)
    assert ran.count(False) <= 1 and choice.parallel


def test_the_budget_holds_back_parallel_trials_that_lose():
    """A loaded machine: every parallel call loses 1.5 ms. With many sites sharing one budget, the time lost
    in trials stays within the budget's rate of the wall time (plus its burst and one call)."""
    budget = TrialBudget()
    sites = [SplitChoice(budget) for _ in range(200)]
    lost, wall = 0, 0
    for _ in range(50):  # 50 tokens, 200 sites a token
        for site in sites:
            start = _clock[0]
            p = site.next_parallel(start)
            _clock[0] += 1_520_000 if p else 20_000
            site.record(p, _clock[0] - start, _clock[0])
            lost += 1_500_000 if p else 0
            wall += _clock[0] - start
    assert not any(site.parallel for site in sites if site.countdown >= 0)
    assert 0 < lost <= TrialBudget.RATE * wall + TrialBudget.BURST_NS + 1_500_000


def test_the_budget_repays_with_time():
    budget = TrialBudget()
    budget.spend(3_000_000, 10**9)
    assert not budget.allows(10**9)
    assert budget.allows(10**9 + int(2_000_000 / TrialBudget.RATE))


def test_a_winning_trial_costs_nothing():
    budget = TrialBudget()
    budget.spend(-5_000_000, 10**9)
    assert budget.owed == 0 and budget.allows(10**9)


def _fake_site():
    ran: list[object] = []
    return ran, (lambda: ran.append("serial")), partial(lambda parts: ran.append(parts))


def test_split_runs_both_variants_and_keeps_its_choice_on_the_site(kernel_threads, monkeypatch):
    pytest.importorskip("numba")
    from edgetorch.runtime.kernels import compiled

    monkeypatch.setattr(compiled, "SPLITS", True)
    kernel_threads(2)
    ran, serial, parallel = _fake_site()
    with policy.using(split_adapts=True):
        for _ in range(4):
            compiled.split(serial, parallel, 8)
    assert ran == ["serial", 2, "serial", 2]
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
