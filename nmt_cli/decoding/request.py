"""What one sentence asks of decoding: its source and its own search constraints.

A :class:`Request` is made by every input reader (text lines, JSONL records, the
service) and travels unchanged through batching, the worker processes and either engine
to the search strategy, which reads its per-sentence fields; its result comes back as a
:class:`~nmt_cli.decoding.hypothesis.Hypothesis` in the same position. A new
per-sentence constraint is a field here, a parameter of :meth:`Request.from_text`, its
entry in the JSONL reader (:mod:`nmt_cli.input_formats`) and a strategy that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from nmt_cli.tokenization import Tokenizer

__all__ = ["Request"]


@dataclass(frozen=True)
class Request:
    """One sentence to translate.

    ``source``: source piece ids without BOS/EOS (empty: an empty translation).
    ``prefix``: target piece ids the translation must start with; the search forces them
    and counts their log-probabilities in the score (fairseq's ``prefix_tokens``).
    ``text``: the source as read, for outputs that quote it (alignment words); empty
    where the caller has ids only.
    """

    source: Sequence[int]
    prefix: Sequence[int] = ()
    text: str = ""

    @classmethod
    def from_text(cls, tokenizer: Tokenizer, text: str, prefix: str = "") -> "Request":
        """The request for a source sentence and its target prefix; a blank sentence stays
        empty (blank in, blank out), whatever else it asks."""
        if not text.strip():
            return cls(source=(), text=text)
        return cls(source=tuple(tokenizer.encode_src(text)), prefix=tuple(tokenizer.encode_tgt(prefix)), text=text)
