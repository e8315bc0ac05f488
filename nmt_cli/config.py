"""Settings as frozen dataclasses, loaded from YAML and overridden from the command line.

A configuration has five sections: ``data`` (what ``nmt prepare`` reads and how it
cleans and tokenises), ``model`` (architecture and sizes), ``train``, ``decode`` and
``recipe`` (descriptive metadata shown by ``make recipes``).

The whole config is validated here and only here, when it is loaded or built: types
and choices of every key, ranges (``setting(..., at_least=1)``) and the rules that tie
keys of a section together (``nbest <= beam_size``, ``d_model`` divisible by
``heads``, ...). Every problem is reported at once, one line each naming the key, the
value and what is allowed (:class:`ConfigError`); the modules that read a config trust
it. ``Config.to_yaml`` writes the resolved settings so any run can be repeated.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import UserString
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from nmt_cli.errors import ConfigError
from nmt_cli.registry import (ATTENTION_KERNELS, ATTENTION_SCORES, DATA_SOURCES, MODEL_FAMILIES, OBJECTIVES,
                              SEARCH_STRATEGIES, Registry)
from nmt_cli.textio import read_lines

__all__ = [
    "Config",
    "DataConfig",
    "ModelConfig",
    "TrainConfig",
    "DecodeConfig",
    "RecipeConfig",
    "load_config",
    "parse_overrides",
    "config_replace",
    "attention_shape",
]


#: where the linear-attention Transformer may use linear attention (``model.linear_sites``)
LINEAR_SITES = ("encoder_self", "decoder_self", "cross")
TRANSFORMER_ARCHS = ("transformer", "linear_transformer", "mask_align")


def choice(default: Any, *choices: Any, help: str = "") -> Any:
    """A dataclass field whose value must be one of ``choices``."""
    return field(default=default, metadata={"choices": choices, "help": help})


def registered(registry: Registry, default: str, help: str = "", *, also: tuple[str, ...] = ()) -> Any:
    """A dataclass field naming an entry of ``registry`` (:mod:`nmt_cli.registry`): a new
    entry is a choice as soon as it registers, with nothing to list here. ``also``: values
    accepted besides the entries (``auto``, resolved by the section)."""
    return field(default=default, metadata={"registry": registry, "also": also, "help": help})


class EntriesHelp(UserString):
    """A registered key's help that ends with each entry's name and summary (the first line of
    its docstring), made when it is read: the entries register after this module is imported."""

    def __init__(self, lead: str, registry: Registry):
        self.lead = lead
        self.registry = registry

    @property
    def data(self) -> str:  # type: ignore[override]
        entries = [f"{name}: {_summary(self.registry.get(name))}" for name in self.registry.names()]
        return "; ".join([self.lead, *entries])


def _summary(entry: Any) -> str:
    """The first line of an entry's docstring, without its full stop."""
    lines = (entry.__doc__ or "").strip().splitlines()
    return lines[0].rstrip(".") if lines else ""


def setting(default: Any, help: str = "", *, at_least: float | None = None, above: float | None = None,
            below: float | None = None, at_most: float | None = None, items: tuple = ()) -> Any:
    """A dataclass field with its help text and, for numbers, the range it must lie in
    (``items``: the values a list may hold)."""
    bounds = {"at_least": at_least, "above": above, "below": below, "at_most": at_most}
    return field(default=default, metadata={"help": help, "items": items,
                                            **{k: v for k, v in bounds.items() if v is not None}})


_BOUNDS = {
    "at_least": (lambda value, bound: value >= bound, "at least"),
    "above": (lambda value, bound: value > bound, "above"),
    "below": (lambda value, bound: value < bound, "below"),
    "at_most": (lambda value, bound: value <= bound, "at most"),
}


def _field_problems(section: str, config: Any) -> list[str]:
    """Values of ``config`` (a section) outside their declared range or choices."""
    problems = []
    for item in fields(config):
        value, meta = getattr(config, item.name), item.metadata
        key = f"config key '{section}.{item.name}'"
        if meta.get("choices") and value not in meta["choices"]:
            problems.append(f"{key}: {value!r} is not one of: {', '.join(map(str, meta['choices']))}")
        if "registry" in meta and value not in (valid := [*meta["also"], *meta["registry"].names()]):
            problems.append(f"{key}: {value!r} is not one of: {', '.join(valid)}")
        for entry in value if meta.get("items") else ():
            if entry not in meta["items"]:
                problems.append(f"{key}: {entry!r} is not one of: {', '.join(meta['items'])}")
        for name, (holds, words) in _BOUNDS.items():
            if name in meta and not holds(value, meta[name]):
                problems.append(f"{key}: must be {words} {meta[name]:g}, got {value!r}")
    return problems


