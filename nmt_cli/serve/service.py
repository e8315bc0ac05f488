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
from nmt_cli.decoding.request import Request
from nmt_cli.errors import NmtError
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
                 allow_blank: bool = False) -> list[Request]:
        """Each text as a :class:`Request`, with its prefix; :class:`RequestError` (4xx) naming the
        first text or prefix that breaks a rule.

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
        if prefixes is not None and len(prefixes) != len(texts):
            raise RequestError(422, f"prefix has {len(prefixes)} entries for {len(texts)} sentences; "
                                    "send one per sentence (\"\" for none)")
        requests = []
        for index, text in enumerate(texts):
            if allow_blank:
                name = f"{field} line {index + 1}"
            else:
                name = field if len(texts) == 1 else f"{field}[{index}]"
            if not allow_blank and not text.strip():
                raise RequestError(422, f"{name} is empty")
            self._check_line(text, name)
            prefix = prefixes[index] if prefixes is not None else ""
            self._check_line(prefix, "prefix" if len(texts) == 1 else f"prefix[{index}]")
            request = Request.from_text(self.model.engine.tokenizer, text, prefix)
            if len(request.source) > self.model.max_source_tokens:
                raise RequestError(422, f"{name} is {len(request.source)} pieces long; the model takes at most "
                                        f"{self.model.max_source_tokens}")
            requests.append(request)
        return requests

    def _check_line(self, text: str, name: str) -> None:
        """One line of text within the character limit."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # JSON may escape a lone surrogate, which no tokenizer takes
            raise RequestError(422, f"{name} holds a lone surrogate (\\ud800-\\udfff), which is not text") from None
        if "\n" in text or "\r" in text:
            raise RequestError(422, f"{name} contains a line break; send one sentence per list item")
        if len(text) > self.settings.max_chars:
            raise RequestError(413, f"{name} has {len(text)} characters; at most {self.settings.max_chars} "
                                    "per sentence (--max-chars)")

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

    async def translate(self, requests: Sequence[Request], options: SearchOptions,
                        with_attention: bool = False) -> Translated:
        """Queue the requests for the next micro-batch of equal settings and wait for their hypotheses."""
        try:
            engine = self.model.engine.with_decode(options)
        except NmtError as exc:
            raise RequestError(422, str(exc)) from None
        key = (tuple(sorted(options.items())), with_attention)
        job = Job(list(requests), sum(len(request.source) for request in requests), key, engine, with_attention)
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

    def record(self, request: Request, hypothesis: Hypothesis, with_alignment: bool) -> dict[str, Any]:
        """One translation as the API returns it (the fields of ``nmt translate --format jsonl``)."""
        translator = self.model.engine
        record = output_record(request.text, hypothesis, translator)
        if with_alignment:
            record["alignment"] = alignment_record(request.text, hypothesis, translator)
        return record
