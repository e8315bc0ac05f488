"""The translation service behind the HTTP routes: checks requests, queues them, shapes answers.

It knows nothing of HTTP beyond the status code a :class:`RequestError` carries, so the
routes stay thin and the rules (limits, settings, output records) live in one place.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, NamedTuple, Sequence

from nmt_cli.decoding.batching import batch_token_budget
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.errors import NmtError
from nmt_cli.glossary import Glossary
from nmt_cli.input_formats import RECORD_FIELDS, Input, make_input
from nmt_cli.serve.alignment import alignment_record
from nmt_cli.serve.batcher import Job, MicroBatcher, QueueFull
from nmt_cli.serve.model import ServedModel
from nmt_cli.serve.settings import ServeSettings
from nmt_cli.translation import output_record

__all__ = ["RequestError", "SearchOptions", "Translated", "TranslationService"]


class RequestError(Exception):
    """A request the service will not answer with a translation: HTTP status, message, headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class Translated(NamedTuple):
    """The hypotheses of a request's texts, in order, and the signature of the settings that made them."""

    hypotheses: list[Hypothesis]
    signature: str


SearchOptions = dict[str, Any]  # decode overrides a request asks for, e.g. {"decode.beam_size": 3, "decode.nbest": 2}


class TranslationService:
    """A loaded model behind a :class:`MicroBatcher`, with the limits of :class:`ServeSettings`."""

    def __init__(self, model: ServedModel, settings: ServeSettings, on_batch=None):
        self.model = model
        self.settings = settings
        budget = settings.batch_tokens or batch_token_budget(model.engine.decode.max_tokens, model.engine.device)
        self.batcher = MicroBatcher(settings.queue_size, budget, settings.batch_wait_ms / 1000,
                                    settings.batching, settings.batch_idle_ms / 1000, on_batch)

    def close(self) -> None:
        """Finish the queued work and stop the decoding thread."""
        self.batcher.close()

    def requests(self, texts: Sequence[str], field: str, prefixes: Sequence[str] | None = None,
                 allow_blank: bool = False, constraints: Sequence[Any] | None = None,
                 avoid: Sequence[Any] | None = None, glossary: Glossary | None = None) -> list[Input]:
        """Each text as an :class:`Input`, with its prefix, constraints, phrases to avoid (each
        given one per text, or None) and the ``glossary``'s terms found in it;
        :class:`RequestError` (4xx) naming the first value that breaks a rule.

        ``allow_blank``: blank lines among others are kept (they translate to blank lines).
        """
        limits = self.settings
        if not texts:
            raise RequestError(422, f"{field} is empty: send at least one sentence")
        if len(texts) > limits.max_sentences:
            raise RequestError(413, f"{field} has {len(texts)} sentences; at most {limits.max_sentences} "
                                    "per request (--max-sentences)")
        if all(not text.strip() for text in texts):
            raise RequestError(422, f"{field} is empty: send at least one non-blank sentence")
        inputs = []
        for index, text in enumerate(texts):
            if allow_blank:
                name = f"{field} line {index + 1}"
            else:
                name = field if len(texts) == 1 else f"{field}[{index}]"
            if not allow_blank and not text.strip():
                raise RequestError(422, f"{name} is empty")
            self._check_line(text, name)
            suffix = "" if len(texts) == 1 else f"[{index}]"
            prefix = prefixes[index] if prefixes is not None else ""
            self._check_line(prefix, f"prefix{suffix}")
            asked = {"constraints": constraints[index] if constraints is not None else [],
                     "avoid": avoid[index] if avoid is not None else []}
            for key, value in asked.items():
                self._check_phrases(key, value, f"{key}{suffix}")
            line = make_input(self.model.engine.tokenizer, glossary, text, prefix, **asked)
            self._check_size(line, len(asked["avoid"]), name)
            inputs.append(line)
        return inputs

    def glossary(self, pairs: Sequence[tuple[str, str]], ignore_case: bool) -> Glossary:
        """A request's glossary, each side stripped; :class:`RequestError` naming the first entry
        that breaks a rule."""
        if len(pairs) > self.settings.max_terms:
            raise RequestError(413, f"glossary has {len(pairs)} entries; at most {self.settings.max_terms} per request (--max-terms)")
        entries = []
        for index, pair in enumerate(pairs):
            for side, value in zip(("source", "target"), pair):
                if not value.strip():
                    raise RequestError(422, f"glossary[{index}] has an empty {side} term")
                self._check_phrase(value, f"glossary[{index}] {side} term")
            entries.append((pair[0].strip(), pair[1].strip()))
        return Glossary.from_pairs(entries, ignore_case)

    def _check_phrases(self, field: str, value: Any, name: str) -> None:
        """A sentence's ``constraints`` or ``avoid``: the shape of the JSONL field, each phrase
        one line within ``max_term_chars``."""
        where, problem = RECORD_FIELDS[field](value)
        if problem:
            raise RequestError(422, f"{name}{where} {problem}")
        for index, item in enumerate(value):
            if isinstance(item, str):
                self._check_phrase(item, f"{name}[{index}]")
            else:
                for number, phrase in enumerate(item):
                    self._check_phrase(phrase, f"{name}[{index}][{number}]")

    def _check_size(self, line: Input, avoided: int, name: str) -> None:
        """A sentence the model takes, asking for no more phrases than ``max_constraints``
        (``avoided``: the phrases it avoids as given, not their spellings in the request)."""
        request, limit = line.request, self.settings.max_constraints
        if len(request.source) > self.model.max_source_tokens:
            raise RequestError(422, f"{name} is {len(request.source)} pieces long; the model takes at most "
                                    f"{self.model.max_source_tokens}")
        phrases = sum(len(constraint) for constraint in request.constraints) + avoided
        if phrases > limit:
            raise RequestError(413, f"{name} asks for {phrases} constraint and avoid phrases (alternatives and "
                                    f"glossary matches counted); at most {limit} per sentence (--max-constraints)")

    def _check_line(self, text: str, name: str) -> None:
        """One line of text within the character limit."""
        self._check_text(text, name, self.settings.max_chars, "per sentence (--max-chars)")

    def _check_phrase(self, text: str, name: str) -> None:
        """One term or phrase within ``max_term_chars``."""
        self._check_text(text, name, self.settings.max_term_chars, "per term or phrase (--max-term-chars)")

    @staticmethod
    def _check_text(text: str, name: str, limit: int, per: str) -> None:
        """Text without a line break or a lone surrogate, at most ``limit`` characters."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # JSON may escape a lone surrogate, which no tokenizer takes
            raise RequestError(422, f"{name} holds a lone surrogate (\\ud800-\\udfff), which is not text") from None
        if "\n" in text or "\r" in text:
            raise RequestError(422, f"{name} contains a line break; send one sentence per list item")
        if len(text) > limit:
            raise RequestError(413, f"{name} has {len(text)} characters; at most {limit} {per}")

    def largest_beam(self) -> int:
        """``--max-beam``, or the server's own beam when that is larger."""
        return max(self.settings.max_beam, self.model.engine.decode.beam_size)

    def search_options(self, beam_size: int | None, n_best: int | None, alpha: float | None) -> SearchOptions:
        """The decode settings a request asks for, checked against the server's limits."""
        decode = self.model.engine.decode
        beam = decode.beam_size if beam_size is None else beam_size
        largest = self.largest_beam()
        if not 1 <= beam <= largest:
            raise RequestError(422, f"beam_size must be between 1 and {largest} (--max-beam), got {beam}")
        nbest = min(decode.nbest, beam) if n_best is None else n_best
        if not 1 <= nbest <= beam:
            raise RequestError(422, f"n_best must be between 1 and beam_size ({beam}), got {nbest}")
        if alpha is not None and not 0 <= alpha < math.inf:
            raise RequestError(422, f"alpha must be a finite number >= 0, got {alpha}")
        options = {"decode.beam_size": beam, "decode.nbest": nbest}
        if alpha is not None:
            options["decode.alpha"] = float(alpha)
        return options

    async def translate(self, inputs: Sequence[Input], options: SearchOptions,
                        with_attention: bool = False) -> Translated:
        """Queue the inputs' requests for the next micro-batch of equal settings and wait for their hypotheses."""
        try:
            engine = self.model.engine.with_decode(options)
        except NmtError as exc:
            raise RequestError(422, str(exc)) from None
        key = (tuple(sorted(options.items())), with_attention)
        requests = [line.request for line in inputs]
        job = Job(requests, sum(len(request.source) for request in requests), key, engine, with_attention)
        retry = {"Retry-After": str(self.settings.retry_after_s)}
        try:
            future = self.batcher.submit(job)
        except QueueFull as exc:
            raise RequestError(503, f"server busy: {exc}; retry later", retry) from None
        except RuntimeError:
            raise RequestError(503, "server is shutting down", retry) from None
        try:
            hypotheses = await asyncio.wait_for(asyncio.wrap_future(future), self.settings.request_timeout_s)
        except asyncio.TimeoutError:
            raise RequestError(503, f"translation did not finish within {self.settings.request_timeout_s:g} s "
                                    "(--request-timeout); retry later", retry) from None
        except NmtError as exc:
            raise RequestError(422, str(exc)) from None
        return Translated(hypotheses, engine.signature())

    def record(self, line: Input, hypothesis: Hypothesis, with_alignment: bool) -> dict[str, Any]:
        """One translation as the API returns it (the fields of ``nmt translate --format jsonl``)."""
        translator = self.model.engine
        record = output_record(line, hypothesis, translator)
        if with_alignment:
            record["alignment"] = alignment_record(line.request.text, hypothesis, translator)
        return record
