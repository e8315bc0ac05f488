"""Interruptions for the resume tests of the commands that work a chunk at a time
(:mod:`nmt_cli.resumable`: ``nmt align``, the bootstrap's links, ``nmt shortlist --aligner``,
``nmt distill``'s translation): a chunk's work patched to record each chunk and to stop as
Ctrl-C stops it, at a chunk boundary or in the middle of a chunk."""

from __future__ import annotations

from typing import Any, Callable


class _StopsAfterFirst(list):
    """A chunk's results that stop, as Ctrl-C would, once the first has been taken: the
    writer of the chunk's file has begun it and not finished."""

    def __iter__(self):
        yield self[0]
        raise KeyboardInterrupt


def recording(method: Callable[..., list], calls: list, stop_at: int | None = None,
              mid_chunk: bool = False) -> Callable[..., list]:
    """``method`` (whose first argument after ``self`` is a chunk's lines: ``Aligner.align``,
    ``Translator.translate``) recording each chunk's lines in ``calls``; at the ``stop_at``-th
    chunk it is interrupted: before any of the chunk's work (a chunk boundary) or, with
    ``mid_chunk``, after the chunk's work while its first result is being written."""
    def recorded(self: Any, lines, *rest, **options) -> list:
        calls.append(list(lines))
        if len(calls) == stop_at and not mid_chunk:
            raise KeyboardInterrupt
        results = method(self, lines, *rest, **options)
        return _StopsAfterFirst(results) if len(calls) == stop_at else results

    return recorded