class Validated:
    """Checks a section when it is built: declared ranges first, then :meth:`rules`.

    Every problem of the section is raised together in one :class:`ConfigError`, one
    line each.
    """

    section = ""

    def __post_init__(self) -> None:
        problems = _field_problems(self.section, self)
        if not problems:
            problems = self.rules()
        if problems:
            raise ConfigError("\n".join(problems))

    def rules(self) -> list[str]:
        """Problems that involve several keys of the section (none by default)."""
        return []


@dataclass(frozen=True)
class CorpusConfig(Validated):
    """One more training corpus (an entry of ``data.corpora``), mixed in with a sampling weight."""

    section = "data.corpora"

    name: str = setting("", "a short name for reports and the manifest (unique, not 'main')")
    source: str = registered(DATA_SOURCES, "files", "as data.source, a source that can be mixed in (not synthetic)")
    path: str = setting("", "as data.path")
    hf_config: str = setting("", "as data.hf_config")
    split: str = setting("train", "the split of this source to train on")
    weight: float = setting(1.0, "expected times each pair is drawn per epoch (4: upsampled, 0.5: half)",
                            above=0)

    def rules(self) -> list[str]:
        problems = []
        if not self.name or self.name == "main":
            problems.append(f"config key 'data.corpora.name': each corpus needs a name other than 'main', "
                            f"got {self.name!r}")
        if not self.path or not self.split:
            problems.append(f"config key 'data.corpora' ({self.name}): path and split are required")
        if not DATA_SOURCES.get(self.source).mixable:
            mixable = [name for name in DATA_SOURCES.names() if DATA_SOURCES.get(name).mixable]
            problems.append(f"config key 'data.corpora.source': {self.source!r} cannot be mixed in (a corpus names "
                            f"only a path and a split); valid: {', '.join(mixable)}")
        return problems


