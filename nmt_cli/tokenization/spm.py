"""SentencePiece models for source and target, joint or separate, with fixed special ids.

The tokenizer travels as model *bytes* (stored in the prepared directory and copied into
every checkpoint), so a checkpoint can always detokenise its own output.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

from nmt_cli.errors import NmtError
from nmt_cli.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID

WORD_BOUNDARY = "\u2581"  # SentencePiece's word-start marker


def word_spans(pieces: Sequence[str]) -> list[range]:
    """Piece index ranges of each word: ``["\u2581the", "\u2581ca", "t"] -> [range(0, 1), range(1, 3)]``.

    A word starts at every piece that begins with :data:`WORD_BOUNDARY` (and at the first
    piece), so word ``k`` is the ``k``-th whitespace token of the encoded text.
    """
    starts = [k for k, piece in enumerate(pieces) if k == 0 or piece.startswith(WORD_BOUNDARY)]
    ends = starts[1:] + [len(pieces)]
    return [range(start, end) for start, end in zip(starts, ends)]


def train_sentencepiece(
    sentences: Iterable[str],
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    input_sentence_size: int = 2_000_000,
    seed: int = 1,
    num_threads: int = 2,
) -> bytes:
    """Train a SentencePiece model on ``sentences`` and return the model bytes.

    Special ids are fixed (pad 0, unk 1, bos 2, eos 3) so every model agrees on them.
    ``input_sentence_size`` caps how many sentences SentencePiece samples (reservoir
    sampling inside the trainer) so memory stays bounded on large corpora.
    A vocabulary too large for the data is shrunk to the largest size SentencePiece accepts.
    """
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    options = dict(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        num_threads=num_threads,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    spm.SentencePieceTrainer.train(**options)
    return model.getvalue()


class Tokenizer:
    """Source and target SentencePiece processors (the same one when ``joint``)."""

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None):
        self.joint = tgt_model is None or tgt_model == src_model
        self._src_bytes = src_model
        self._tgt_bytes = src_model if tgt_model is None else tgt_model
        self.src = spm.SentencePieceProcessor(model_proto=self._src_bytes)
        self.tgt = self.src if self.joint else spm.SentencePieceProcessor(model_proto=self._tgt_bytes)
        for name, proc in (("source", self.src), ("target", self.tgt)):
            if (proc.pad_id(), proc.unk_id(), proc.bos_id(), proc.eos_id()) != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
                raise NmtError(f"{name} SentencePiece model does not use the fixed special ids pad=0 unk=1 bos=2 eos=3")

    # ---- files -------------------------------------------------------------------
    @classmethod
    def from_files(cls, src_path: str | os.PathLike, tgt_path: str | os.PathLike | None = None) -> "Tokenizer":
        def read(path: str | os.PathLike) -> bytes:
            path = Path(path)
            if not path.is_file():
                raise NmtError(f"{path}: SentencePiece model not found")
            return path.read_bytes()

        return cls(read(src_path), read(tgt_path) if tgt_path is not None else None)

    def model_files(self) -> dict[str, bytes]:
        """File name -> bytes, as stored in prepared directories and checkpoints."""
        if self.joint:
            return {"spm.model": self._src_bytes}
        return {"spm.src.model": self._src_bytes, "spm.tgt.model": self._tgt_bytes}

    @classmethod
    def from_directory(cls, directory: str | os.PathLike) -> "Tokenizer":
        directory = Path(directory)
        if (directory / "spm.model").is_file():
            return cls.from_files(directory / "spm.model")
        return cls.from_files(directory / "spm.src.model", directory / "spm.tgt.model")

    # ---- sizes -------------------------------------------------------------------
    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    # ---- encode / decode ----------------------------------------------------------
    def encode_src(self, text: str) -> list[int]:
        return self.src.encode(text, out_type=int)

    def encode_tgt(self, text: str) -> list[int]:
        return self.tgt.encode(text, out_type=int)

    def tgt_segmentations(self, text: str, limit: int) -> list[list[int]]:
        """Up to ``limit`` ways to write ``text`` in target pieces: the usual one
        (:meth:`encode_tgt`) first, then the others that spell the same normalised string,
        fewest pieces first (a model may produce any of them; BPE has no n-best list).
        Text with pieces the vocabulary lacks gives the usual one alone."""
        usual = self.encode_tgt(text)
        spelled = "".join(self.tgt_pieces(usual))
        if UNK_ID in usual or not spelled:
            return [usual]
        size = len(spelled)
        known = {spelled[i:j]: self.tgt.piece_to_id(spelled[i:j]) for i in range(size) for j in range(i + 1, size + 1)}
        known = {piece: pid for piece, pid in known.items() if pid != UNK_ID}
        fewest = [0] * (size + 1)  # fewest[i]: pieces needed to spell spelled[i:] (size + 1: impossible)
        for start in range(size - 1, -1, -1):
            fewest[start] = min((fewest[end] + 1 for end in range(start + 1, size + 1)
                                 if spelled[start:end] in known), default=size + 1)
        found: list[list[int]] = [usual]

        def spell(start: int, left: int, prefix: list[int]) -> None:
            """Every way to spell spelled[start:] in exactly ``left`` pieces, until ``limit``."""
            if len(found) >= limit:
                return
            if start == size:
                if prefix != usual:
                    found.append(list(prefix))
                return
            for end in range(size, start, -1):
                piece = spelled[start:end]
                if piece in known and fewest[end] <= left - 1 <= size - end:
                    prefix.append(known[piece])
                    spell(end, left - 1, prefix)
                    prefix.pop()

        for count in range(fewest[0], size + 1):
            spell(0, count, [])
        return found

    def encode_src_batch(self, texts: list[str]) -> list[list[int]]:
        return self.src.encode(texts, out_type=int)

    def encode_tgt_batch(self, texts: list[str]) -> list[list[int]]:
        return self.tgt.encode(texts, out_type=int)

    def decode_tgt(self, ids: Iterable[int]) -> str:
        return self.tgt.decode(_strip_specials(ids))

    def src_pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.src.id_to_piece(i) for i in ids]

    def tgt_pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.tgt.id_to_piece(i) for i in ids]


def _strip_specials(ids: Iterable[int]) -> list[int]:
    out = []
    for i in ids:
        i = int(i)
        if i == EOS_ID:
            break
        if i not in (PAD_ID, BOS_ID):
            out.append(i)
    return out
