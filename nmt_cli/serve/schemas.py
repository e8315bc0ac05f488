"""Request and response bodies of the HTTP API (pydantic models, also the OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationInfo,
                      field_validator)

__all__ = ["TranslateRequest", "TranslateResponse", "Translation", "Alternative", "Alignment", "Confidence", "TermMet",
           "LibreTranslateRequest", "LibreTranslateResponse", "ErrorResponse", "Health", "ModelInfo",
           "Language"]


def _text_or_texts(value: Any, name: str) -> Any:
    """Reject anything but a string or a list of strings with one clear message."""
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        return value
    raise ValueError(f"{name} must be a string or a list of strings")


class TranslateRequest(BaseModel):
    """``POST /v1/translate``: one sentence or a list of sentences, and optional search settings."""

    model_config = ConfigDict(extra="forbid")

    text: StrictStr | list[StrictStr] = Field(
        description="One sentence, or a list of sentences (one line each, none empty).")
    prefix: StrictStr | list[StrictStr] | None = Field(
        None, description="Target text each translation starts with: a string for a text, a list of "
                          "one per sentence (\"\" for none) for a list.")
    constraints: Any = Field(
        None, description="Phrases each translation must contain, each a string or a list of alternative strings "
                          "(any one will do): a list of them for a text, a list of such lists, one per sentence, "
                          "for a list.")
    avoid: Any = Field(
        None, description="Phrases each translation must not contain: a list of strings for a text, a list of "
                          "such lists, one per sentence, for a list.")
    glossary: list[tuple[StrictStr, StrictStr]] | None = Field(
        None, description="Terms as [source, target] pairs: each source term found in a sentence (on word "
                          "boundaries, longest first) makes its target a constraint; a source given twice has "
                          "alternatives.")
    glossary_ignore_case: StrictBool = Field(False, description="Find the glossary's source terms in any case.")
    beam_size: StrictInt | None = Field(None, description="Beam size (1 = greedy) [default: the server's].")
    n_best: StrictInt | None = Field(None, description="Hypotheses per sentence, at most beam_size [default: the server's --nbest, else 1].")
    alpha: StrictFloat | StrictInt | None = Field(None, description="GNMT length penalty [default: the server's].")
    alignments: StrictBool = Field(False, description="Add word links (Pharaoh) and the soft word alignment.")

    @field_validator("text", "prefix", mode="before")
    @classmethod
    def _check_text(cls, value: Any, info: ValidationInfo) -> Any:
        return value if value is None else _text_or_texts(value, info.field_name)

    @field_validator("glossary", mode="before")
    @classmethod
    def _check_glossary(cls, value: Any) -> Any:
        """One message for any entry that is not a pair of strings."""
        if value is None:
            return value
        if not isinstance(value, list):
            raise ValueError("glossary must be a list of [source, target] pairs of strings")
        for index, pair in enumerate(value):
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(side, str) for side in pair)):
                raise ValueError(f"glossary[{index}] must be a [source, target] pair of strings")
        return value


class Alternative(BaseModel):
    """One n-best entry: detokenised text, score (log-probability / length penalty) and target pieces."""

    text: str
    score: float
    tokens: list[str]


class Alignment(BaseModel):
    """Word alignment of the best translation: links ``i-j`` (source word i, target word j, 0-based),
    the words, and ``matrix[j][i]``: attention of target word j on source word i (rows sum to 1)."""

    links: str
    source_words: list[str]
    target_words: list[str]
    matrix: list[list[float]]


class Confidence(BaseModel):
    """How sure the model was: ``log P(y | x)`` per output token (EOS counted) and, where the
    engine scores each token, the probability of the least likely one."""

    log_prob_per_token: float
    min_token_prob: float | None = None


class TermMet(BaseModel):
    """A glossary term found in the sentence, its target alternatives and whether one is in the translation."""

    source: str
    target: list[str]
    met: bool


class Translation(Alternative):
    """The best translation of one sentence, its n-best list, the fields of ``nmt translate
    --format jsonl`` (null where it leaves them out) and (on request) its alignment."""

    nbest: list[Alternative]
    confidence: Confidence | None = None
    degenerate: str | None = Field(None, description="Why the translation looks broken: loop, too long, too short.")
    constraints_met: list[bool] | None = Field(None, description="Whether each of the sentence's constraints was met.")
    terms: list[TermMet] | None = Field(None, description="The glossary terms found in the sentence.")
    alignment: Alignment | None = None


class TranslateResponse(BaseModel):
    translations: list[Translation]
    signature: str = Field(description="Every setting that shaped the output, as `nmt translate` prints it.")


class LibreTranslateRequest(BaseModel):
    """``POST /translate`` as LibreTranslate takes it (JSON or form); line breaks in ``q`` are kept."""

    model_config = ConfigDict(extra="ignore")

    q: StrictStr | list[StrictStr]
    source: StrictStr = Field(description="The model's source language code, or `auto`.")
    target: StrictStr = Field(description="The model's target language code.")
    format: StrictStr = Field("text", description="Only `text` is supported.")
    api_key: StrictStr | None = None

    @field_validator("q", mode="before")
    @classmethod
    def _check_q(cls, value: Any) -> Any:
        return _text_or_texts(value, "q")


class LibreTranslateResponse(BaseModel):
    translatedText: str | list[str]  # noqa: N815  (LibreTranslate's field name)


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class ErrorResponse(BaseModel):
    error: str = Field(description="What was wrong, naming the field or limit.")


class Health(BaseModel):
    status: str = Field(description="`ready`, or `loading` (with HTTP 503) until the model is loaded.")


class ModelInfo(BaseModel):
    """What a client (the web page) needs to know before it sends a request."""

    source_language: str
    target_language: str
    beam_size: int
    max_beam: int
    max_sentences: int
    max_chars: int
    max_source_tokens: int
    auth_required: bool