@dataclass(frozen=True)
class DataConfig(Validated):
    """Where parallel text comes from, how it is cleaned and how it is tokenised."""

    section = "data"
    #: keys that change how preparation reads its input, how much memory it uses or how it cuts its
    #: files, never the data it writes: neither the prepared data's fingerprint nor a resumed run's
    #: checks look at them
    RESOURCE_KEYS: typing.ClassVar[frozenset[str]] = frozenset({"dedup_memory_mb", "streaming", "shard_pairs"})

    source: str = registered(DATA_SOURCES, "synthetic", EntriesHelp("where the pairs come from", DATA_SOURCES))
    path: str = setting("", "folder, dataset id or save_to_disk folder, depending on `source`")
    hf_config: str = setting("", "dataset configuration name for `source: hf`, e.g. de-en")
    streaming: bool = setting(
        False, "`source: hf` (and hf entries of data.corpora): read each split as a stream "
        "(load_dataset(..., streaming=True)), once, without downloading the dataset whole into the Hugging Face "
        "cache first; the prepared data is the same either way",
    )
    src_lang: str = setting("de")
    tgt_lang: str = setting("en")
    train_split: str = setting("train", "name of the training split in the source")
    valid_split: str = setting("validation", "name of the validation split in the source")
    test_split: str = setting("test", "name of the test split in the source")
    alignment_path: str = setting(
        "", "folder with <split>.align word links (Pharaoh i-j over whitespace words, one line per pair of the "
        "source split) for the splits that have them: guide training (train.alignment_weight) and give the "
        "validation AER; empty = none",
    )
    max_train_pairs: int = setting(0, "keep only the first N training pairs of each training corpus (0 = all)",
                                   at_least=0)
    max_eval_pairs: int = setting(0, "keep only the first N validation/test pairs (0 = all)", at_least=0)
    weight: float = setting(1.0, "sampling weight of this source's training split beside data.corpora "
                                 "(expected draws of each pair per epoch)", above=0)
    corpora: tuple[CorpusConfig, ...] = setting(
        (), "more training corpora mixed in by weight: a list of {name, source, path, hf_config, split, weight}; "
            "validation and test come from data.source alone",
    )
    synthetic_train_size: int = setting(20000, at_least=1)
    synthetic_valid_size: int = setting(500, at_least=0)
    synthetic_test_size: int = setting(500, at_least=0)
    synthetic_seed: int = setting(1)
    normalize: bool = setting(True, "Unicode NFC and whitespace normalisation")
    min_length: int = setting(1, "minimum words per side (training split)", at_least=0)
    max_length: int = setting(250, "maximum words per side (training split; 0 = no limit)", at_least=0)
    max_length_ratio: float = setting(3.0, "maximum word-count ratio between sides (0 = no limit)", at_least=0)
    dedup: bool = setting(False, "drop repeated training pairs")
    dedup_memory_mb: float = setting(
        256.0, "memory data.dedup may use, about: the pairs' hashes are sorted in runs that fit it, spilled to "
        "disk inside the directory being prepared and merged; any size gives the same output", above=0,
    )
    on_invalid: str = choice("error", "error", "skip", help="bad pairs: stop with an error, or skip and count")
    spm_model_type: str = choice("bpe", "bpe", "unigram")
    vocab_size: int = setting(8000, at_least=5)
    joint_vocab: bool = setting(True, "one SentencePiece model for both languages")
    character_coverage: float = setting(1.0, above=0, at_most=1)
    spm_input_sentence_size: int = setting(2_000_000, "sentences sampled to train SentencePiece", at_least=1)
    spm_seed: int = setting(1)
    shard_pairs: int = setting(
        1_000_000, "most pairs per token shard of a prepared split (each corpus of data.corpora gets shards of "
        "its own); the data is the same whatever the size", at_least=1,
    )

    def rules(self) -> list[str]:
        problems = []
        if self.src_lang == self.tgt_lang:
            problems.append(f"config keys 'data.src_lang' and 'data.tgt_lang' are both {self.src_lang!r}; "
                            "they must differ")
        if self.source == "synthetic":
            if {self.src_lang, self.tgt_lang} != {"de", "en"}:
                problems.append(f"config key 'data.source': the synthetic corpus is German-English; set "
                                f"data.src_lang/tgt_lang to de/en or en/de (got {self.src_lang}/{self.tgt_lang})")
        else:
            if not self.path:
                problems.append(f"config key 'data.path' is required for data.source: {self.source} "
                                "(the folder, dataset id or save_to_disk folder)")
            if not self.train_split:
                problems.append("config key 'data.train_split' is empty; a training split is required")
        if self.source == "synthetic" and self.alignment_path:
            problems.append("config key 'data.alignment_path': the synthetic corpus brings its own word links; "
                            "leave it empty")
        if self.alignment_path and self.corpora:
            problems.append("config key 'data.alignment_path': word links cannot be combined with data.corpora yet; "
                            "prepare the guided data from one source")
        if self.streaming and "hf" not in (self.source, *(corpus.source for corpus in self.corpora)):
            problems.append(f"config key 'data.streaming' reads Hugging Face hub datasets (source: hf), but "
                            f"data.source is {self.source!r} and no data.corpora entry is hf; leave it false")
        names = [corpus.name for corpus in self.corpora]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            problems.append(f"config key 'data.corpora': the name {repeated[0]!r} is used twice")
        return problems


