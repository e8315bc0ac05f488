"""Decoding batches in forked worker processes, one thread each (CTranslate2's ``inter_threads``).

A decoding step is many small operations; one process running them on two intra-op
threads keeps the cores busy only part of the time, and Python threads would share one
interpreter lock. So a :class:`WorkerPool` forks ``workers`` processes, hands each the
next item as soon as it is free, and gets the result back through a pipe. Forked
workers share the parent's model pages (nothing is copied or reloaded) and see its
exact state at the fork.

A pool lives as long as its owner wants: a :class:`~nmt_cli.decoding.translator.Translator`
forks its workers on the first call and reuses them for every later one, so each keeps
what it warmed up (oneDNN's primitives for each batch shape, allocator pools) and a
server forks once, not once per batch from its many threads. ``map_in_processes`` is a
pool for one call.

One thread each is not a choice but a rule: the GNU OpenMP runtime behind torch's
intra-op threads does not survive a fork once the parent has used it, and a forked
child that starts a parallel region hangs; with one thread it never does.

A worker that fails sends its error back and the parent raises it; a worker that dies
is reported in one line. When a call does not end normally (an error, Ctrl-C, SIGTERM)
the pool is closed before the exception goes on: its workers are killed and reaped,
and the owner's next call forks new ones. Workers left at interpreter exit are
stopped the same way; a worker whose parent is gone reads the end of its pipe and exits.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import traceback
import weakref
from contextlib import contextmanager
from multiprocessing.connection import Connection, wait
from typing import Callable, Generic, Sequence, TypeVar

import torch

from nmt_cli.errors import NmtError

__all__ = ["WorkerPool", "map_in_processes"]

Item = TypeVar("Item")
Result = TypeVar("Result")


class WorkerPool(Generic[Item, Result]):
    """``workers`` forked processes of one thread each, computing ``function(number, item)``
    for the items of every :meth:`map` call; close it (or use it as a context manager)."""

    def __init__(self, function: Callable[[int, Item], Result], workers: int):
        if workers < 1:
            raise NmtError(f"a worker pool needs at least one worker, got {workers}")
        context = multiprocessing.get_context("fork")
        for stream in (sys.stdout, sys.stderr):  # a child must not inherit and write out unflushed output
            stream.flush()
        #: the parent's end of each worker's pipe -> the worker's pid
        self._workers: dict[Connection, int] = {}
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers)
        try:
            for _ in range(workers):
                parent_end, child_end = context.Pipe(duplex=True)
                with _signals_held() as usual_mask:  # no Ctrl-C between the fork and the pid's record
                    pid = os.fork()
                    if pid == 0:  # the worker never returns from here
                        _start_worker(function, parent_end, child_end, list(self._workers), usual_mask)
                    self._workers[parent_end] = pid
                    child_end.close()
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def map(self, items: Sequence[Item]) -> list[Result]:
        """``[function(number, item) for number, item in enumerate(items)]``, in input order.

        Each worker gets the next item as soon as it is free, so long and short items
        balance out. Anything but a normal return closes the pool first.
        """
        if self.closed:
            raise NmtError("the decoding workers were closed")
        results: list = [None] * len(items)
        waiting = iter(enumerate(items))
        busy: dict[Connection, int] = {}
        try:
            for connection in self._workers:
                self._hand_out(connection, waiting, busy)
            while busy:
                for connection in wait(list(busy)):
                    results[busy.pop(connection)] = self._receive(connection)
                    self._hand_out(connection, waiting, busy)
        except BaseException:
            self.close()
            raise
        return results

    def close(self) -> None:
        """Kill and reap every worker (idle ones only wait for work); closing twice is harmless."""
        self._finalizer()

    def __enter__(self) -> "WorkerPool[Item, Result]":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @staticmethod
    def _hand_out(connection: Connection, waiting, busy: dict[Connection, int]) -> None:
        task = next(waiting, None)
        if task is not None:
            connection.send(task)
            busy[connection] = task[0]

    def _receive(self, connection: Connection):
        try:
            succeeded, value = connection.recv()
        except EOFError:
            pid = self._workers[connection]
            raise NmtError(f"a decoding worker (pid {pid}) died: {_exit_status(pid)}") from None
        if succeeded:
            return value
        user_error, line, details = value
        if user_error:
            raise NmtError(line.split(": ", 1)[1])
        raise RuntimeError(f"a decoding worker failed: {line}\n{details}")


def map_in_processes(function: Callable[[int, Item], Result], items: Sequence[Item], workers: int) -> list[Result]:
    """:meth:`WorkerPool.map` on a pool of ``workers`` forked for this call only."""
    with WorkerPool(function, workers) as pool:
        return pool.map(items)


#: signals that arrive from outside the process (never from the instruction it runs)
_ASYNCHRONOUS_SIGNALS = signal.valid_signals() - {
    signal.SIGKILL, signal.SIGSTOP, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGTRAP,
    signal.SIGSYS, signal.SIGABRT}


@contextmanager
def _signals_held():
    """Hold back asynchronous signals (Ctrl-C, SIGTERM, timers) while a worker is forked.

    A signal between ``fork`` and the parent's note of the new pid would raise in the parent
    with a worker nobody stops; in the child, before its handlers are set, it would raise
    out of the pool's constructor and the child would go on running the parent's program.
    This thread blocks them (a forked child has only this thread, so it starts with them
    blocked and none pending, and lets them in once Ctrl-C is ignored there). Another thread
    of the parent may still take one, and Python runs its handler in the main thread at once,
    so on the main thread the Python handlers are also swapped for ones that only note the
    signal; the noted signals go to the real handlers once the block ends, after the pid is
    recorded (closing the pool then stops that worker). Yields the mask to restore.
    """
    usual_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNCHRONOUS_SIGNALS)
    noted: list[tuple[int, object]] = []
    handlers = {}
    try:  # from here on the block is always lifted, whatever raises
        if threading.current_thread() is threading.main_thread():
            for number in _ASYNCHRONOUS_SIGNALS:
                handler = signal.getsignal(number)
                if callable(handler):
                    handlers[number] = signal.signal(number, lambda number, frame: noted.append((number, frame)))
        yield usual_mask
    finally:
        try:  # a signal another thread took may raise from a handler as soon as it is back
            for number, handler in handlers.items():
                signal.signal(number, handler)
        finally:  # never leave this thread's signals blocked: its later children would inherit that
            signal.pthread_sigmask(signal.SIG_SETMASK, usual_mask)
        for number, frame in noted:
            handlers[number](number, frame)


def _start_worker(function: Callable, parent_end: Connection, child_end: Connection,
                  siblings: list[Connection], usual_mask: set) -> None:
    """The forked child, signals still held: set its handlers, let signals in, serve; never returns."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        parent_end.close()
        for sibling in siblings:
            sibling.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, usual_mask)
        _serve(function, child_end)
    finally:
        os._exit(1)  # only if serving did not exit itself


