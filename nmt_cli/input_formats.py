"""What ``nmt translate`` reads: one :class:`~nmt_cli.decoding.request.Request` per input line.

``text``: each line is a source sentence. ``jsonl``: each line is a JSON object with the
sentence in ``"text"`` and, optionally, what that sentence asks of the search:
``"prefix"`` (target text the translation starts with). A line that is not such a
record stops the job with one line naming the file, the line and the problem.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterator

from nmt_cli.decoding.request import Request
from nmt_cli.errors import InputError
from nmt_cli.textio import display_name, iter_lines
from nmt_cli.tokenization import Tokenizer

__all__ = ["RECORD_FIELDS", "read_requests"]


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


#: the fields of a JSONL record (``text`` required), each with the test its value must pass and
#: what that test asks for; each is a parameter of :meth:`Request.from_text`
RECORD_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "text": (_is_string, "a string"),
    "prefix": (_is_string, "a string"),
}


def read_requests(path: str | os.PathLike, input_format: str, tokenizer: Tokenizer) -> Iterator[Request]:
    """The requests of ``path`` (``-``: stdin), lazily, in line order; ``input_format`` is
    ``text`` or ``jsonl``."""
    lines = iter_lines(path)
    if input_format == "text":
        for line in lines:
            yield Request.from_text(tokenizer, line)
        return
    name = display_name(path)
    for number, line in enumerate(lines, start=1):
        yield Request.from_text(tokenizer, **record_fields(line, name, number))


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
        valid, wanted = RECORD_FIELDS[field]
        if not valid(value):
            raise InputError(name, f"field {field!r} must be {wanted}, got {_json_type(value)}", number)
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
