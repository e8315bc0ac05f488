"""The FastAPI application of ``nmt serve``: routes, errors as JSON, authentication, the web page.

The model loads in a background thread once the server starts; until then ``/health``
answers 503 ``loading`` and translation requests 503 with ``Retry-After``. Every error is
``{"error": "..."}`` with a 4xx status naming the problem (503 when busy or loading).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from nmt_cli import __version__
from nmt_cli.serve.metrics import CONTENT_TYPE_LATEST, ServiceMetrics
from nmt_cli.serve.middleware import BodyLimit, RequestLog
from nmt_cli.serve.model import ServedModel
from nmt_cli.serve.schemas import (ErrorResponse, Health, Language, LibreTranslateRequest, LibreTranslateResponse,
                                   ModelInfo, TranslateRequest, TranslateResponse)
from nmt_cli.serve.service import RequestError, TranslationService
from nmt_cli.serve.settings import ServeSettings

__all__ = ["create_app", "LOGGER"]

LOGGER = logging.getLogger("nmt_cli.serve")
STATIC = Path(__file__).resolve().parent / "static"
LANGUAGE_NAMES = {"de": "German", "en": "English", "fr": "French", "es": "Spanish", "it": "Italian",
                  "cs": "Czech", "ro": "Romanian", "ru": "Russian", "zh": "Chinese", "ja": "Japanese"}
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 413, 422, 503)}
LINE_BREAK = re.compile(r"\r\n|\n|\r")
bearer = HTTPBearer(auto_error=False, description="The server's --api-key, when it was started with one.")


class ServerState:
    """The model being loaded in the background, then the service that translates with it."""

    def __init__(self, load: Callable[[], ServedModel], settings: ServeSettings, metrics: ServiceMetrics,
                 on_load_failed: Callable[[BaseException], None] | None):
        self._load = load
        self.settings = settings
        self.metrics = metrics
        self._on_load_failed = on_load_failed
        self.service: TranslationService | None = None
        self.failure: str | None = None

    def load(self) -> None:
        try:
            self.service = TranslationService(self._load(), self.settings, self.metrics.batch_size.observe)
        except Exception as exc:  # reported by /health and, through the callback, by the command
            self.failure = str(exc)
            LOGGER.error("error: the model could not be loaded: %s", exc)
            if self._on_load_failed is not None:
                self._on_load_failed(exc)
        else:
            LOGGER.info("model loaded: %s", self.service.model.engine.signature())

    def ready(self) -> TranslationService:
        """The service, or 503 while the model loads (or after it failed to)."""
        if self.service is None:
            problem = f"the model failed to load: {self.failure}" if self.failure else "the model is still loading"
            raise RequestError(503, problem, {"Retry-After": str(self.settings.retry_after_s)})
        return self.service

    def queued_sentences(self) -> int:
        return self.service.batcher.queued_sentences if self.service is not None else 0


def create_app(load: Callable[[], ServedModel], settings: ServeSettings = ServeSettings(),
               on_load_failed: Callable[[BaseException], None] | None = None) -> FastAPI:
    """The application; ``load()`` runs in a background thread when the server starts."""
    metrics = ServiceMetrics(lambda: state.queued_sentences())
    state = ServerState(load, settings, metrics, on_load_failed)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        threading.Thread(target=state.load, name="nmt-serve-load", daemon=True).start()
        yield
        if state.service is not None:  # the requests in flight are answered by now
            await asyncio.to_thread(state.service.close)

    app = FastAPI(title="nmt-cli translation service", version=__version__, lifespan=lifespan, redoc_url=None,
                  description="Translate with an nmt-cli checkpoint. Errors are `{\"error\": \"...\"}`.")
    _add_error_handlers(app)
    _add_translation_routes(app, state)
    _add_service_routes(app, state)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    known_paths = {route.path for route in app.routes}
    app.add_middleware(RequestLog, metrics=metrics, known_paths=known_paths, logger=LOGGER)
    return app


def authorize(settings: ServeSettings, credentials: HTTPAuthorizationCredentials | None,
              body_key: str | None = None) -> None:
    """401 unless the server has no key or the request brings it (Bearer header, or LibreTranslate's api_key)."""
    if settings.api_key is None:
        return
    given = credentials.credentials if credentials is not None else body_key
    if given is None or not hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                                                settings.api_key.encode("utf-8", "surrogatepass")):
        problem = "wrong API key" if given is not None else "missing API key: send Authorization: Bearer <key>"
        raise RequestError(401, problem, {"WWW-Authenticate": "Bearer"})


