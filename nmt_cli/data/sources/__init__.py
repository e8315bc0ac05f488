"""Parallel text from every source kind through one interface: numbered (source, target) pairs.

``open_corpus(data_config)`` returns the :class:`~nmt_cli.data.sources.base.Corpus`
registered as ``data.source``. Each kind is one module of this package with a ``Corpus``
subclass registered by ``@DATA_SOURCES.register("name")``; its docstring says what it reads
(the help of ``data.source`` lists them). :mod:`~nmt_cli.data.sources.base` holds the
interface and the pairs it yields, :mod:`~nmt_cli.data.sources.local` what the readers of a
local folder share.
"""

from __future__ import annotations

from nmt_cli.config import DataConfig
from nmt_cli.data.sources.base import Corpus, Problem, RawPair, file_digest, iter_limited
from nmt_cli.data.sources.files import TextFilesCorpus
from nmt_cli.data.sources.hf import DiskDatasetCorpus, HubCorpus
from nmt_cli.data.sources.jsonl import JsonlCorpus
from nmt_cli.data.sources.synthetic import SyntheticCorpus, invert_alignment
from nmt_cli.data.sources.tsv import TsvCorpus
from nmt_cli.registry import DATA_SOURCES

__all__ = ["open_corpus", "Corpus", "Problem", "RawPair", "file_digest", "iter_limited", "SyntheticCorpus",
           "invert_alignment", "TextFilesCorpus", "TsvCorpus", "JsonlCorpus", "HubCorpus", "DiskDatasetCorpus"]


def open_corpus(data: DataConfig) -> Corpus:
    """The :class:`Corpus` registered as ``data.source``, reading ``data``."""
    return DATA_SOURCES.get(data.source)(data)
