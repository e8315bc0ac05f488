"""Micro-batching of `nmt serve`: grouping by settings, token budget, waiting, bounds, cancellation.

The waiting rules run on a :class:`ManualClock`: time moves only when a test advances it, and
the test waits until the worker has acted on what it did, so no test depends on how fast a busy
machine runs the worker thread."""

from __future__ import annotations

import threading

import pytest

from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.errors import NmtError
from nmt_cli.serve.batcher import Job, MicroBatcher, QueueFull


class RecordingEngine:
    """Translates a text to itself upper-cased; records each decode call; may wait for a gate."""

    def __init__(self, name: str, calls: list, gate: threading.Event | None = None):
        self.name, self.calls, self.gate = name, calls, gate
        self.entered = threading.Event()

    def translate(self, texts, with_attention=False, token_scores=False):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(60)  # a bound against a hung test, not a timing: every test opens the gate
        self.calls.append((self.name, list(texts)))
        return [Hypothesis(tokens=[], score=0.0, log_prob=0.0, text=text.upper()) for text in texts]


class ManualClock:
    """A :class:`~nmt_cli.serve.batcher.Clock` whose time moves only by :meth:`advance`.

    Its condition never times out by itself: the worker waits until something notifies it (a
    submit, close, or :meth:`advance`). Every notification marks the worker busy; it is marked
    waiting again only when it next waits, after it has looked at the state that notification
    changed. So :meth:`settled` returns once the worker has acted on all the test did, with the
    time it is now waiting for (None: waiting for a job).
    """

    def __init__(self) -> None:
        self.time = 0.0
        self._watch = threading.Condition()  # the test waits here, never on the batcher's condition
        self._waiting = False
        self._timeout: float | None = None
        self._conditions: list[threading.Condition] = []

    def now(self) -> float:
        return self.time

    def condition(self) -> threading.Condition:
        clock = self

        class Manual(threading.Condition):
            def wait(self, timeout: float | None = None) -> bool:
                with clock._watch:
                    clock._waiting, clock._timeout = True, timeout
                    clock._watch.notify_all()
                try:
                    return super().wait()  # this clock's time passes only in advance(), which notifies
                finally:
                    with clock._watch:
                        clock._waiting = False

            def notify(self, n: int = 1) -> None:  # notify_all calls notify
                with clock._watch:
                    clock._waiting = False
                super().notify(n)

        condition = Manual()
        self._conditions.append(condition)
        return condition

    def advance(self, seconds: float) -> None:
        self.time += seconds
        for condition in self._conditions:
            with condition:
                condition.notify_all()

    def settled(self, timeout: float = 60) -> float | None:
        """Wait until the worker waits again; the clock time it waits for (None: for a job)."""
        with self._watch:
            assert self._watch.wait_for(lambda: self._waiting, timeout), "the worker never came back to wait"
            return self._timeout


def texts_of(future) -> list[str]:
    return [hypothesis.text for hypothesis in future.result(60)]


def blocked(batcher: MicroBatcher, calls: list) -> threading.Event:
    """Occupy the decoder with a job that waits for the returned gate."""
    gate = threading.Event()
    engine = RecordingEngine("blocker", calls, gate)
    batcher.submit(Job(["first"], 1, "blocker", engine))
    assert engine.entered.wait(60)
    return gate


def test_jobs_with_other_settings_are_never_decoded_in_the_same_call():
    calls: list = []
    batcher = MicroBatcher(capacity=100, budget_tokens=1000, wait_s=0.0)
    gate = blocked(batcher, calls)
    beam1, beam5 = RecordingEngine("beam1", calls), RecordingEngine("beam5", calls)
    first = batcher.submit(Job(["a", "b"], 2, ("beam", 1), beam1))
    other = batcher.submit(Job(["c"], 1, ("beam", 5), beam5))
    second = batcher.submit(Job(["d"], 1, ("beam", 1), beam1))
    gate.set()
    assert texts_of(first) == ["A", "B"] and texts_of(other) == ["C"] and texts_of(second) == ["D"]
    batcher.close()
    assert calls == [("blocker", ["first"]), ("beam1", ["a", "b", "d"]), ("beam5", ["c"])]


def test_a_batch_holds_at_most_the_token_budget_and_a_longer_job_goes_alone():
    calls: list = []
    batcher = MicroBatcher(capacity=100, budget_tokens=12, wait_s=0.0)
    gate = blocked(batcher, calls)
    engine = RecordingEngine("e", calls)
    futures = [batcher.submit(Job([name], tokens, "k", engine))
               for name, tokens in (("a", 6), ("b", 6), ("c", 6), ("long", 30))]
    gate.set()
    assert [texts_of(future) for future in futures] == [["A"], ["B"], ["C"], ["LONG"]]
    batcher.close()
    assert [texts for _, texts in calls[1:]] == [["a", "b"], ["c"], ["long"]]