def _add_translation_routes(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS,
              openapi_extra=_json_body(TranslateRequest), summary="Translate one sentence or a list")
    async def translate(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)):
        authorize(state.settings, credentials)
        body = _validated(TranslateRequest, json_body(await request.body()))
        service = state.ready()
        texts = [body.text] if isinstance(body.text, str) else body.text
        if body.prefix is not None and isinstance(body.prefix, str) != isinstance(body.text, str):
            raise RequestError(422, "prefix must be a string when text is one, a list when text is a list")
        glossary = service.glossary(body.glossary, body.glossary_ignore_case) if body.glossary else None
        inputs = service.requests(texts, "text", per_sentence(body.prefix, "prefix", body.text, ""),
                                  constraints=per_sentence(body.constraints, "constraints", body.text, []),
                                  avoid=per_sentence(body.avoid, "avoid", body.text, []), glossary=glossary)
        options = service.search_options(body.beam_size, body.n_best, body.alpha)
        request.state.sentences = len(texts)
        translated = await service.translate(inputs, options, with_attention=body.alignments)
        records = [service.record(line, hypothesis, body.alignments)
                   for line, hypothesis in zip(inputs, translated.hypotheses)]
        return {"translations": records, "signature": translated.signature}

    @app.post("/translate", response_model=LibreTranslateResponse, responses=ERRORS,
              openapi_extra=_json_body(LibreTranslateRequest), summary="LibreTranslate-compatible translation")
    async def libretranslate(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)):
        body = _validated(LibreTranslateRequest, form_or_json_body(request.headers.get("content-type", ""),
                                                                   await request.body()))
        authorize(state.settings, credentials, body.api_key)
        service = state.ready()
        _check_languages(service.model, body.source, body.target, body.format)
        items = [body.q] if isinstance(body.q, str) else body.q
        lines = [LINE_BREAK.split(item) for item in items]
        flat = [line for item in lines for line in item]
        requests = service.requests(flat, "q", allow_blank=True)
        request.state.sentences = sum(1 for line in flat if line.strip())
        hypotheses = iter((await service.translate(requests, service.search_options(None, 1, None))).hypotheses)
        joined = ["\n".join(next(hypotheses).text for _ in item) for item in lines]
        return {"translatedText": joined[0] if isinstance(body.q, str) else joined}


def _add_service_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health", response_model=Health, responses={503: {"model": Health}}, summary="Ready once loaded")
    async def health():
        if state.service is not None:
            return {"status": "ready"}
        return JSONResponse({"status": "failed" if state.failure else "loading"}, 503)

    @app.get("/metrics", response_class=Response, summary="Prometheus metrics")
    async def metrics(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)):
        authorize(state.settings, credentials)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/info", response_model=ModelInfo, responses=ERRORS, summary="Languages, defaults and limits")
    async def info():
        service = state.ready()
        settings, model = state.settings, service.model
        return ModelInfo(source_language=model.src_lang, target_language=model.tgt_lang,
                         beam_size=model.engine.decode.beam_size,
                         max_beam=service.largest_beam(),
                         max_sentences=settings.max_sentences, max_chars=settings.max_chars,
                         max_source_tokens=model.max_source_tokens, auth_required=settings.api_key is not None)

    @app.get("/languages", response_model=list[Language], responses=ERRORS, summary="LibreTranslate languages")
    async def languages():
        model = state.ready().model
        return [Language(code=model.src_lang, name=LANGUAGE_NAMES.get(model.src_lang, model.src_lang),
                         targets=[model.tgt_lang])]

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")


def _add_error_handlers(app: FastAPI) -> None:
    def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": message}, status, headers=headers)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError):
        return error(exc.status, exc.message, exc.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return error(422, validation_message(exc.errors()))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        LOGGER.exception("internal error on %s %s", request.method, request.url.path)
        return error(500, "internal error; see the server log")


def per_sentence(value: Any, field: str, text: str | list[str], none: Any) -> list[Any] | None:
    """A per-sentence field as one value per text: the value itself for one text, the items of
    a list of one per sentence (``none`` where a sentence asks nothing) for a list of texts."""
    if value is None or isinstance(text, str):
        return None if value is None else [value]
    if not isinstance(value, list) or len(value) != len(text):
        given = f"{len(value)} entries" if isinstance(value, list) else "one value"
        raise RequestError(422, f"{field} has {given} for {len(text)} sentences; send one per sentence "
                                f"({json.dumps(none)} for none)")
    return value


def _check_languages(model: ServedModel, source: str, target: str, text_format: str) -> None:
    pair = f"this model translates {model.src_lang} to {model.tgt_lang}"
    if source not in (model.src_lang, "auto"):
        raise RequestError(400, f"source language {source!r} is not supported; {pair}")
    if target != model.tgt_lang:
        raise RequestError(400, f"target language {target!r} is not supported; {pair}")
    if text_format != "text":
        raise RequestError(400, f"format {text_format!r} is not supported; use text")


def json_body(raw: bytes) -> Any:
    """The request body as JSON; 400 naming what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError(400, "request body is not valid UTF-8") from None
    if not text.strip():
        raise RequestError(400, "request body is empty: send a JSON object")

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        return json.loads(text, parse_constant=refuse_constant)
    except ValueError as exc:
        raise RequestError(400, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise RequestError(400, "invalid JSON: nested too deeply") from None


def form_or_json_body(content_type: str, raw: bytes) -> Any:
    """LibreTranslate's clients send JSON or a URL-encoded form; ``q`` given twice becomes a list."""
    if not content_type.startswith("application/x-www-form-urlencoded") or raw.lstrip().startswith(b"{"):
        return json_body(raw)
    try:
        pairs = urllib.parse.parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise RequestError(400, "request body is not a valid URL-encoded form") from None
    form: dict[str, Any] = {}
    for key, value in pairs:
        if key == "q" and key in form:
            form[key] = (form[key] if isinstance(form[key], list) else [form[key]]) + [value]
        else:
            form[key] = value
    return form


def _validated(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestError(422, validation_message(exc.errors())) from None


def validation_message(errors: list[dict[str, Any]]) -> str:
    """pydantic's errors as one line: ``beam_size: Input should be a valid integer; ...``."""
    parts = []
    for item in errors:
        location = ".".join(str(part) for part in item["loc"] if part != "body")
        message = str(item["msg"]).removeprefix("Value error, ")
        if not location:
            parts.append("request body must be a JSON object" if item["type"] == "model_type" else message)
        elif item["type"] == "extra_forbidden":
            parts.append(f"{location}: unknown field")
        else:
            parts.append(message if message.startswith(location) else f"{location}: {message}")
    return "; ".join(parts)


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI request body for a route that parses its body itself (to answer bad JSON with 400)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}