@dataclass(frozen=True)
class ModelConfig(Validated):
    """Architecture and sizes; ``arch`` names an entry of the model registry."""

    section = "model"

    arch: str = registered(
        MODEL_FAMILIES, "transformer",
        help="the model family: transformer, linear_transformer, rnn_bahdanau, rnn_luong, or mask_align (a word "
        "aligner, Mask-Align, Chen et al. 2021, that cannot translate)",
    )
    # Transformer family
    d_model: int = setting(512, at_least=1)
    heads: int = setting(8, at_least=1)
    ffn_dim: int = setting(2048, at_least=1)
    encoder_layers: int = setting(6, at_least=1)
    decoder_layers: int = setting(6, at_least=1)
    dropout: float = setting(0.1, at_least=0, below=1)
    attention_dropout: float = setting(0.0, at_least=0, below=1)
    activation_dropout: float = setting(0.0, at_least=0, below=1)
    norm_position: str = choice("post", "post", "pre", help="post-norm as in the paper, or pre-norm")
    positions: str = choice("sinusoidal", "sinusoidal", "learned")
    max_positions: int = setting(1024, "table size for learned positions", at_least=1)
    scale_embeddings: bool = setting(
        True, "multiply token embeddings by the square root of their width (d_model, or embed_dim for the RNNs)"
    )
    tie_embeddings: bool = setting(
        True, "share decoder input and output embeddings (and the source's when the vocabulary is joint)"
    )
    linear_sites: tuple[str, ...] = setting(
        ("decoder_self",),
        "linear_transformer: which attentions use linear attention "
        "(any of encoder_self, decoder_self, cross)",
        items=LINEAR_SITES,
    )
    linear_chunk_size: int = setting(64, "causal linear attention: positions per chunk in training", at_least=1)
    attention_kernel: str = registered(
        ATTENTION_KERNELS, "softmax",
        "the Transformer family's attention kernel at every site that is not linear (linear_transformer: "
        "model.linear_sites take linear)",
    )
    # RNN family
    rnn_cell: str = choice("lstm", "lstm", "gru")
    embed_dim: int = setting(256, at_least=1)
    hidden_size: int = setting(512, at_least=1)
    rnn_layers: int = setting(1, at_least=1)
    attention: str = registered(ATTENTION_SCORES, "additive", "the RNN decoders' attention score")
    local_attention: str = choice("global", "global", "local-m", "local-p")
    local_window: int = setting(10, "D: local attention looks at [p_t - D, p_t + D]", at_least=1)
    input_feeding: bool = setting(True, "rnn_luong: feed the attentional hidden state to the next step")
    # guided alignment (train.alignment_weight > 0)
    alignment_layer: int = setting(
        -2, "decoder layer whose cross-attention head learns the word links (negative: from the end; "
        "-2 = the penultimate layer, as in Garg et al. 2019); `nmt align` reads it by default",
    )
    alignment_head: int = setting(0, "the head of model.alignment_layer that learns the word links", at_least=0)
    alignment_shift: bool = setting(
        True, "the head learns a word's links at the step where the word is the decoder input (shift-att, Chen et "
        "al. 2020), so it sees the word it aligns; false: at the step that predicts it (Garg et al. 2019)",
    )
    alignment_full_context: bool = setting(
        False, "the head learns (and `nmt align` reads) the links in a second decoder pass where every position "
        "sees the whole target, not only its prefix (full-context alignment, Garg et al. 2019); Transformer family",
    )
    alignment_null: bool = setting(
        False, "a learned null position after every source sentence, which the head learns to attend to at the "
        "target words the links leave unaligned; `nmt align` leaves a word unaligned when the null outweighs its "
        "best source word (the NULL word of the IBM models, the leak of Mask-Align); transformer and "
        "linear_transformer",
    )

    def rules(self) -> list[str]:
        problems = []
        if self.arch in TRANSFORMER_ARCHS:
            if self.d_model % self.heads:
                problems.append(f"config key 'model.d_model': {self.d_model} is not divisible by "
                                f"model.heads={self.heads}")
            if self.positions == "sinusoidal" and self.d_model % 2:
                problems.append(f"config key 'model.d_model': sinusoidal positions need an even size, "
                                f"got {self.d_model}")
        if self.arch in TRANSFORMER_ARCHS and self.attention_kernel == "linear":
            others = [name for name in ATTENTION_KERNELS.names() if name != "linear"]
            problems.append("config key 'model.attention_kernel': linear attention goes where model.linear_sites "
                            f"says (arch: linear_transformer); name the kernel of the other sites: {', '.join(others)}")
        if self.arch == "linear_transformer" and not self.linear_sites:
            problems.append(f"config key 'model.linear_sites' is empty; linear_transformer needs any of: "
                            f"{', '.join(LINEAR_SITES)}")
        if self.arch == "rnn_bahdanau" and self.hidden_size % 2:
            problems.append(f"config key 'model.hidden_size': rnn_bahdanau needs an even size (each encoder "
                            f"direction gets half), got {self.hidden_size}")
        if self.alignment_null and self.arch not in ("transformer", "linear_transformer"):
            why = ("has its own null (the leak of its attention)" if self.arch == "mask_align"
                   else "has no null position")
            problems.append(f"config key 'model.alignment_null': a {self.arch} model {why}; use a transformer or "
                            "linear_transformer, or set it to false")
        return problems


