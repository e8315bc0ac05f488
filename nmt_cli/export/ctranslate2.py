"""Our Transformer as a CTranslate2 model directory (``nmt export``).

The weights go one to one into CTranslate2's ``TransformerSpec``: the sublayer
LayerNorms of post-norm (``LayerNorm(x + F(x))``) and pre-norm (``x + F(LayerNorm(x))``,
final LayerNorm on each stack) layers, our fused ``[W^Q; W^K; W^V]`` (split into Q and
KV for cross-attention), the FFN, the embeddings (``sqrt(d_model)`` scaling on or off,
shared tables stored once by CTranslate2) and the bias-free output projection.

Positions are always written as an explicit table. CTranslate2's built-in sinusoids are
not ours: it concatenates ``[sin, cos]`` with timescales ``10000^(-i / (d/2 - 1))`` and
counts positions from 1, while we interleave ``sin, cos`` with ``10000^(-2i / d)`` from
position 0. The table has ``model.max_positions`` rows (learned positions: the trained
table), so sources and outputs are limited to that many pieces.

RNN and linear-attention models, and kernels other than ``softmax`` (``model.attention_kernel``),
have no CTranslate2 equivalent and are refused.

With a lexical shortlist (:mod:`nmt_cli.shortlist`) the export also holds ``vmap.txt``,
CTranslate2's vocabulary map of the same candidates (:func:`write_vocabulary_map`), which
``translate_batch(..., use_vmap=True)`` reads, and its record names the shortlist.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt_cli import __version__
from nmt_cli.checkpoint import Checkpoint, load_averaged, load_checkpoint
from nmt_cli.errors import NmtError
from nmt_cli.export.record import EXPORT_RECORD, RECORD_FORMAT, is_export_dir
from nmt_cli.fileio import atomic_directory, atomic_write_json
from nmt_cli.models.embeddings import LearnedPositions, sinusoidal_table
from nmt_cli.models.transformer import Transformer
from nmt_cli.shortlist import Shortlist, read_shortlist
from nmt_cli.specials import BOS_ID, EOS_ID, UNK_ID

#: weight types ``nmt export --quantization`` accepts (CTranslate2's names)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16")
INSTALL_HINT = "pip install 'nmt-cli[ctranslate2]'"
#: CTranslate2's vocabulary map in an export directory (the name it loads)
VOCABULARY_MAP = "vmap.txt"


def require_ctranslate2() -> Any:
    """The ``ctranslate2`` module, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise NmtError(f"CTranslate2 is not installed: {INSTALL_HINT}") from None
    return ctranslate2


def export_ctranslate2(checkpoint: str | os.PathLike, out_dir: str | os.PathLike,
                       quantization: str = "float32", average: str | None = None,
                       shortlist: Shortlist | str | os.PathLike | None = None) -> Path:
    """Write ``out_dir`` (replaced atomically if it is an earlier export) and return it.

    ``checkpoint`` is a checkpoint or run directory; ``average`` (``last:N``) averages the
    run's last N checkpoints first. ``shortlist`` (or its file), built with the model's
    SentencePiece model, is written as the vocabulary map. Refuses to write over a
    directory that is not an export.
    """
    out_dir = Path(out_dir)
    if isinstance(shortlist, (str, os.PathLike)):
        shortlist = read_shortlist(shortlist)
    if quantization not in QUANTIZATIONS:
        raise NmtError(f"unknown quantization {quantization!r}; choose from {', '.join(QUANTIZATIONS)}")
    if out_dir.exists() and not is_export_dir(out_dir) and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise NmtError(f"{out_dir}: exists and is not an earlier export; choose a new or empty directory")
    loaded = load_averaged(average, checkpoint) if average else load_checkpoint(checkpoint)
    arch = loaded.config.model.arch
    if arch != "transformer":
        raise NmtError(f"{loaded.path}: {arch} models cannot be exported to CTranslate2, which runs only "
                       "softmax-attention Transformers; translate them with the torch engine")
    kernel = loaded.config.model.attention_kernel
    if kernel != "softmax":
        raise NmtError(f"{loaded.path}: a model with the {kernel} attention kernel (model.attention_kernel) cannot "
                       "be exported to CTranslate2, which runs only the softmax kernel; translate it with the torch "
                       "engine")
    if loaded.config.model.alignment_null:
        raise NmtError(f"{loaded.path}: a model with a null position (model.alignment_null) cannot be exported to "
                       "CTranslate2, which attends to the source words alone; translate it with the torch engine")
    if shortlist is not None:
        shortlist.check_tokenizer(loaded.tokenizer, str(loaded.path))
    ctranslate2 = require_ctranslate2()
    model = loaded.build_model("cpu")
    spec = transformer_spec(model, loaded)
    spec.validate()
    spec.optimize(quantization=quantization)
    with atomic_directory(out_dir, owned=_export_entry, inputs=[loaded.path]) as tmp:
        spec.save(str(tmp))
        for name, data in loaded.tokenizer.model_files().items():
            (tmp / name).write_bytes(data)
        record = export_record(loaded, quantization, positions_of(model), ctranslate2.__version__)
        if shortlist is not None:
            write_vocabulary_map(tmp / VOCABULARY_MAP, shortlist, loaded.tokenizer)
            record["shortlist"] = {**shortlist.describe(), "vocabulary_map": VOCABULARY_MAP}
        atomic_write_json(tmp / EXPORT_RECORD, record)
    return out_dir


