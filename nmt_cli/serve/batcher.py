"""Micro-batching: sentences of concurrent requests decoded together, off the event loop.

Requests put jobs (their sentences, as :class:`~nmt_cli.decoding.request.Request` s, and
search settings) into a bounded queue; one worker thread takes the oldest job and every other queued job with the same settings, up to a
budget of source tokens. Before it starts a decode call it holds the batch open for more:
until the budget is full, or ``wait_s`` has passed since the decoder was free with a job
waiting, or, once as many jobs have arrived since the decoder became free as its last call
answered (at least one), none has followed for ``idle_s``.

Counting from when the decoder is free matters under load: the jobs queued during the last
call are old by then, while the clients that call answered are only starting to send their
next requests (the event loop hands out the answers first, then reads about one request a
millisecond), and a deadline counted from the oldest job closed the batch before they came:
two cohorts of half the clients alternated. Waiting for as many arrivals as were answered
keeps those clients in one batch; the idle gap keeps a lone client from waiting the whole
``wait_s``. A burst of one-off requests whose clients never come back costs the next batch
at most ``wait_s``.
Jobs with other settings are never mixed into that decode call; they wait for a later one.
A full queue refuses new jobs (:class:`QueueFull`) instead of growing.

Each job carries a :class:`concurrent.futures.Future`: the request awaits it, a request
that gives up cancels it, and the worker skips a cancelled job that has not started.

Time comes from a :class:`Clock` (``time.monotonic`` and real waits unless told otherwise):
tests pass one whose time moves only when they say, and whose condition tells them when the
worker waits, so they check the rules above on the state itself instead of on sleeps.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

from nmt_cli.decoding.hypothesis import Hypothesis

__all__ = ["Clock", "Job", "MicroBatcher", "QueueFull"]


class Clock:
    """The time the batcher reads and the condition it waits on: real time, ``time.monotonic``.

    ``condition().wait(timeout)`` waits up to ``timeout`` seconds of this clock's time, or until
    notified. A test passes a clock of its own (``tests/test_serve_batcher.py``)."""

    def now(self) -> float:
        return time.monotonic()

    def condition(self) -> threading.Condition:
        return threading.Condition()


class QueueFull(Exception):
    """The queue holds as many sentences as it may; the request should come back later."""


@dataclass(eq=False)
class Job:
    """One request's sentences (what ``engine.translate`` takes), decoded by ``engine`` with
    ``with_attention``; ``tokens`` counts their source tokens, ``key`` groups equal settings."""

    sentences: Sequence[Any]
    tokens: int
    key: Hashable
    engine: Any
    with_attention: bool = False
    future: Future = field(default_factory=Future)
    queued_at: float = field(default_factory=time.monotonic)  # set again, on the batcher's clock, when submitted


class MicroBatcher:
    """A bounded queue of :class:`Job` and the thread that decodes them in batches.

    ``budget_tokens``: source tokens gathered into one decode call (one job that is
    longer is decoded alone). ``wait_s``: the longest a batch is held open; ``idle_s``
    (None: no idle rule) closes it sooner once arrivals stop. ``batching=False`` decodes
    every job on its own, the baseline that ``bench/serve_load.py`` compares with.
    ``on_batch(sentences)`` is called after every decode call (for metrics), before its jobs
    are answered. ``clock``: where times and waits come from (:class:`Clock`, real time,
    unless a test brings its own).
    """

    def __init__(self, capacity: int, budget_tokens: int, wait_s: float, batching: bool = True,
                 idle_s: float | None = None, on_batch: Callable[[int], None] | None = None,
                 clock: Clock | None = None):
        self.capacity = capacity
        self.budget_tokens = budget_tokens
        self.wait_s = wait_s if batching else 0.0
        self.idle_s = self.wait_s if idle_s is None else min(idle_s, self.wait_s)
        self.batching = batching
        self.on_batch = on_batch or (lambda sentences: None)
        self._queue: collections.deque[Job] = collections.deque()
        self._queued_sentences = 0
        self._last_arrival = 0.0
        self._free_at = 0.0  # when the last decode call finished computing
        self._arrivals = 0  # jobs submitted so far
        self._arrivals_when_free = 0  # ... when the last decode call finished
        self._answered = 0  # jobs the last decode call answered
        self._clock = clock or Clock()
        self._condition = self._clock.condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="nmt-serve-decoder", daemon=True)
        self._thread.start()

    @property
    def queued_sentences(self) -> int:
        """Sentences waiting for a decode call (not counting the one running)."""
        return self._queued_sentences

    def submit(self, job: Job) -> Future:
        """Queue ``job``; :class:`QueueFull` when its sentences do not fit, RuntimeError once closed."""
        with self._condition:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            if self._queued_sentences + len(job.sentences) > self.capacity:
                raise QueueFull(f"{self._queued_sentences} sentences are queued (limit {self.capacity})")
            job.queued_at = self._last_arrival = self._clock.now()
            self._queue.append(job)
            self._queued_sentences += len(job.sentences)
            self._arrivals += 1
            self._condition.notify()
        return job.future

    def close(self) -> None:
        """Decode what is queued, then stop the worker thread."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            jobs = self._next_batch()
            if jobs is None:
                return
            if jobs:
                self._decode(jobs)

    def _next_batch(self) -> list[Job] | None:
        """The jobs of the next decode call ([] when all were cancelled); None once closed and empty."""
        with self._condition:
            free_at = self._free_at
            while not self._drop_cancelled():
                if self._closed:
                    return None
                self._condition.wait()
            first = self._queue[0]
            deadline = max(free_at, first.queued_at) + self.wait_s
            while not self._closed and self._tokens_like(first) < self.budget_tokens:
                until = deadline
                if self._arrivals - self._arrivals_when_free >= max(self._answered, 1):
                    until = min(deadline, self._last_arrival + self.idle_s)  # as many came as were answered
                remaining = until - self._clock.now()
                if remaining <= 0:
                    break
                self._condition.wait(remaining)
            jobs = self._take_like(first)
            self._queued_sentences -= sum(len(job.sentences) for job in jobs)
        return [job for job in jobs if job.future.set_running_or_notify_cancel()]

    def _drop_cancelled(self) -> int:
        """Forget jobs whose request gave up before they started; the number of jobs left."""
        cancelled = [job for job in self._queue if job.future.cancelled()]
        if cancelled:
            self._queue = collections.deque(job for job in self._queue if not job.future.cancelled())
            self._queued_sentences -= sum(len(job.sentences) for job in cancelled)
        return len(self._queue)

    def _tokens_like(self, first: Job) -> int:
        return sum(job.tokens for job in self._queue if job.key == first.key)

    def _take_like(self, first: Job) -> list[Job]:
        """Remove and return ``first`` and the following jobs of its key that fit the budget."""
        taken, kept, tokens = [], collections.deque(), 0
        for job in self._queue:
            fits = not taken or (self.batching and tokens + job.tokens <= self.budget_tokens)
            if job.key == first.key and fits:
                taken.append(job)
                tokens += job.tokens
            else:
                kept.append(job)
        self._queue = kept
        return taken

    def _note_free(self, answered: int) -> None:
        with self._condition:
            self._free_at, self._arrivals_when_free, self._answered = self._clock.now(), self._arrivals, answered

    def _decode(self, jobs: list[Job]) -> None:
        """One engine call for all sentences of ``jobs``; each job gets its own hypotheses back."""
        sentences = [sentence for job in jobs for sentence in job.sentences]
        try:
            hypotheses: list[Hypothesis] = jobs[0].engine.translate(sentences, with_attention=jobs[0].with_attention,
                                                                        token_scores=True)
        except Exception as exc:  # the requests report it; the worker goes on
            self._note_free(0)
            for job in jobs:
                job.future.set_exception(exc)
            return
        self._note_free(len(jobs))  # before any answer: its client may come back at once
        self.on_batch(len(sentences))  # counted before any answer too: its client may read /metrics at once
        start = 0
        for job in jobs:
            job.future.set_result(hypotheses[start:start + len(job.sentences)])
            start += len(job.sentences)
