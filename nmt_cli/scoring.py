"""Scoring files: the log-probability of each given translation under a model.

``nmt score`` is a thin layer over :func:`score_file` (a target file paired line by line
with the source) and :func:`score_nbest_file` (the JSONL n-best lists ``nmt translate
--format jsonl`` writes, to rerank them). Output line N belongs to input line N; a
blank source line gets a blank line (text) or ``null`` scores (JSONL), as translation
gives it no output. Outputs appear atomically when scoring succeeds.
"""

from __future__ import annotations

import json
import os
from typing import Any

from nmt_cli.decoding import Translator
from nmt_cli.decoding.scoring import PairScore
from nmt_cli.errors import InputError
from nmt_cli.fileio import open_output
from nmt_cli.progress import Progress
from nmt_cli.textio import CHUNK_LINES, display_name, iter_chunks, iter_parallel, one_line

__all__ = ["score_file", "score_nbest_file"]


def _text_line(score: PairScore | None) -> str:
    """``log P(y | x)`` and its mean per target token (EOS counted), tab-separated."""
    return "" if score is None else f"{score.log_prob:.4f}\t{score.per_token:.4f}"


def _record(score: PairScore | None, text: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {} if text is None else {"text": one_line(text)}
    if score is None:
        return {**record, "log_prob": None, "per_token": None, "tokens": None, "token_log_probs": None}
    return {**record, "log_prob": score.log_prob, "per_token": score.per_token, "tokens": score.tokens,
            "token_log_probs": score.token_log_probs}


def score_file(translator: Translator, src_path: str | os.PathLike, tgt_path: str | os.PathLike,
               output_path: str | os.PathLike = "-", output_format: str = "text", progress: bool = True) -> int:
    """Score every (source, target) line pair; returns the number of pairs."""
    counter = Progress("score", unit="pairs", enabled=progress)
    with open_output(output_path, inputs=[src_path, tgt_path]) as out:
        for chunk in iter_chunks(iter_parallel(src_path, tgt_path), CHUNK_LINES):
            scores = translator.score([source for source, _ in chunk], [target for _, target in chunk])
            for score in scores:
                line = _text_line(score) if output_format == "text" else json.dumps(_record(score))
                out.write((line + "\n").encode("utf-8"))
            counter.update(len(chunk))
    counter.close()
    return counter.count


def _candidates(record_text: str, path: str | os.PathLike, number: int) -> list[str]:
    """The n-best texts of one JSONL record written by ``nmt translate --format jsonl``."""
    try:
        record = json.loads(record_text)
        texts = [entry["text"] for entry in record["nbest"]]
    except (ValueError, KeyError, TypeError):
        raise InputError(display_name(path), "expected a JSONL record of nmt translate --format jsonl "
                                             "(with an nbest list of texts)", number) from None
    if not all(isinstance(text, str) for text in texts):
        raise InputError(display_name(path), "an nbest entry's text is not a string", number)
    return texts


def score_nbest_file(translator: Translator, src_path: str | os.PathLike, nbest_path: str | os.PathLike,
                     output_path: str | os.PathLike = "-", progress: bool = True) -> int:
    """Score every candidate of every n-best list; one JSONL record per source line,
    ``{"nbest": [{"text", "log_prob", "per_token", "tokens", "token_log_probs"}, ...]}``
    in the candidates' order."""
    counter = Progress("score", unit="lists", enabled=progress)
    numbered = ((source, _candidates(text, nbest_path, number))
                for number, (source, text) in enumerate(iter_parallel(src_path, nbest_path), start=1))
    with open_output(output_path, inputs=[src_path, nbest_path]) as out:
        for chunk in iter_chunks(numbered, CHUNK_LINES):
            flat = [(source, candidate) for source, candidates in chunk for candidate in candidates]
            scores = iter(translator.score([source for source, _ in flat], [candidate for _, candidate in flat]))
            for _, candidates in chunk:
                record = {"nbest": [_record(next(scores), candidate) for candidate in candidates]}
                out.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
            counter.update(len(chunk))
    counter.close()
    return counter.count