def _export_entry(name: str) -> bool:
    """Whether a file of that name is one ``nmt export`` writes (an earlier export holding
    anything else is not replaced)."""
    return name in (EXPORT_RECORD, "model.bin", "config.json", VOCABULARY_MAP) or name.endswith(
        (".model", "_vocabulary.json", "_vocabulary.txt"))


def write_vocabulary_map(path: Path, shortlist: Shortlist, tokenizer: Any) -> None:
    """CTranslate2's vocabulary map of ``shortlist``: a line ``<TAB>frequent pieces`` (the
    empty key: candidates of every sentence) and ``source piece<TAB>target pieces`` per
    source piece. CTranslate2 adds UNK, BOS and EOS itself, and the pieces of a target prefix."""
    def pieces(ids: Any, processor: Any) -> list[str]:
        names = [processor.id_to_piece(int(i)) for i in ids]
        bad = [name for name in names if not name or any(char in name for char in " \t\n")]
        if bad:
            raise NmtError(f"{path}: the piece {bad[0]!r} cannot be written in a vocabulary map (a space or tab)")
        return names

    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\t" + " ".join(pieces(shortlist.frequent, tokenizer.tgt)) + "\n")
        for source in sorted(shortlist.translations):
            (key,) = pieces([source], tokenizer.src)
            handle.write(key + "\t" + " ".join(pieces(shortlist.translations[source], tokenizer.tgt)) + "\n")


