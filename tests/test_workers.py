"""Forked decoding workers: results in order, errors raised in the parent, no worker left behind,
a kept pool reused until it is closed."""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time

import pytest
import torch

from nmt_cli.decoding import workers as workers_module
from nmt_cli.decoding.workers import WorkerPool, map_in_processes
from nmt_cli.errors import NmtError


def live_children(parent: int | None = None) -> set[int]:
    """Pids of the live children (zombies excluded) of ``parent`` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    found = set()
    for task in os.listdir(f"/proc/{parent}/task"):
        with open(f"/proc/{parent}/task/{task}/children") as handle:
            found.update(int(pid) for pid in handle.read().split())
    return {pid for pid in found if _state(pid) not in ("Z", None)}


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_results_come_back_in_input_order_from_single_threaded_workers():
    before = live_children()
    items = list(range(23))
    results = map_in_processes(lambda number, item: (number, item * item, os.getpid(), torch.get_num_threads()),
                               items, workers=3)
    assert [(number, square) for number, square, _, _ in results] == [(i, i * i) for i in items]
    workers = {pid for _, _, pid, _ in results}
    assert os.getpid() not in workers and 1 <= len(workers) <= 3
    assert {threads for *_, threads in results} == {1}
    assert live_children() == before  # every worker was reaped


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
    before = live_children()

    def dying(number, item):
        if item == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)
        return item

    with pytest.raises(NmtError, match=r"decoding worker \(pid \d+\) died: killed by signal 9"):
        map_in_processes(dying, list(range(40)), workers=2)
    assert live_children() == before


def test_an_interrupted_parent_leaves_no_worker_running():
    before = live_children()
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            map_in_processes(lambda number, item: time.sleep(60), [1, 2], workers=2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert live_children() == before


def _fork_then_interrupt(real_fork, side, thread=None, taken=None):
    """``os.fork`` followed at once by a Ctrl-C to the parent (to ``thread`` of it when given)
    or to the new child: the worst moment for one.

    A signal sent to another thread arrives whenever the kernel next runs that thread, which on
    a loaded machine can be after the pool is built; so the fork returns only once the signal
    has been taken there, which ``taken`` (the read end of the process's signal wakeup socket)
    tells.
    """
    def fork():
        pid = real_fork()
        if (pid != 0) == (side == "parent"):
            if thread is None:
                os.kill(os.getpid(), signal.SIGINT)
            else:
                signal.pthread_kill(thread.ident, signal.SIGINT)
                _wait_for_signal(taken, signal.SIGINT)
        return pid
    return fork


def _wait_for_signal(taken: socket.socket, number: int, timeout: float = 30.0) -> None:
    """Read the wakeup socket until the C-level handler wrote ``number`` into it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([taken], [], [], deadline - time.monotonic())[0] and number in taken.recv(64):
            return
    raise AssertionError(f"signal {number} was not taken within {timeout} s")


@pytest.mark.parametrize("taken_by", ["the forking thread", "another thread"])
def test_ctrl_c_right_after_a_fork_still_stops_that_worker(monkeypatch, taken_by):
    before = live_children()
    idle = threading.Event()
    other = threading.Thread(target=idle.wait)  # a thread that does not block signals, as a server has
    other.start()
    taken, wakeup = socket.socketpair()
    wakeup.setblocking(False)
    previous_wakeup = signal.set_wakeup_fd(wakeup.fileno())
    try:
        monkeypatch.setattr(os, "fork", _fork_then_interrupt(
            os.fork, "parent", other if taken_by == "another thread" else None, taken))
        with pytest.raises(KeyboardInterrupt):
            WorkerPool(lambda number, item: item, workers=2)
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        taken.close()
        wakeup.close()
        idle.set()
        other.join()
    assert live_children() == before


def test_a_second_ctrl_c_while_the_pool_closes_still_stops_every_worker(monkeypatch):
    """Closing is what a first Ctrl-C does; a second one then (a user pressing twice) is raised
    only once every worker is reaped."""
    before = live_children()
    pool = WorkerPool(lambda number, item: item, workers=2)
    real_waitpid = os.waitpid

    def interrupted_waitpid(pid, options):
        os.kill(os.getpid(), signal.SIGINT)
        return real_waitpid(pid, options)

    monkeypatch.setattr(os, "waitpid", interrupted_waitpid)
    with pytest.raises(KeyboardInterrupt):
        pool.close()
    monkeypatch.undo()
    assert pool.closed and live_children() == before


def test_ctrl_c_reaching_a_new_worker_before_its_handlers_is_ignored_there(monkeypatch):
    monkeypatch.setattr(os, "fork", _fork_then_interrupt(os.fork, "child"))
    with WorkerPool(lambda number, item: (os.getpid(), item), workers=2) as pool:
        results = pool.map(list("abcd"))
    assert [item for _, item in results] == list("abcd")
    assert os.getpid() not in {pid for pid, _ in results}


def _pid_and_count(number, item):
    """A worker's pid and how many items this worker process has computed so far."""
    global _computed
    _computed = globals().get("_computed", 0) + 1
    return os.getpid(), _computed, number, item


def test_a_kept_pool_serves_every_call_with_the_same_warm_workers():
    before = live_children()
    with WorkerPool(_pid_and_count, workers=2) as pool:
        first = pool.map(list("abcdef"))
        workers = set(live_children() - before)
        second = pool.map(list("gh"))
        assert [(number, item) for _, _, number, item in first + second] == \
            list(enumerate("abcdef")) + list(enumerate("gh"))
        assert {pid for pid, *_ in first + second} <= workers and len(workers) == 2
        # the second call ran in processes that had already computed the first call's items
        assert sum(count for _, count, _, _ in second) > len(second)
        assert pool.map([]) == []
    assert pool.closed and live_children() == before
    with pytest.raises(NmtError, match="were closed"):
        pool.map([1])


def test_a_failed_call_closes_the_pool():
    before = live_children()

    def failing(number, item):
        if item == 2:
            raise NmtError("input 3: bad")
        return item

    pool = WorkerPool(failing, workers=2)
    with pytest.raises(NmtError, match="^input 3: bad$"):
        pool.map([0, 1, 2, 3])
    assert pool.closed and live_children() == before


def test_signals_held_never_leaves_the_thread_blocking_signals(monkeypatch) -> None:
    """A handler that raises as it is put back (a signal another thread took, run at once) must not
    keep this thread's signals blocked: every child it starts later would inherit the block and
    never see SIGTERM or Ctrl-C."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handlers = {number: signal.getsignal(number) for number in signal.valid_signals()
                if callable(signal.getsignal(number))}
    with pytest.raises(RuntimeError, match="handler raised"):
        with workers_module._signals_held():
            assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])

            def raising(number, handler):
                raise RuntimeError("handler raised")
            monkeypatch.setattr(signal, "signal", raising)
    monkeypatch.undo()
    for number, handler in handlers.items():  # the test's raising stand-in left them unrestored
        signal.signal(number, handler)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
