"""One function that loads a translator for any model directory and engine.

``nmt translate`` and ``nmt serve`` call :func:`load_translator`; what they get back has
the :class:`~nmt_cli.decoding.Translator` interface (``translate``, ``translate_stream``,
``decode``, ``tokenizer``, ``signature``) whichever engine runs it. The engines are the
entries of :data:`~nmt_cli.registry.ENGINES` (:mod:`nmt_cli.decoding.engines`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from nmt_cli.registry import ENGINES


def load_translator(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    engine: str = "auto",
    device: str = "auto",
    average: str | None = None,
    quantize: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    shortlist: str | os.PathLike | bool | None = None,
) -> Any:
    """A translator for ``path``: a checkpoint, a run directory or an ``nmt export`` directory
    (several checkpoints: an ensemble, torch engine only), by the engine named ``engine``
    (``auto``: ctranslate2 for an export, torch otherwise).

    ``quantize``: ``int8`` for the torch engine; any CTranslate2 compute type for ctranslate2
    (default: the export's own). ``overrides`` (``{"decode.beam_size": 1}``) go on top of the
    model's decoding settings.

    ``shortlist``: a lexical shortlist file (:mod:`nmt_cli.shortlist`) restricting each
    sentence's output to its candidates; None: the engine's default (an export's own
    vocabulary map for ctranslate2, none for torch); False: none at all.
    """
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return ENGINES.get(engine)(paths, device=device, average=average, quantize=quantize, overrides=overrides,
                               shortlist=shortlist)


__all__ = ["load_translator"]