@dataclass(frozen=True)
class TrainConfig(Validated):
    """Optimisation, batching, validation and checkpointing."""

    section = "train"

    max_tokens: int = setting(
        4096, "padded tokens per batch (per process): sentences x the longer of the longest source and the "
        "longest target + 1, B * max(S, T + 1)", at_least=1,
    )
    batch_window: int = setting(
        1_000_000, "training pairs sorted by length together when batches are cut: each epoch the split is "
        "dealt into windows of about this many pairs (blocks spread over the whole split), each sorted, cut and "
        "its batches shuffled; batching memory grows with it, not with the corpus", at_least=1,
    )
    update_freq: int = setting(1, "gradient accumulation: batches per optimizer step", at_least=1)
    max_steps: int = setting(10000, "optimizer steps (0 = no limit)", at_least=0)
    max_epochs: int = setting(0, "epochs (0 = no limit)", at_least=0)
    max_minutes: float = setting(0.0, "wall-clock budget in minutes (0 = no limit)", at_least=0)
    optimizer: str = choice("adam", "adam", "adamw", "sgd")
    lr: float = setting(5e-4, "peak learning rate", at_least=0)
    adam_betas: tuple[float, ...] = setting((0.9, 0.98), "Adam's beta1 and beta2, each in [0, 1)")
    adam_eps: float = setting(1e-9, above=0)
    weight_decay: float = setting(0.0, at_least=0)
    schedule: str = choice("inverse_sqrt", "inverse_sqrt", "constant", "plateau")
    warmup_steps: int = setting(4000, at_least=0)
    plateau_factor: float = setting(0.5, above=0, below=1)
    plateau_patience: int = setting(2, at_least=0)
    clip_norm: float = setting(1.0, "gradient clipping by global norm (0 = off)", at_least=0)
    objective: str = registered(
        OBJECTIVES, "auto", also=("auto",),
        help="what training minimises: cross_entropy (label-smoothed), guided_alignment (plus the alignment "
        "cross-entropy, weighted by alignment_weight), or another registered objective; auto: guided_alignment "
        "when alignment_weight > 0, else cross_entropy",
    )
    label_smoothing: float = setting(0.1, at_least=0, below=1)
    loss_normalization: str = choice(
        "tokens", "tokens", "sentences",
        help="divide each update's summed loss by its target tokens, or by its sentences as in Bahdanau 2014 "
        "and Luong 2015 (which makes a plain-SGD learning rate mean what those papers mean)",
    )
    precision: str = choice(
        "auto", "auto", "fp32", "bf16", "fp16",
        help="auto: bf16 on CUDA, and for the transformer on a CPU with bf16 units (AVX-512 BF16 or AMX); "
        "fp32 otherwise; bf16 on a CPU without them runs fp32, "
        "with a note in the log; fp16 scales the loss and skips (without counting) an update whose gradients "
        "overflowed",
    )
    fp16_init_scale: float = setting(
        2.0**16, "fp16: the first loss scale; halved after each overflow, doubled after 2,000 clean updates",
        above=0,
    )
    compile: bool = setting(
        False, "torch.compile the model before training (off by default: whether it pays depends on the model and "
        "the device, and it adds compile time to every start)",
    )
    seed: int = setting(1)
    num_threads: int = setting(0, "torch CPU threads (0 = torch's default)", at_least=0)
    log_every: int = setting(50, at_least=1)
    valid_every: int = setting(1000, "validate every N steps (0 = never)", at_least=0)
    save_every: int = setting(0, "also save a checkpoint every N steps (0 = only at validations and the end)",
                              at_least=0)
    valid_bleu: bool = setting(True, "greedy-decode the validation split and score it with sacreBLEU")
    valid_max_sentences: int = setting(0, "decode at most N validation sentences for BLEU (0 = all)", at_least=0)
    early_stop_metric: str = choice(
        "bleu", "bleu", "loss", "aer",
        help="which validation figure picks the best checkpoint; aer needs word links for the validation split",
    )
    patience: int = setting(0, "validations without improvement before stopping (0 = off)", at_least=0)
    keep_best: int = setting(1, at_least=0)
    keep_last: int = setting(2, at_least=1)
    average_last: int = setting(0, "average the last N checkpoints when training ends (0 = off)", at_least=0)
    init_from: str = setting("", "fine-tuning: start a new run from the weights of this run or checkpoint "
                                 "(same architecture and SentencePiece model)")
    init_keep: tuple[str, ...] = setting((), "with init_from: also continue its optimizer state and/or its "
                                             "learning-rate schedule (default: both fresh)",
                                         items=("optimizer", "schedule"))
    alignment_weight: float = setting(
        0.0, "guided alignment (Garg et al. 2019): weight of the cross-entropy between the head "
        "model.alignment_layer/alignment_head and the training split's word links (0 = off; 0.05 in the paper)",
        at_least=0,
    )

    def rules(self) -> list[str]:
        problems = []
        if self.early_stop_metric == "bleu" and not self.valid_bleu:
            problems.append("config key 'train.early_stop_metric': bleu needs train.valid_bleu=true (or use loss)")
        if len(self.adam_betas) != 2 or not all(0 <= beta < 1 for beta in self.adam_betas):
            problems.append(f"config key 'train.adam_betas': needs two values in [0, 1), got {list(self.adam_betas)}")
        if self.alignment_weight > 0 and self.objective_name != "guided_alignment":
            problems.append(f"config key 'train.objective': {self.objective} does not use train.alignment_weight "
                            f"({self.alignment_weight:g}); set train.objective to guided_alignment or auto, or "
                            "train.alignment_weight to 0")
        if self.objective_name == "guided_alignment" and self.alignment_weight == 0:
            problems.append("config key 'train.alignment_weight': train.objective=guided_alignment needs a weight "
                            "above 0 (0.05 in Garg et al. 2019)")
        return problems

    @property
    def objective_name(self) -> str:
        """The registered objective to build: ``objective``, with ``auto`` resolved to guided_alignment
        when ``alignment_weight`` > 0 (what configs without the key always meant), else cross_entropy."""
        if self.objective != "auto":
            return self.objective
        return "guided_alignment" if self.alignment_weight > 0 else "cross_entropy"


