"""Word alignments from attention: forced decoding, pieces -> words, hard links, AER.

Modules: ``reader`` (the one reading of attention: heads, words, links), ``extract``
(attention of a given target), ``words`` (SentencePiece pieces -> words), ``hard``
(argmax / threshold links), ``symmetrize`` (two directions -> one), ``aer`` (AER,
precision, recall), ``model`` (a checkpoint loaded for forced decoding), ``api``
(:func:`align_corpus`), ``sweep`` (which layer/heads/shift align best on gold), ``output``
(``.align``, ``.npz``, JSON, heatmaps) and ``heatmap`` (PNG figures). ``output`` and
``heatmap`` load matplotlib, so they are not imported here. The Pharaoh ``i-j`` file
format is :mod:`nmt_cli.pharaoh` (the data layer reads it too).
"""

from nmt_cli.alignment.aer import AlignmentScore, score_alignments, score_files
from nmt_cli.alignment.api import Aligner, AlignOptions, align_corpus
from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.hard import hard_links
from nmt_cli.alignment.model import AlignmentModel
from nmt_cli.alignment.reader import AttentionReading, HeadSelection, SentenceAlignment, read_alignment
from nmt_cli.alignment.sweep import DirectionReading, SweepResult, sweep
from nmt_cli.alignment.symmetrize import symmetrize
from nmt_cli.alignment.words import aggregate_to_words
from nmt_cli.pharaoh import GoldAlignment, format_links, parse_links, read_alignments, write_alignments

__all__ = [
    "AlignOptions",
    "AttentionReading",
    "Aligner",
    "AlignmentModel",
    "AlignmentScore",
    "DirectionReading",
    "GoldAlignment",
    "HeadSelection",
    "SentenceAlignment",
    "SweepResult",
    "aggregate_to_words",
    "align_corpus",
    "forced_attention",
    "format_links",
    "hard_links",
    "parse_links",
    "read_alignment",
    "read_alignments",
    "score_alignments",
    "score_files",
    "sweep",
    "symmetrize",
    "write_alignments",
]
