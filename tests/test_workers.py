"""Forked decoding workers: results in order, errors raised in the parent, no worker left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from nmt_cli.decoding.workers import map_in_processes
from nmt_cli.errors import NmtError


def _children() -> set[int]:
    """Pids of this process's live children (zombies excluded)."""
    found = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as handle:
            found.update(int(pid) for pid in handle.read().split())
    return {pid for pid in found if _state(pid) not in ("Z", None)}


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_results_come_back_in_input_order_from_single_threaded_workers():
    before = _children()
    items = list(range(23))
    results = map_in_processes(lambda number, item: (number, item * item, os.getpid(), torch.get_num_threads()),
                               items, workers=3)
    assert [(number, square) for number, square, _, _ in results] == [(i, i * i) for i in items]
    workers = {pid for _, _, pid, _ in results}
    assert os.getpid() not in workers and 1 <= len(workers) <= 3
    assert {threads for *_, threads in results} == {1}
    assert _children() == before  # every worker was reaped


def test_a_user_error_in_a_worker_is_raised_as_one_line():
    def failing(number, item):
        if item == 4:
            raise NmtError("input 5: something the user can fix")
        return item

    with pytest.raises(NmtError, match=r"^input 5: something the user can fix$"):
        map_in_processes(failing, list(range(8)), workers=2)


def test_a_bug_in_a_worker_is_raised_with_its_traceback():
    def buggy(number, item):
        return 1 // (item - 3)

    with pytest.raises(RuntimeError, match="ZeroDivisionError") as caught:
        map_in_processes(buggy, list(range(6)), workers=2)
    assert "Traceback" in str(caught.value)


def test_a_worker_that_dies_is_named_and_the_others_are_stopped():
    before = _children()

    def dying(number, item):
        if item == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)
        return item

    with pytest.raises(NmtError, match=r"decoding worker \(pid \d+\) died: killed by signal 9"):
        map_in_processes(dying, list(range(40)), workers=2)
    assert _children() == before


def test_an_interrupted_parent_leaves_no_worker_running():
    before = _children()
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            map_in_processes(lambda number, item: time.sleep(60), [1, 2], workers=2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _children() == before
