"""Files ``nmt align`` writes into its output directory (each one atomically)::

    <out>/alignments.align   hard links, Pharaoh ``i-j`` (0-based source-target), a line per pair
    <out>/soft.npz           per pair k: matrix_k (T_words, S_words), src_words_k, tgt_words_k,
                             links_k (n, 2); plus settings (a JSON string); no pickles
    <out>/soft.json          {"settings": ..., "sentences": [{"line", "src_words", "tgt_words",
                             "matrix", "links"}]}
    <out>/settings.json      the settings alone (checkpoint, step, layer/heads, shift, method, ...)
    <out>/heatmaps/line-N.png   heatmaps of the chosen pairs (N = 1-based line number)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from nmt_cli.alignment.heatmap import save_heatmap
from nmt_cli.alignment.reader import SentenceAlignment
from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_open, atomic_write_json
from nmt_cli.pharaoh import GoldAlignment, format_links, write_alignments

__all__ = ["write_outputs", "save_soft_npz", "load_soft_npz", "save_soft_json", "write_heatmaps"]

JSON_DECIMALS = 4


def save_soft_npz(path: str | os.PathLike, sentences: Sequence[SentenceAlignment], settings: dict) -> None:
    """Soft matrices with their words and links; ``np.load`` reads it without ``allow_pickle``."""
    arrays: dict[str, np.ndarray] = {"settings": np.array(json.dumps(settings))}
    for k, sentence in enumerate(sentences):
        arrays[f"matrix_{k}"] = sentence.matrix.astype(np.float32)
        arrays[f"src_words_{k}"] = np.array(sentence.src_words, dtype=str)
        arrays[f"tgt_words_{k}"] = np.array(sentence.tgt_words, dtype=str)
        arrays[f"links_{k}"] = np.array(sentence.links, dtype=np.int64).reshape(-1, 2)
    with atomic_open(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)


def load_soft_npz(path: str | os.PathLike) -> tuple[list[SentenceAlignment], dict]:
    """Read what :func:`save_soft_npz` wrote: the sentences and the settings."""
    try:
        with np.load(path, allow_pickle=False) as data:
            count = sum(1 for key in data.files if key.startswith("matrix_"))
            sentences = [
                SentenceAlignment(
                    src_words=data[f"src_words_{k}"].tolist(),
                    tgt_words=data[f"tgt_words_{k}"].tolist(),
                    matrix=data[f"matrix_{k}"],
                    links=[(int(i), int(j)) for i, j in data[f"links_{k}"]],
                )
                for k in range(count)
            ]
            settings = json.loads(str(data["settings"]))
    except (OSError, KeyError, ValueError) as exc:
        raise NmtError(f"{path}: not a soft-alignment file written by nmt align ({exc})") from None
    return sentences, settings


def save_soft_json(path: str | os.PathLike, sentences: Sequence[SentenceAlignment], settings: dict) -> None:
    """The same content as JSON, weights rounded to 4 decimals."""
    atomic_write_json(path, {
        "settings": settings,
        "sentences": [
            {
                "line": k + 1,
                "src_words": sentence.src_words,
                "tgt_words": sentence.tgt_words,
                "matrix": np.round(sentence.matrix, JSON_DECIMALS).tolist(),
                "links": format_links(sentence.links),
            }
            for k, sentence in enumerate(sentences)
        ],
    })


def write_heatmaps(
    directory: str | os.PathLike,
    sentences: Sequence[SentenceAlignment],
    lines: Sequence[int],
    gold: Sequence[GoldAlignment] | None = None,
) -> list[Path]:
    """One PNG per chosen 1-based line number, with hard links (and gold links) drawn on top."""
    directory = Path(directory)
    written = []
    for line in lines:
        if not 1 <= line <= len(sentences):
            raise NmtError(f"heatmap line {line} is out of range: there are {len(sentences)} sentence pairs")
        sentence = sentences[line - 1]
        path = directory / f"line-{line:06d}.png"
        save_heatmap(path, sentence.matrix, sentence.src_words, sentence.tgt_words, links=sentence.links,
                     gold=gold[line - 1] if gold is not None else None, title=f"line {line}")
        written.append(path)
    return written


def write_outputs(
    out_dir: str | os.PathLike,
    sentences: Sequence[SentenceAlignment],
    settings: dict,
    heatmap_lines: Sequence[int] = (),
    gold: Sequence[GoldAlignment] | None = None,
) -> list[Path]:
    """Write every output file listed in the module docstring; return their paths."""
    out_dir = Path(out_dir)
    paths = [out_dir / name for name in ("alignments.align", "soft.npz", "soft.json", "settings.json")]
    write_alignments(paths[0], (sentence.links for sentence in sentences))
    save_soft_npz(paths[1], sentences, settings)
    save_soft_json(paths[2], sentences, settings)
    atomic_write_json(paths[3], settings)
    return paths + write_heatmaps(out_dir / "heatmaps", sentences, heatmap_lines, gold)
