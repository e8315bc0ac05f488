"""One function that loads a translator for any model directory and engine.

``nmt translate`` and ``nmt serve`` call :func:`load_translator`; what they get back has
the :class:`~nmt_cli.decoding.Translator` interface (``translate``, ``translate_stream``,
``decode``, ``tokenizer``, ``signature``) whichever engine runs it.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping, Sequence

from nmt_cli.decoding.translator import Translator
from nmt_cli.errors import NmtError
from nmt_cli.export import export_ctranslate2, is_export_dir

#: ``--engine`` choices: ``auto`` is ctranslate2 for an exported directory, torch otherwise
ENGINES = ("auto", "torch", "ctranslate2")


def load_translator(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    engine: str = "auto",
    device: str = "auto",
    average: str | None = None,
    quantize: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """A translator for ``path``: a checkpoint, a run directory or an ``nmt export`` directory
    (several checkpoints: an ensemble, torch engine only).

    ``engine="ctranslate2"`` on a checkpoint converts it first (into a temporary directory,
    removed once loaded), with ``quantize`` as the weight type. ``quantize``: ``int8`` for the
    torch engine; any CTranslate2 compute type for ctranslate2 (default: the export's own).
    ``overrides`` (``{"decode.beam_size": 1}``) go on top of the model's decoding settings.
    """
    if engine not in ENGINES:
        raise NmtError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if len(paths) > 1:
        if engine == "ctranslate2" or any(is_export_dir(p) for p in paths):
            raise NmtError("an ensemble of several --checkpoint runs only on the torch engine")
        return Translator.from_checkpoint(paths, device=device, average=average, overrides=overrides,
                                          quantize=quantize)
    (path,) = paths
    exported = is_export_dir(path)
    if engine == "auto":
        engine = "ctranslate2" if exported else "torch"
    if engine == "torch":
        if exported:
            raise NmtError(f"{path}: an nmt export (CTranslate2) directory runs only with --engine ctranslate2")
        return Translator.from_checkpoint(path, device=device, average=average, overrides=overrides,
                                          quantize=quantize)
    from nmt_cli.decoding.ctranslate2_engine import CTranslate2Translator

    if exported:
        if average:
            raise NmtError(f"{path}: --average applies to training checkpoints; use nmt export --average")
        return CTranslate2Translator.from_export(path, device, quantize, overrides)
    with tempfile.TemporaryDirectory(prefix="nmt-ct2-") as scratch:
        exported_dir = export_ctranslate2(path, os.path.join(scratch, "model"), quantize or "float32", average)
        return CTranslate2Translator.from_export(exported_dir, device, None, overrides, checkpoint=str(path))


__all__ = ["ENGINES", "load_translator"]
