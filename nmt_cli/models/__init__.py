"""Model families behind one interface (see :mod:`nmt_cli.models.base`).

``build_model(config, src_vocab_size, tgt_vocab_size, joint_vocab)`` looks the
architecture up by name in :data:`~nmt_cli.registry.MODEL_FAMILIES`; every family
registers a class with a ``from_config`` constructor in a module of this package.
"""

from __future__ import annotations

from nmt_cli.config import ModelConfig
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.registry import MODEL_FAMILIES


def build_model(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool) -> Seq2SeqModel:
    """Instantiate the architecture ``config.arch`` for the given vocabularies."""
    family = MODEL_FAMILIES.get(config.arch)
    return family.from_config(config, src_vocab_size, tgt_vocab_size, joint_vocab)


__all__ = ["Seq2SeqModel", "build_model"]