#: source tokens per decoding batch where ``decode.max_tokens`` is 0 (the default), by device:
#: small batches keep several CPU workers busy to the end of a call; a GPU needs large ones
CPU_BATCH_TOKENS = 2000
GPU_BATCH_TOKENS = 6000


@dataclass(frozen=True)
class DecodeConfig(Validated):
    """Search settings for translation and validation."""

    section = "decode"

    beam_size: int = setting(5, at_least=1)
    alpha: float = setting(0.6, "GNMT length penalty ((5+|y|)/6)^alpha; 0 = none", at_least=0)
    max_len_a: float = setting(1.2, "maximum output length = a * source length + b", at_least=0)
    max_len_b: int = setting(10, at_least=0)
    min_len: int = setting(1, "EOS is forbidden before this many output tokens", at_least=0)
    nbest: int = setting(1, "hypotheses returned per sentence (at most beam_size)", at_least=1)
    search: str = registered(
        SEARCH_STRATEGIES, "auto",
        "search strategy; auto: constrained for a batch with constraints, else sampling when decode.sampling is set, "
        "greedy at beam_size 1, else beam")
    sampling: str = choice(
        "none", "none", "top_k", "top_p",
        help="none: no sampling; top_k / top_p: draw beam_size samples (decode.search auto or sampling)",
    )
    top_k: int = setting(0, "top_k sampling: draw from the k most probable tokens (0 = all)", at_least=0)
    top_p: float = setting(0.9, "top_p sampling: draw from the smallest set with probability >= p",
                           above=0, at_most=1)
    temperature: float = setting(1.0, "sampling: divide log-probabilities by this", above=0)
    seed: int = setting(1, "random seed for sampling")
    max_tokens: int = setting(
        0, f"source tokens per decoding batch (0 = the device's: {CPU_BATCH_TOKENS} on the CPU, "
        f"{GPU_BATCH_TOKENS} on a GPU)", at_least=0)
    max_sentences: int = setting(0, "sentences per decoding batch (0 = no limit besides max_tokens)", at_least=0)
    workers: int = setting(
        1, "CPU: batches decoded at once, each in a forked process of one torch thread",
        at_least=1,
    )
    on_long_line: str = choice(
        "error", "error", "truncate", "skip",
        help="a source longer than the model takes (learned positions, location attention): stop with an "
        "error naming its line, translate its first tokens only, or give it an empty translation",
    )

    no_repeat_ngram: int = setting(
        0, "no n-gram of this many tokens may occur twice in an output (0 = no guard)", at_least=0)
    repetition_penalty: float = setting(
        1.0, "log-probabilities of tokens already in the output are multiplied by this, then renormalised "
        "(1 = no penalty)", at_least=1.0)
    on_unmet: str = choice(
        "error", "error", "relax", "drop",
        help="constraints (and prefix) longer than a sentence's output limit: stop with an error naming the "
        "sentence, raise that sentence's limit to fit them, or drop the constraints that do not fit")
    constrained_stop: str = choice(
        "now", "exact", "now",
        help="when the constrained search ends a sentence before K hypotheses finish: exact: once no live beam "
        "could beat its n-best hypotheses that meet every constraint even at its output limit (the same outputs as "
        "waiting for K), now: once no live beam would beat them if it ended at its next token (fewer steps; "
        "outputs may change)")
    shortlist_scope: str = choice(
        "batch", "batch", "sentence",
        help="the ctranslate2 engine's vocabulary map (a lexical shortlist): batch: each batch decodes over the "
        "union of its sentences' candidates (fast; a sentence's output may depend on its batch-mates), sentence: "
        "a sentence a batch, each over its own candidates (the same output in any batch; slower than no map). "
        "The torch engine always uses each sentence's own candidates")

    def rules(self) -> list[str]:
        problems = []
        if self.nbest > self.beam_size:
            problems.append(f"config key 'decode.nbest': must be at most decode.beam_size ({self.beam_size}), "
                            f"got {self.nbest}")
        if self.sampling != "none" and self.search not in ("auto", "sampling"):
            problems.append(f"config key 'decode.search': {self.search!r} does not sample; decode.sampling "
                            f"{self.sampling} needs decode.search auto or sampling")
        if self.search == "sampling" and self.sampling == "none":
            problems.append("config key 'decode.search': sampling needs decode.sampling top_k or top_p")
        return problems


