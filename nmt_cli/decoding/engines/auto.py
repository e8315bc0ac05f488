"""``--engine auto`` (the default): ctranslate2 for an ``nmt export`` directory, torch otherwise."""

from __future__ import annotations

import os
from typing import Any, Sequence

from nmt_cli.export import is_export_dir
from nmt_cli.registry import ENGINES

__all__ = ["load_by_directory"]


@ENGINES.register("auto")
def load_by_directory(paths: Sequence[str | os.PathLike], **options: Any) -> Any:
    """The engine the directories call for, with ``options`` (as :func:`~nmt_cli.decoding.load_translator`'s)."""
    engine = "ctranslate2" if any(is_export_dir(path) for path in paths) else "torch"
    return ENGINES.get(engine)(paths, **options)