def _serve(function: Callable, connection: Connection) -> None:
    """A worker's life: compute each item it is sent until the pipe closes or an item fails;
    always ``os._exit``."""
    code = 0
    try:
        torch.set_num_threads(1)
        while True:
            try:
                number, item = connection.recv()
            except EOFError:  # the pool's owner closed it or is gone
                break
            try:
                connection.send((True, function(number, item)))
            except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
                code = 1
                connection.send((False, _describe(exc)))
                break
    except OSError:
        code = 1
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffers


def _describe(exc: BaseException) -> tuple[bool, str, str]:
    """What the parent needs to raise the worker's error: whether it is the user's (NmtError), its line, the traceback."""
    return isinstance(exc, NmtError), f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


def _exit_status(pid: int) -> str:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "exit status unknown"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _stop_workers(workers: dict[Connection, int]) -> None:
    """Kill every worker that may still run, reap it and close its pipe.

    Signals are held meanwhile: a pool is mostly closed because of a Ctrl-C, and a second
    one (a user pressing twice, or a first one another thread took late) raising halfway
    through would leave the rest of the workers running; it is raised once all are reaped.
    """
    with _signals_held():
        for connection, pid in list(workers.items()):
            try:
                finished, _ = os.waitpid(pid, os.WNOHANG)
                if finished == 0:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except (ChildProcessError, ProcessLookupError):
                pass
            connection.close()
        workers.clear()