@dataclass(frozen=True)
class RecipeConfig:
    """What ``make recipes`` shows about a recipe; not used by training itself."""

    name: str = setting("")
    description: str = setting("")
    hardware: str = setting("CPU")
    expected_time: str = setting("")
    expected_score: str = setting("")
    reference: str = setting("", "where the expected score comes from")


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    recipe: RecipeConfig = field(default_factory=RecipeConfig)

    def __post_init__(self) -> None:
        problems = _guided_alignment_problems(self.model, self.train)
        if self.model.arch == "mask_align" and self.train.valid_bleu:
            problems.append("config key 'train.valid_bleu': a mask_align model cannot translate; set it to false "
                            "(and train.early_stop_metric to loss or aer)")
        if problems:
            raise ConfigError("\n".join(problems))

    # ---- conversions -------------------------------------------------------------
    def to_dict(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for section in fields(self):
            values = dataclasses.asdict(getattr(self, section.name))
            out[section.name] = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> "Config":
        """Build and validate every section; all problems are raised together."""
        raw = dict(raw or {})
        sections = {f.name: f for f in fields(cls)}
        problems = [f"unknown config section {name!r}; valid sections: {', '.join(sections)}"
                    for name in sorted(set(raw) - set(sections), key=str)]
        built = {}
        for name, section_field in sections.items():
            section_cls = section_field.default_factory  # type: ignore[misc]
            values = raw.get(name) or {}
            if not isinstance(values, Mapping):
                problems.append(f"config section {name!r} must be a mapping, got {values!r}")
                continue
            try:
                built[name] = _build_section(name, section_cls, values)
            except ConfigError as exc:
                problems.extend(str(exc).splitlines())
        if problems:
            raise ConfigError("\n".join(problems))
        return cls(**built)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        """Return a copy with ``{"train.max_steps": 100, ...}`` applied and validated.

        Every unknown key and every bad value is reported together, one line each.
        """
        return _validated(self.to_dict(), overrides)


def _override_key_problems(overrides: Mapping[str, Any]) -> list[str]:
    """One line per override key that names no section and key of :class:`Config`."""
    known = Config().to_dict()
    problems = []
    for dotted in overrides:
        section, _, key = dotted.partition(".")
        if section not in known or not key:
            problems.append(f"bad override key {dotted!r}; use <section>.<key> with section one of: "
                            f"{', '.join(known)}")
        elif key not in known[section]:
            problems.append(f"unknown config key '{dotted}'; valid keys in '{section}': "
                            f"{', '.join(known[section])}")
    return problems


def attention_shape(model: ModelConfig) -> tuple[int, int]:
    """Decoder cross-attention layers and heads of a model: what ``nmt align`` can read."""
    if model.arch == "mask_align":
        return 1, model.heads  # only its last layer attends to the source
    return (model.decoder_layers, model.heads) if model.arch in TRANSFORMER_ARCHS else (1, 1)


def _guided_alignment_problems(model: ModelConfig, train: TrainConfig) -> list[str]:
    """With guided alignment on, the supervised layer and head must exist in the model."""
    if train.alignment_weight == 0:
        return []
    layers, heads = attention_shape(model)
    problems = []
    if not -layers <= model.alignment_layer < layers:
        problems.append(f"config key 'model.alignment_layer': {model.alignment_layer} is not a decoder layer of "
                        f"this {model.arch} ({layers} attention layer(s); index from 0, or from -1 at the end)")
    if model.alignment_head >= heads:
        problems.append(f"config key 'model.alignment_head': {model.alignment_head} is not a head of this "
                        f"{model.arch} ({heads} head(s) per layer)")
    if model.alignment_full_context and model.arch not in TRANSFORMER_ARCHS:
        problems.append(f"config key 'model.alignment_full_context': a {model.arch} decoder reads the target left "
                        "to right and has no full-context pass; use a Transformer or set it to false")
    return problems


def _build_section(section: str, section_cls: type, values: Mapping[str, Any]) -> Any:
    """The section built from ``values``; unknown keys, wrong types and the section's own
    checks are raised together (a value of the wrong type is left out of those checks)."""
    hints = typing.get_type_hints(section_cls)
    valid = {f.name: f for f in fields(section_cls)}
    kwargs, problems = {}, []
    for key, value in values.items():
        if key not in valid:
            problems.append(f"unknown config key '{section}.{key}'; valid keys in '{section}': {', '.join(valid)}")
            continue
        try:
            kwargs[key] = _coerce(f"{section}.{key}", hints[key], value)
        except ConfigError as exc:
            problems.append(str(exc))
    try:
        built = section_cls(**kwargs)
    except ConfigError as exc:
        problems.extend(str(exc).splitlines())
    if problems:
        raise ConfigError("\n".join(problems))
    return built


def _coerce(key: str, hint: Any, value: Any) -> Any:
    """Check ``value`` against the field's type and convert where lossless (choices and
    ranges are checked by the section itself)."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key '{key}': expected a mapping of its keys, got {value!r}")
        return _build_section(key, hint, value)
    if origin is tuple:
        (item_type, _ellipsis) = typing.get_args(hint)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}': expected a list, got {value!r}")
        return tuple(_coerce(f"{key}[{k}]" if dataclasses.is_dataclass(item_type) else key, item_type, v)
                     for k, v in enumerate(value))
    if hint is bool:
        if isinstance(value, bool):
            result: Any = value
        elif isinstance(value, str) and value.lower() in {"true", "false", "yes", "no", "1", "0"}:
            result = value.lower() in {"true", "yes", "1"}
        else:
            raise ConfigError(f"config key '{key}': expected true or false, got {value!r}")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
        try:
            result = int(value)
        except ValueError:
            raise ConfigError(f"config key '{key}': expected an integer, got {value!r}") from None
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"config key '{key}': expected a number, got {value!r}")
        try:
            result = float(value)
        except ValueError:
            raise ConfigError(f"config key '{key}': expected a number, got {value!r}") from None
    elif hint is str:
        if value is None:
            value = ""
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected a string, got {value!r}")
        result = str(value)
    else:  # pragma: no cover - all fields use the types above
        raise TypeError(f"unsupported config type {hint!r} for {key}")
    return result


def parse_overrides(items: typing.Iterable[str]) -> dict[str, Any]:
    """Parse ``["train.max_steps=100", "model.arch=rnn_luong"]`` (values read as YAML scalars)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad --set {item!r}: expected <section>.<key>=<value>")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except (yaml.YAMLError, RecursionError):
            value = raw
        overrides[key.strip()] = value
    return overrides


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read a YAML config (or start from the defaults) and apply overrides.

    The overrides replace the file's values before anything is validated, so a ``--set`` mends
    a bad value in the file. Every problem is reported together, one line each; those of the
    file's own values name the file.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            raw = yaml.safe_load("\n".join(read_lines(path))) or {}  # invalid UTF-8: an error naming the line
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or " ".join(str(exc).split())  # one line, whatever the error
            raise ConfigError(f"{path}{line}: invalid YAML ({problem})") from None
        except RecursionError:
            raise ConfigError(f"{path}: invalid YAML (nested too deeply)") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: a config file must be a mapping of sections")
    return _validated(raw, overrides or {}, path)


def _validated(raw: Mapping[str, Any], overrides: Mapping[str, Any], path: Path | None = None) -> Config:
    """The config of ``raw`` sections with ``overrides`` put in, validated once; every problem
    is raised together, one line each: unknown override keys, then bad values. With ``path``
    the problems of the file's own values come first, named by the file."""
    key_problems = _override_key_problems(overrides)
    try:
        config = Config.from_dict(_overridden(raw, overrides))
    except ConfigError as exc:
        problems = str(exc).splitlines()
        if path is None:
            raise ConfigError("\n".join(key_problems + problems)) from None
        from_set = [problem for problem in problems if any(f"'{key}'" in problem for key in overrides)]
        from_file = [f"{path}: {problem}" for problem in problems if problem not in from_set]
        raise ConfigError("\n".join(from_file + key_problems + from_set)) from None
    if key_problems:
        raise ConfigError("\n".join(key_problems))
    return config


def _overridden(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` sections with the override values of known keys put in, before anything is
    validated: a ``--set`` replaces a file's bad value instead of being refused with it."""
    known = Config().to_dict()
    merged = {section: dict(values) if isinstance(values, Mapping) else {} if values is None else values
              for section, values in raw.items()}  # an empty section (``train:``) is None in YAML
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if key in known.get(section, {}) and isinstance(merged.setdefault(section, {}), dict):
            merged[section][key] = value
    return merged


def config_replace(config: Config, section: str, **changes: Any) -> Config:
    """Copy of ``config`` with some keys of one section replaced (validated)."""
    return config.with_overrides({f"{section}.{k}": v for k, v in changes.items()}) if changes else config

