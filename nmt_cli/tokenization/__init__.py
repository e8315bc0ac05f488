"""SentencePiece training, loading, encoding and decoding."""

from nmt_cli.tokenization.spm import Tokenizer, train_sentencepiece

__all__ = ["Tokenizer", "train_sentencepiece"]
