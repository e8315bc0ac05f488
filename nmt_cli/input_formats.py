"""What ``nmt translate`` reads: one :class:`Input` (a request, the glossary terms in it) per input line.

``text``: each line is a source sentence. ``jsonl``: each line is a JSON object with the
sentence in ``"text"`` and, optionally, what that sentence asks of the search:
``"prefix"`` (target text the translation starts with), ``"constraints"`` (phrases the
translation must contain: each a string, or an array of alternative strings of which any
one will do) and ``"avoid"`` (phrases it must not contain). A line that is not such a
record stops the job with one line naming the file, the line and the problem. With a
glossary, the terms found in a sentence become constraints after the record's own.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterator, NamedTuple, Sequence, Union

from nmt_cli.decoding.request import Request
from nmt_cli.errors import InputError
from nmt_cli.glossary import Glossary, Term
from nmt_cli.textio import display_name, iter_lines
from nmt_cli.tokenization import Tokenizer

__all__ = ["RECORD_FIELDS", "Input", "make_input", "read_inputs", "record_fields"]


class Input(NamedTuple):
    """One sentence to translate: its request and the glossary terms applied to it, whose
    targets are the request's last ``len(terms)`` constraints (the record's own come first)."""

    request: Request
    terms: tuple[Term, ...] = ()


#: the check of a value: ``(where, problem)``, ``where`` the index of the item at fault
#: (``"[1][0]"``, or ``""`` for the value itself) and ``problem`` empty when the value passes
Check = Callable[[Any], tuple[str, str]]


def _string(value: Any) -> tuple[str, str]:
    return "", "" if isinstance(value, str) else f"must be a string, got {_json_type(value)}"


def _phrase(value: Any) -> tuple[str, str]:
    """A non-blank string."""
    if not isinstance(value, str):
        return "", f"must be a string, got {_json_type(value)}"
    return "", "" if value.strip() else "is an empty string"


def _alternatives(value: Any) -> tuple[str, str]:
    """A phrase, or a non-empty array of phrases (any one of which will do)."""
    if isinstance(value, list):
        return _first_problem(value, _phrase) if value else ("", "is an empty array (give at least one alternative)")
    if isinstance(value, str):
        return _phrase(value)
    return "", f"must be a string or an array of alternative strings, got {_json_type(value)}"


def _array_of(check: Check, wanted: str) -> Check:
    """The check of an array whose items each pass ``check``."""
    def array(value: Any) -> tuple[str, str]:
        if not isinstance(value, list):
            return "", f"must be an array of {wanted}, got {_json_type(value)}"
        return _first_problem(value, check)

    return array


def _first_problem(items: list, check: Check) -> tuple[str, str]:
    """Where and what is wrong with the first item that fails ``check``, or ``("", "")``."""
    for index, item in enumerate(items):
        where, problem = check(item)
        if problem:
            return f"[{index}]{where}", problem
    return "", ""


#: the fields of a JSONL record (``text`` required), each with the check of its value (the
#: service checks its per-sentence fields with them too); each is a parameter of
#: :meth:`Request.from_text`
RECORD_FIELDS: dict[str, Check] = {
    "text": _string,
    "prefix": _string,
    "constraints": _array_of(_alternatives, "phrases (strings, or arrays of alternative strings)"),
    "avoid": _array_of(_phrase, "strings"),
}


def make_input(tokenizer: Tokenizer, glossary: Glossary | None, text: str, prefix: str = "",
               constraints: Sequence[Union[str, Sequence[str]]] = (), avoid: Sequence[str] = ()) -> Input:
    """The input for a sentence: its request, with the targets of the glossary terms found in
    ``text`` as constraints after ``constraints``."""
    terms = tuple(glossary.matches(text)) if glossary is not None else ()
    constraints = [*constraints, *(list(term.targets) for term in terms)]
    return Input(Request.from_text(tokenizer, text, prefix, constraints, avoid), terms)


def read_inputs(path: str | os.PathLike, input_format: str, tokenizer: Tokenizer,
                glossary: Glossary | None = None) -> Iterator[Input]:
    """The inputs of ``path`` (``-``: stdin), lazily, in line order; ``input_format`` is
    ``text`` or ``jsonl``."""
    lines = iter_lines(path)
    if input_format == "text":
        for line in lines:
            yield make_input(tokenizer, glossary, line)
        return
    name = display_name(path)
    for number, line in enumerate(lines, start=1):
        yield make_input(tokenizer, glossary, **record_fields(line, name, number))


def record_fields(line: str, name: str, number: int) -> dict[str, Any]:
    """The fields of one JSONL input record, checked: ``text`` and the optional ones."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(name, f"invalid JSON ({exc.msg} at column {exc.colno})", number) from None
    except RecursionError:
        raise InputError(name, "invalid JSON (nested too deeply)", number) from None
    if not isinstance(record, dict):
        raise InputError(name, f'expected a JSON object such as {{"text": "..."}}, got {_json_type(record)}', number)
    unknown = sorted(set(record) - set(RECORD_FIELDS))
    if unknown:
        raise InputError(name, f"unknown field {unknown[0]!r}; the fields are {', '.join(RECORD_FIELDS)}", number)
    if "text" not in record:
        raise InputError(name, "missing field 'text' (the source sentence)", number)
    for field, value in record.items():
        where, problem = RECORD_FIELDS[field](value)
        if problem:
            raise InputError(name, f"field {field + where!r} {problem}", number)
    return record


def _json_type(value: Any) -> str:
    """How JSON names the type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "an array", dict: "an object"}[type(value)]
