"""Decoding batches in forked worker processes, one thread each (CTranslate2's ``inter_threads``).

A decoding step is many small operations; one process running them on two intra-op
threads keeps the cores busy only part of the time, and Python threads would share one
interpreter lock. So :func:`map_in_processes` forks ``workers`` processes that each take
the next batch, decode it on a single thread and send the result back through a pipe.
Forked workers share the parent's model pages (nothing is copied or reloaded) and see
its exact state.

One thread each is not a choice but a rule: the GNU OpenMP runtime behind torch's
intra-op threads does not survive a fork once the parent has used it, and a forked
child that starts a parallel region hangs; with one thread it never does.

A worker that fails sends its error back and the parent raises it; a worker that dies
is reported in one line; when the parent stops (an error, Ctrl-C, SIGTERM) the workers
still running are killed and reaped before it goes on.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection, wait
from typing import Callable, Sequence, TypeVar

import torch

from nmt_cli.errors import NmtError

__all__ = ["map_in_processes"]

Item = TypeVar("Item")
Result = TypeVar("Result")

_DONE = "done"


def map_in_processes(function: Callable[[int, Item], Result], items: Sequence[Item], workers: int) -> list[Result]:
    """``[function(number, item) for number, item in enumerate(items)]``, computed by
    ``workers`` forked processes of one thread each; results in input order.

    Workers take items in order as they become free, so long and short items balance out.
    """
    context = multiprocessing.get_context("fork")
    next_item = context.Value("i", 0)
    for stream in (sys.stdout, sys.stderr):  # a child must not inherit and write out unflushed output
        stream.flush()
    children: dict[Connection, int] = {}
    try:
        for _ in range(workers):
            receive, send = context.Pipe(duplex=False)
            pid = os.fork()
            if pid == 0:  # the worker never returns from here
                receive.close()
                _work(function, items, next_item, send)
            send.close()
            children[receive] = pid
        return _collect(children, len(items))
    finally:
        for pid in children.values():
            _stop(pid)


def _work(function: Callable, items: Sequence, next_item, send: Connection) -> None:
    """A worker's life: claim items until none is left, send each result; always ``os._exit``."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        torch.set_num_threads(1)
        while True:
            with next_item.get_lock():
                number = next_item.value
                next_item.value += 1
            if number >= len(items):
                break
            send.send((number, function(number, items[number])))
        send.send((_DONE, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        code = 1
        try:
            send.send((None, _describe(exc)))
        except OSError:
            pass
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffers


def _describe(exc: BaseException) -> tuple[bool, str, str]:
    """What the parent needs to raise the worker's error: whether it is the user's (NmtError), its line, the traceback."""
    return isinstance(exc, NmtError), f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


def _collect(children: dict[Connection, int], count: int) -> list:
    """Every worker's results until each has said it is done; a worker's error is raised here."""
    results: list = [None] * count
    pending = dict(children)
    while pending:
        for connection in wait(list(pending)):
            try:
                number, value = connection.recv()
            except EOFError:
                pid = pending.pop(connection)
                raise NmtError(f"a decoding worker (pid {pid}) died: {_exit_status(pid)}") from None
            if number == _DONE:
                pending.pop(connection)
            elif number is None:
                user_error, line, details = value
                if user_error:
                    raise NmtError(line.split(": ", 1)[1])
                raise RuntimeError(f"a decoding worker failed: {line}\n{details}")
            else:
                results[number] = value
    return results


def _exit_status(pid: int) -> str:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "exit status unknown"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _stop(pid: int) -> None:
    """Kill a worker that may still run and reap it (a worker that ended is only reaped)."""
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):
        pass
