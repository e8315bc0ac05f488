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
from typing import Sequence, Union

from nmt_cli.errors import NmtError
from nmt_cli.tokenization import Tokenizer

__all__ = ["Constraint", "Request", "SentenceError", "UnfitConstraintsError"]

#: one lexical constraint: its alternatives (target piece-id sequences); any one of them in
#: the output satisfies it (a glossary term with several translations)
Constraint = tuple[tuple[int, ...], ...]

#: the segmentations of a phrase to avoid that are blocked (the usual one and the unigram
#: model's next most likely): a model can spell a word with pieces other than the usual ones
AVOID_SEGMENTATIONS = 8


@dataclass(frozen=True)
class Request:
    """One sentence to translate.

    ``source``: source piece ids without BOS/EOS (empty: an empty translation).
    ``prefix``: target piece ids the translation must start with; the search forces them
    and counts their log-probabilities in the score (fairseq's ``prefix_tokens``).
    ``text``: the source as read, for outputs that quote it (alignment words); empty
    where the caller has ids only.
    ``constraints``: phrases the translation must contain, each a :data:`Constraint`
    (lexically constrained search, in any order).
    ``avoid``: target piece-id sequences the translation must not contain (from text: each
    phrase in its :data:`AVOID_SEGMENTATIONS` most likely segmentations, so that a model
    cannot spell it with other pieces).
    """

    source: Sequence[int]
    prefix: Sequence[int] = ()
    text: str = ""
    constraints: tuple[Constraint, ...] = ()
    avoid: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def from_text(cls, tokenizer: Tokenizer, text: str, prefix: str = "",
                  constraints: Sequence[Union[str, Sequence[str]]] = (), avoid: Sequence[str] = ()) -> "Request":
        """The request for a source sentence, its target prefix, its constraints (each a
        phrase, or a list of alternative phrases) and the phrases to avoid; a blank
        sentence stays empty (blank in, blank out), whatever else it asks."""
        if not text.strip():
            return cls(source=(), text=text)
        alternatives = [[phrase] if isinstance(phrase, str) else list(phrase) for phrase in constraints]
        return cls(source=tuple(tokenizer.encode_src(text)), prefix=tuple(tokenizer.encode_tgt(prefix)), text=text,
                   constraints=tuple(tuple(tuple(tokenizer.encode_tgt(phrase)) for phrase in options)
                                     for options in alternatives),
                   avoid=tuple(tuple(ids) for phrase in avoid
                               for ids in tokenizer.tgt_segmentations(phrase, AVOID_SEGMENTATIONS)))


class SentenceError(NmtError):
    """A problem of input sentence ``index`` (0-based): ``problem`` says what, and a reader of
    files names the sentence's file and line (:mod:`nmt_cli.translation`)."""

    def __init__(self, index: int, problem: str):
        self.index, self.problem = index, problem
        super().__init__(f"input {index + 1}: {problem}")

    def at(self, index: int) -> "SentenceError":
        """The same error for input ``index`` (a chunk's sentence numbered within the whole stream)."""
        moved = type(self).__new__(type(self))
        moved.__dict__.update(self.__dict__)
        moved.index, moved.args = index, (f"input {index + 1}: {self.problem}",)
        return moved


class UnfitConstraintsError(SentenceError):
    """Input ``index``'s prefix and constraints need ``needed`` output tokens, more than its
    output limit ``limit`` (``decode.on_unmet: error``), or than the model's longest output
    (``model_limit``: any ``on_unmet``, even ``relax``)."""

    def __init__(self, index: int, needed: int, limit: int, model_limit: bool = False):
        self.needed, self.limit, self.model_limit = needed, limit, model_limit
        if model_limit:
            problem = (f"its prefix and constraints need {needed} output tokens, more than the model's longest "
                       f"output ({limit}, model.max_positions); decode.on_unmet drop leaves out what does not fit")
        else:
            problem = (f"its prefix and constraints need {needed} output tokens, more than its output limit "
                       f"({limit}); decode.on_unmet relax raises the limit, drop leaves out what does not fit")
        super().__init__(index, problem)
