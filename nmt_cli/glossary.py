"""Terminology: read a glossary and find its entries in a sentence.

A glossary file is UTF-8 TSV, one entry a line: ``source term<TAB>target term``. A source
term listed on several lines gets each target as an alternative (any one in the output
satisfies it); blank lines are skipped; a leading byte-order mark is ignored. A line with
no tab, more than one tab or an empty side fails with ``<file>:<line>: <problem>``.

Matching (:meth:`Glossary.matches`) finds source terms on word boundaries: a term that
starts (ends) with a letter, digit, mark or ``_`` must not continue a word before (after)
it, in any script. It is case-sensitive unless the glossary ignores case. Overlapping
occurrences resolve leftmost-longest: scanning the sentence from its start, the longest
term that starts at a position wins and the scan resumes after it, so "New York City"
beats "New York" and "York City" in "New York City Hall".
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass
from typing import Iterable

from nmt_cli.errors import InputError
from nmt_cli.textio import decode_line, display_name, iter_raw_lines

__all__ = ["Glossary", "Term", "read_glossary"]


@dataclass(frozen=True)
class Term:
    """A source term and its target alternatives, in the order the glossary lists them."""

    source: str
    targets: tuple[str, ...]


class Glossary:
    """Terms to look for in sentences; ``ignore_case``: match the source terms in any case."""

    def __init__(self, terms: Iterable[Term], ignore_case: bool = False):
        self.ignore_case = ignore_case
        self.terms: dict[str, Term] = {}
        for term in terms:
            key = self._key(term.source)
            known = self.terms.setdefault(key, Term(term.source, ()))
            targets = known.targets + tuple(target for target in term.targets if target not in known.targets)
            self.terms[key] = Term(known.source, targets)
        self._lengths = sorted({len(key) for key in self.terms}, reverse=True)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]], ignore_case: bool = False) -> "Glossary":
        """The glossary of ``(source, target)`` entries; a source given twice gets both targets."""
        return cls((Term(source, (target,)) for source, target in pairs), ignore_case)

    def __len__(self) -> int:
        return len(self.terms)

    def matches(self, sentence: str) -> list[Term]:
        """The terms whose source occurs in ``sentence`` (leftmost-longest, on word
        boundaries), each once, in the order of their first occurrence."""
        text = self._key(sentence)
        found: dict[str, Term] = {}
        start = 0
        while start < len(text):
            end = self._longest_at(text, start)
            if end:
                found.setdefault(text[start:end], self.terms[text[start:end]])
                start = end
            else:
                start += 1
        return list(found.values())

    def _longest_at(self, text: str, start: int) -> int:
        """The end of the longest term at ``start`` that sits on word boundaries, or 0."""
        if start > 0 and _in_word(text[start]) and _in_word(text[start - 1]):
            return 0
        for length in self._lengths:
            end = start + length
            if end <= len(text) and text[start:end] in self.terms and not (
                    end < len(text) and _in_word(text[end - 1]) and _in_word(text[end])):
                return end
        return 0

    def _key(self, text: str) -> str:
        """``text`` as terms are looked up: lower-cased character by character when case is
        ignored (a character whose lower case is longer stays, so positions do not move)."""
        if not self.ignore_case:
            return text
        return "".join(lower if len(lower := char.lower()) == 1 else char for char in text)


def _in_word(char: str) -> bool:
    """Whether ``char`` belongs to a word: a letter, digit, combining mark or ``_``."""
    return char.isalnum() or char == "_" or unicodedata.category(char).startswith("M")


def read_glossary(path: str | os.PathLike, ignore_case: bool = False) -> Glossary:
    """The glossary in the TSV file ``path``; a bad line fails with :class:`InputError`
    naming the file and the line."""
    name = display_name(path)
    entries = []
    for number, raw in iter_raw_lines(path):
        line = decode_line(raw, path, number)
        if number == 1:
            line = line.removeprefix("\ufeff")
        if line.strip():
            entries.append(parse_entry(line, name, number))
    return Glossary.from_pairs(entries, ignore_case)


def parse_entry(line: str, name: str, number: int) -> tuple[str, str]:
    """``(source, target)`` of one glossary line, each side stripped of surrounding spaces."""
    sides = line.split("\t")
    if len(sides) != 2:
        problem = "no tab" if len(sides) == 1 else f"{len(sides) - 1} tabs"
        raise InputError(name, f"expected 'source term<TAB>target term', found {problem}", number)
    source, target = (side.strip() for side in sides)
    for side, value in (("source", source), ("target", target)):
        if not value:
            raise InputError(name, f"empty {side} term", number)
    return source, target
