"""Consumer backoff (go-nsq's state machine) and reconnect delays, without timers."""

from __future__ import annotations

import random

import pytest

from nsqpy.client.backoff import ConsumerBackoff, ReconnectBackoff, Signal, Step, exponential

pytestmark = pytest.mark.timeout(30)


def test_exponential_durations():
    assert [exponential(n, 1.0) for n in range(1, 5)] == [2.0, 4.0, 8.0, 16.0]
    assert exponential(3, 0.5) == 4.0


def test_failure_enters_backoff_and_signals_are_ignored_during_the_timer():
    b = ConsumerBackoff(multiplier=1.0, max_duration=120.0)
    assert b.signal(Signal.SUCCESS) is Step.NONE
    assert b.signal(Signal.FAILURE) is Step.BACKOFF
    assert (b.level, b.last_duration, b.in_timeout) == (1, 2.0, True)
    # messages already in flight finish or fail while the timer runs: they do not count
    for sig in (Signal.FAILURE, Signal.FAILURE, Signal.SUCCESS):
        assert b.signal(sig) is Step.NONE
    assert b.level == 1
    b.timeout_expired()
    assert b.signal(Signal.FAILURE) is Step.BACKOFF
    assert (b.level, b.last_duration) == (2, 4.0)
    b.timeout_expired()
    # a success steps down one level and backs off again (shorter) until level 0
    assert b.signal(Signal.SUCCESS) is Step.BACKOFF
    assert (b.level, b.last_duration) == (1, 2.0)
    b.timeout_expired()
    assert b.signal(Signal.SUCCESS) is Step.RESUME
    assert b.level == 0 and not b.active


def test_continue_keeps_level_but_backs_off_again():
    b = ConsumerBackoff()
    b.signal(Signal.FAILURE)
    b.timeout_expired()
    assert b.signal(Signal.CONTINUE) is Step.BACKOFF
    assert b.level == 1
    b.timeout_expired()
    b.signal(Signal.SUCCESS)
    assert b.signal(Signal.CONTINUE) is Step.NONE  # at level 0 nothing happens


def test_level_stops_growing_at_max_duration():
    b = ConsumerBackoff(multiplier=1.0, max_duration=10.0)
    for _ in range(20):
        b.signal(Signal.FAILURE)
        b.timeout_expired()
    assert b.level == 3  # 2, 4, 8; 16 > 10
    assert b.last_duration == 8.0
    # recovery takes as many successes as the level
    steps = []
    for _ in range(3):
        steps.append(b.signal(Signal.SUCCESS))
        b.timeout_expired()
    assert steps == [Step.BACKOFF, Step.BACKOFF, Step.RESUME]


def test_zero_max_duration_disables_backoff():
    b = ConsumerBackoff(max_duration=0.0)
    assert b.signal(Signal.FAILURE) is Step.NONE
    assert not b.active


def test_full_jitter_stays_below_exponential():
    b = ConsumerBackoff(multiplier=1.0, max_duration=1000.0, strategy="full_jitter", rng=random.Random(1))
    for level in range(1, 8):
        for _ in range(50):
            assert 0.0 <= b.duration(level) < exponential(level, 1.0)
    with pytest.raises(ValueError):
        ConsumerBackoff(strategy="linear")


def test_reconnect_backoff_doubles_caps_and_resets():
    r = ReconnectBackoff(initial=1.0, maximum=8.0, jitter=0.0)
    assert [r.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    r.reset()
    assert r.next_delay() == 1.0
    j = ReconnectBackoff(initial=1.0, maximum=8.0, jitter=0.25, rng=random.Random(2))
    for _ in range(100):
        j.reset()
        assert 0.75 <= j.next_delay() <= 1.25