def test_without_batching_every_job_is_its_own_decode_call():
    calls: list = []
    batcher = MicroBatcher(capacity=100, budget_tokens=1000, wait_s=0.5, batching=False)
    gate = blocked(batcher, calls)
    engine = RecordingEngine("e", calls)
    futures = [batcher.submit(Job([name], 1, "k", engine)) for name in "abc"]
    gate.set()
    for future in futures:
        future.result(60)
    batcher.close()
    assert [texts for _, texts in calls[1:]] == [["a"], ["b"], ["c"]]


def test_the_oldest_job_waits_for_others_up_to_the_wait_time():
    calls: list = []
    sizes: list[int] = []
    clock = ManualClock()
    batcher = MicroBatcher(capacity=100, budget_tokens=1000, wait_s=0.5, on_batch=sizes.append, clock=clock)
    engine = RecordingEngine("e", calls)
    first = batcher.submit(Job(["a"], 1, "k", engine))
    assert clock.settled() == 0.5  # the first job waits for company
    clock.advance(0.125)
    second = batcher.submit(Job(["b"], 1, "k", engine))
    assert clock.settled() == 0.375  # the wait counts from the oldest job, not from the newest
    clock.advance(0.25)
    assert clock.settled() == 0.125 and calls == [] and not first.done()
    clock.advance(0.125)
    assert texts_of(first) == ["A"] and texts_of(second) == ["B"]
    batcher.close()
    assert calls == [("e", ["a", "b"])] and sizes == [2]


def test_a_decode_call_is_counted_before_any_of_its_requests_is_answered():
    # a client that reads /metrics as soon as it has its answer must find its batch counted
    sizes: list[int] = []
    counted_when_answered: list[list[int]] = []
    batcher = MicroBatcher(capacity=100, budget_tokens=1000, wait_s=0.0, on_batch=sizes.append)
    job = Job(["a", "b", "c"], 3, "k", RecordingEngine("e", []))
    job.future.add_done_callback(lambda _: counted_when_answered.append(list(sizes)))  # runs in the answering thread
    batcher.submit(job)
    assert texts_of(job.future) == ["A", "B", "C"]
    batcher.close()
    assert counted_when_answered == [[3]] and sizes == [3]


def test_the_queue_is_bounded_in_sentences():
    calls: list = []
    batcher = MicroBatcher(capacity=3, budget_tokens=1000, wait_s=0.0)
    gate = blocked(batcher, calls)
    engine = RecordingEngine("e", calls)
    batcher.submit(Job(["a", "b"], 2, "k", engine))
    with pytest.raises(QueueFull, match="2 sentences are queued"):
        batcher.submit(Job(["c", "d"], 2, "k", engine))
    batcher.submit(Job(["c"], 1, "k", engine))
    assert batcher.queued_sentences == 3
    gate.set()
    batcher.close()
    assert batcher.queued_sentences == 0
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(Job(["e"], 1, "k", engine))


def test_a_cancelled_job_is_not_decoded_and_frees_its_place():
    calls: list = []
    batcher = MicroBatcher(capacity=10, budget_tokens=1000, wait_s=0.0)
    gate = blocked(batcher, calls)
    engine = RecordingEngine("e", calls)
    given_up = batcher.submit(Job(["gone"], 1, "k", engine))
    kept = batcher.submit(Job(["kept"], 1, "k", engine))
    assert given_up.cancel()
    gate.set()
    assert texts_of(kept) == ["KEPT"]
    batcher.close()
    assert calls[1:] == [("e", ["kept"])] and batcher.queued_sentences == 0


def test_an_engine_error_goes_to_the_requests_of_that_call_and_the_worker_goes_on():
    class Failing:
        def translate(self, texts, with_attention=False, token_scores=False):
            raise NmtError("sequence too long")

    calls: list = []
    batcher = MicroBatcher(capacity=10, budget_tokens=1000, wait_s=0.0)
    failed = batcher.submit(Job(["x"], 1, "bad", Failing()))
    with pytest.raises(NmtError, match="sequence too long"):
        failed.result(60)
    assert texts_of(batcher.submit(Job(["y"], 1, "k", RecordingEngine("e", calls)))) == ["Y"]
    batcher.close()


def test_close_decodes_what_is_queued_first():
    calls: list = []
    clock = ManualClock()
    batcher = MicroBatcher(capacity=10, budget_tokens=1000, wait_s=5.0, clock=clock)
    future = batcher.submit(Job(["late"], 1, "k", RecordingEngine("e", calls)))
    assert clock.settled() == 5.0 and not future.done()
    closer = threading.Thread(target=batcher.close)
    closer.start()
    closer.join(60)
    assert not closer.is_alive()  # close does not sit out the wait: no time has passed
    assert texts_of(future) == ["LATE"] and clock.time == 0.0