def export_record(loaded: Checkpoint, quantization: str, positions: int, ctranslate2_version: str) -> dict:
    """The content of ``nmt-export.json``."""
    config = loaded.config.to_dict()
    return {
        "format": RECORD_FORMAT,
        "engine": "ctranslate2",
        "source_checkpoint": str(loaded.path.resolve()),
        "step": loaded.step,
        "averaged": loaded.state.get("averaged"),
        "quantization": quantization,
        "positions": positions,
        "architecture": config["model"],
        "decode": config["decode"],
        "config": config,
        "tokenizer_files": sorted(loaded.tokenizer.model_files()),
        "versions": {"nmt-cli": __version__, "ctranslate2": ctranslate2_version, "torch": torch.__version__,
                     "python": platform.python_version()},
        "exported_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def positions_of(model: Transformer) -> int:
    """Rows of the position table written for ``model``."""
    positions = model.encoder.embedding.positions
    if isinstance(positions, LearnedPositions):
        return positions.table.num_embeddings
    return model.encoder.embedding.positions.table.size(0)


def transformer_spec(model: Transformer, loaded: Checkpoint) -> Any:
    """A filled ``ctranslate2.specs.TransformerSpec`` with vocabularies and special tokens."""
    from ctranslate2.specs import transformer_spec as specs

    cfg = loaded.config.model
    pre_norm = cfg.norm_position == "pre"
    encoder = specs.TransformerEncoderSpec(cfg.encoder_layers, cfg.heads, pre_norm=pre_norm)
    decoder = specs.TransformerDecoderSpec(cfg.decoder_layers, cfg.heads, pre_norm=pre_norm)
    spec = specs.TransformerSpec(encoder, decoder)
    fill_encoder(encoder, model, pre_norm)
    fill_decoder(decoder, model, pre_norm)
    tokenizer = loaded.tokenizer
    source = [tokenizer.src.id_to_piece(i) for i in range(tokenizer.src_vocab_size)]
    target = [tokenizer.tgt.id_to_piece(i) for i in range(tokenizer.tgt_vocab_size)]
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    spec.config.unk_token = target[UNK_ID]
    spec.config.bos_token = target[BOS_ID]
    spec.config.eos_token = target[EOS_ID]
    spec.config.decoder_start_token = target[BOS_ID]
    spec.config.layer_norm_epsilon = model.decoder.layers[0].ffn_res.norm.eps
    return spec


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()


def _linear(spec: Any, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _norm(spec: Any, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _embeddings(spec: Any, embedding: Any) -> None:
    """Token table, ``sqrt(d)`` scaling and the explicit position table of one stack."""
    tokens = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    tokens.weight = _array(embedding.tokens.weight)
    spec.scale_embeddings = embedding.scale != 1.0
    positions = embedding.positions
    if isinstance(positions, LearnedPositions):
        spec.position_encodings.encodings = _array(positions.table.weight)
    else:
        spec.position_encodings.encodings = _array(sinusoidal_table(positions.table.size(0), positions.d_model))


def _self_attention(spec: Any, attention: Any, norm: torch.nn.LayerNorm) -> None:
    _linear(spec.linear[0], attention.in_proj.weight, attention.in_proj.bias)  # fused [Q; K; V]
    _linear(spec.linear[1], attention.out_proj.weight, attention.out_proj.bias)
    _norm(spec.layer_norm, norm)


def _cross_attention(spec: Any, attention: Any, norm: torch.nn.LayerNorm) -> None:
    d = attention.d_model
    weight, bias = attention.in_proj.weight, attention.in_proj.bias
    _linear(spec.linear[0], weight[:d], bias[:d])  # Q
    _linear(spec.linear[1], weight[d:], bias[d:])  # fused [K; V]
    _linear(spec.linear[2], attention.out_proj.weight, attention.out_proj.bias)
    _norm(spec.layer_norm, norm)


def _ffn(spec: Any, ffn: Any, norm: torch.nn.LayerNorm) -> None:
    _linear(spec.linear_0, ffn.linear1.weight, ffn.linear1.bias)
    _linear(spec.linear_1, ffn.linear2.weight, ffn.linear2.bias)
    _norm(spec.layer_norm, norm)


def fill_encoder(spec: Any, model: Transformer, pre_norm: bool) -> None:
    _embeddings(spec, model.encoder.embedding)
    for layer_spec, layer in zip(spec.layer, model.encoder.layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.self_res.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.ffn_res.norm)
    if pre_norm:
        _norm(spec.layer_norm, model.encoder.final_norm)


def fill_decoder(spec: Any, model: Transformer, pre_norm: bool) -> None:
    _embeddings(spec, model.decoder.embedding)
    for layer_spec, layer in zip(spec.layer, model.decoder.layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.self_res.norm)
        _cross_attention(layer_spec.attention, layer.cross_attn, layer.cross_res.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.ffn_res.norm)
    if pre_norm:
        _norm(spec.layer_norm, model.decoder.final_norm)
    _linear(spec.projection, model.output_projection.weight, None)


__all__ = ["QUANTIZATIONS", "INSTALL_HINT", "VOCABULARY_MAP", "export_ctranslate2", "require_ctranslate2",
           "transformer_spec", "write_vocabulary_map"]
