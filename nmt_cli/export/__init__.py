"""Export trained models to inference runtimes (today: CTranslate2).

``export_ctranslate2(checkpoint, out_dir, quantization)`` writes a CTranslate2 model
directory that carries everything needed to translate without the run: the converted
weights, the SentencePiece model(s) and ``nmt-export.json`` (what was exported, from
where, with which tools and decoding defaults). :func:`read_export_record` recognises
such a directory.
"""

from nmt_cli.export.ctranslate2 import QUANTIZATIONS, export_ctranslate2, require_ctranslate2
from nmt_cli.export.record import EXPORT_RECORD, ExportRecord, is_export_dir, read_export_record

__all__ = [
    "EXPORT_RECORD",
    "ExportRecord",
    "QUANTIZATIONS",
    "export_ctranslate2",
    "is_export_dir",
    "read_export_record",
    "require_ctranslate2",
]