def test_a_batch_waits_for_arrivals_after_the_decoder_is_free_even_when_its_oldest_job_is_old():
    # Under load the jobs queued during a decode call are old when it ends, while the clients it
    # answered are only now sending their next request: those must share the next call.
    calls: list = []
    clock = ManualClock()
    batcher = MicroBatcher(capacity=100, budget_tokens=1000, wait_s=0.5, idle_s=0.25, clock=clock)
    gate = threading.Event()
    blocking = RecordingEngine("e", calls, gate)
    blocker = batcher.submit(Job(["first"], 1, "k", blocking))
    assert clock.settled() == 0.25  # alone: it waits the idle gap
    clock.advance(0.25)
    assert blocking.entered.wait(60)
    old = batcher.submit(Job(["old"], 1, "k", RecordingEngine("e", calls)))
    clock.advance(0.5)  # old is now older than wait_s
    gate.set()
    texts_of(blocker)
    assert clock.settled() == 0.5  # the whole wait, counted from when the decoder was free
    clock.advance(0.125)  # the answered client comes back
    new = batcher.submit(Job(["new"], 1, "k", RecordingEngine("e", calls)))
    assert clock.settled() == 0.25 and not old.done()  # as many came as were answered: the idle gap
    clock.advance(0.25)
    assert texts_of(old) == ["OLD"] and texts_of(new) == ["NEW"]
    batcher.close()
    assert calls == [("e", ["first"]), ("e", ["old", "new"])]


def test_a_lone_job_waits_only_the_idle_gap_not_the_whole_wait():
    calls: list = []
    clock = ManualClock()
    batcher = MicroBatcher(capacity=10, budget_tokens=1000, wait_s=5.0, idle_s=0.125, clock=clock)
    future = batcher.submit(Job(["alone"], 1, "k", RecordingEngine("e", calls)))
    assert clock.settled() == 0.125
    clock.advance(0.125)
    assert texts_of(future) == ["ALONE"]
    batcher.close()


def test_a_lone_job_on_real_time_is_answered_after_the_idle_gap():
    # the default clock: time.monotonic and real waits (no bound on how long a busy machine takes)
    calls: list = []
    batcher = MicroBatcher(capacity=10, budget_tokens=1000, wait_s=0.2, idle_s=0.01)
    assert texts_of(batcher.submit(Job(["alone"], 1, "k", RecordingEngine("e", calls)))) == ["ALONE"]
    batcher.close()


def test_a_steady_stream_cannot_hold_a_batch_open_beyond_the_wait():
    calls: list = []
    clock = ManualClock()
    batcher = MicroBatcher(capacity=1000, budget_tokens=10_000, wait_s=0.5, idle_s=0.25, clock=clock)
    engine = RecordingEngine("e", calls)
    first = batcher.submit(Job(["0"], 1, "k", engine))
    assert clock.settled() == 0.25
    for index, waiting in ((1, 0.25), (2, 0.25), (3, 0.125)):  # arrivals closer than the idle gap
        clock.advance(0.125)
        batcher.submit(Job([str(index)], 1, "k", engine))
        assert clock.settled() == waiting and calls == []
    clock.advance(0.125)  # the wait is over, though the stream has not paused
    assert texts_of(first) == ["0"]
    later = batcher.submit(Job(["4"], 1, "k", engine))  # the stream goes on into the next call
    assert clock.settled() == 0.5
    clock.advance(0.5)
    assert texts_of(later) == ["4"]
    batcher.close()
    assert calls == [("e", ["0", "1", "2", "3"]), ("e", ["4"])]


def test_after_answering_n_jobs_a_batch_waits_for_n_arrivals_even_across_idle_gaps():
    # closed-loop clients: the two answered come back with a gap longer than the idle gap
    calls: list = []
    clock = ManualClock()
    batcher = MicroBatcher(capacity=100, budget_tokens=1000, wait_s=2.0, idle_s=0.0625, clock=clock)
    engine = RecordingEngine("e", calls)
    first = [batcher.submit(Job([text], 1, "k", engine)) for text in ("a", "b")]
    assert clock.settled() == 0.0625
    clock.advance(0.0625)
    assert [texts_of(future) for future in first] == [["A"], ["B"]]
    assert clock.settled() is None  # nothing queued
    clock.advance(0.125)
    third = batcher.submit(Job(["c"], 1, "k", engine))
    assert clock.settled() == 2.0  # one of the two answered is back: wait for the other
    clock.advance(0.25)  # longer than the idle gap
    assert clock.settled() == 1.75 and not third.done()
    fourth = batcher.submit(Job(["d"], 1, "k", engine))
    assert clock.settled() == 0.0625  # both are back: the idle gap after d closes it, not the 2 s wait
    clock.advance(0.0625)
    assert texts_of(third) == ["C"] and texts_of(fourth) == ["D"]
    batcher.close()
    assert calls == [("e", ["a", "b"]), ("e", ["c", "d"])]
