"""Our prepared data as plain piece text, so every toolkit trains on the same pieces.

A prepared directory (``nmt prepare``) holds token ids; peers read whitespace-separated
tokens. :func:`export_pieces` writes ``<split>.src`` / ``<split>.tgt`` with the
SentencePiece pieces of each sentence and ``vocab.pieces`` with every non-special piece
in id order; each runner turns ``vocab.pieces`` into its toolkit's vocabulary format with
:func:`counted_vocabulary`, and each toolkit adds its own pad/unk/bos/eos.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common import MULTI30K

from nmt_cli.config import Config
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_open, atomic_write_text
from nmt_cli.specials import SPECIAL_IDS

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class PieceCorpus:
    """A folder of piece-tokenised splits and the shared vocabulary."""

    path: Path

    def text(self, split: str, side: str) -> Path:
        """``<split>.src`` or ``<split>.tgt``: one sentence of space-separated pieces per line."""
        return self.path / f"{split}.{side}"

    @property
    def vocabulary(self) -> list[str]:
        """Every non-special piece, in SentencePiece id order."""
        return (self.path / "vocab.pieces").read_text(encoding="utf-8").split("\n")[:-1]

    def sentences(self, split: str, side: str) -> int:
        with self.text(split, side).open(encoding="utf-8") as handle:
            return sum(1 for _ in handle)


def export_pieces(prepared_dir: Path, out_dir: Path, limits: dict[str, int] | None = None) -> PieceCorpus:
    """Write the piece text of each split (the first ``limits[split]`` sentences when given).

    Skipped when ``out_dir`` already holds an export; the vocabulary must be joint,
    because every comparison ties source, target and output embeddings.
    """
    corpus = PieceCorpus(out_dir)
    if (out_dir / "vocab.pieces").is_file():
        return corpus
    data = PreparedData(prepared_dir)
    tokenizer = data.tokenizer
    if not tokenizer.joint:
        raise NmtError(f"{prepared_dir}: the benchmarks need a joint SentencePiece vocabulary")
    limits = limits or {}
    for split in SPLITS:
        parallel = data.split(split)
        count = min(len(parallel), limits.get(split, len(parallel)))
        for side, array, to_pieces in (("src", parallel.src, tokenizer.src_pieces),
                                       ("tgt", parallel.tgt, tokenizer.tgt_pieces)):
            with atomic_open(corpus.text(split, side)) as handle:
                for index in range(count):
                    handle.write(" ".join(to_pieces(array[index])) + "\n")
    special = set(SPECIAL_IDS.values())
    pieces = [tokenizer.tgt_pieces([i])[0] for i in range(tokenizer.tgt_vocab_size) if i not in special]
    atomic_write_text(out_dir / "vocab.pieces", "".join(piece + "\n" for piece in pieces))
    return corpus


def counted_vocabulary(corpus: PieceCorpus, separator: str) -> str:
    """``piece<separator>count`` lines with counts falling in id order, so order is kept.

    OpenNMT-py (tab) and fairseq (space) read such files; a toolkit that sorts by count
    then keeps SentencePiece's order, and none drops a piece for being rare.
    """
    pieces = corpus.vocabulary
    return "".join(f"{piece}{separator}{len(pieces) - rank + 1}\n" for rank, piece in enumerate(pieces))


def prepare_multi30k(work_dir: Path, quick: bool) -> Path:
    """``nmt prepare`` Multi30k de->en (train / val / test2016), joint 8k SentencePiece; reused when done.

    ``quick``: the first 2,000 training and 100 evaluation pairs, a 1,000-piece vocabulary.
    """
    if not (MULTI30K / "train.de").is_file():
        raise NmtError(f"{MULTI30K}: Multi30k not found (set NMT_SHARED_DATA)")
    data = {"source": "files", "path": str(MULTI30K), "src_lang": "de", "tgt_lang": "en",
            "train_split": "train", "valid_split": "val", "test_split": "test2016",
            "joint_vocab": True, "vocab_size": 1000 if quick else 8000}
    if quick:
        data.update(max_train_pairs=2000, max_eval_pairs=100)
    out = work_dir / ("multi30k-quick" if quick else "multi30k")
    prepare(Config.from_dict({"data": data}), out, progress=False)
    return out
