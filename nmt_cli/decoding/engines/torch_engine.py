"""``--engine torch``: checkpoints (one, or several as an ensemble) in a :class:`Translator`."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from nmt_cli.decoding.translator import Translator
from nmt_cli.errors import NmtError
from nmt_cli.export import is_export_dir
from nmt_cli.registry import ENGINES

__all__ = ["load_checkpoints"]


@ENGINES.register("torch")
def load_checkpoints(paths: Sequence[str | os.PathLike], device: str = "auto", average: str | None = None,
                     quantize: str | None = None, overrides: Mapping[str, Any] | None = None,
                     shortlist: str | os.PathLike | bool | None = None) -> Translator:
    """A :class:`Translator` for checkpoint or run directories (several: an ensemble);
    ``quantize``: ``int8`` or None; ``shortlist``: a lexical shortlist file (None, False: none)."""
    for path in paths:
        if is_export_dir(path):
            raise NmtError(f"{path}: an nmt export (CTranslate2) directory runs only with --engine ctranslate2")
    return Translator.from_checkpoint(paths, device=device, average=average, overrides=overrides, quantize=quantize,
                                      shortlist=shortlist or None)
