"""``nmt prepare``: raw parallel text -> a prepared directory (see docs/ARCHITECTURE.md).

Everything streams, so memory does not grow with the corpus:

1. Each split is read, cleaned (:mod:`nmt_cli.data.cleaning`) and written as text
   ``<split>.<src_lang>`` / ``<split>.<tgt_lang>``, plus its word links ``<split>.align``
   when it has them (the synthetic corpus's own, or ``data.alignment_path``'s, read in
   step with the pairs by :mod:`nmt_cli.data.links`). Splits are renamed ``train``,
   ``valid``, ``test``. The training split may mix several corpora (``data.corpora``,
   each with a sampling weight): they are read one after the other and the manifest
   records their names, sizes and weights; each corpus gets token shards of its own and
   the batcher samples each one by its weight (:mod:`nmt_cli.training.batching`).
   With ``data.dedup`` the training text is written to a scratch folder first and copied
   without the repeated pairs, found by sorting their hashes in runs on disk.
2. SentencePiece is trained on a uniform sample of at most ``spm_input_sentence_size``
   training sentences, chosen by index once the number of training pairs is known (only
   the chosen numbers are held) and streamed from the cleaned text (no sentence list in memory). Given an existing
   tokenizer (``--tokenizer-from``: fine-tuning data must be encoded with the pieces
   of the model it adapts), that one is used instead.
3. The cleaned text is encoded in batches into token shards of at most ``data.shard_pairs``
   pairs, and their lengths (:mod:`nmt_cli.data.binarized`), and word links into piece links
   (``<split>.links.*``).

The directory is built under a temporary name and renamed into place whole. Its
``manifest.json`` records a fingerprint of the data settings and of the inputs
(sha256 of local files, generator settings of the synthetic corpus, dataset identity for
the hub); running again with the same fingerprint reuses the directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from nmt_cli import __version__
from nmt_cli.config import Config, CorpusConfig, DataConfig
from nmt_cli.data.binarized import ShardedTokenWriter, array_files, shard_sizes, token_dtype
from nmt_cli.data.cleaning import PairCleaner
from nmt_cli.data.links import attach_links, write_piece_links
from nmt_cli.data.sources import Corpus, file_digest, iter_limited, open_corpus
from nmt_cli.errors import InputError, NmtError
from nmt_cli.fileio import atomic_directory, atomic_open, atomic_write_bytes, atomic_write_json, atomic_write_text
from nmt_cli.progress import Progress
from nmt_cli.specials import SPECIAL_IDS
from nmt_cli.textio import iter_lines
from nmt_cli.tokenization import Tokenizer, train_sentencepiece

FORMAT = "nmt-prepared"
#: 2: token arrays in shards with a lengths file per side, no train.corpus.npy (1: one token file per side)
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
ENCODE_BATCH = 10_000

__all__ = ["prepare", "MANIFEST", "FORMAT", "FORMAT_VERSION"]


@dataclass(frozen=True)
class SplitPart:
    """One corpus's share of a prepared split: where it comes from and its sampling weight."""

    name: str
    corpus: Corpus
    source_split: str
    limit: int
    weight: float
    link_file: Path | None = None  # word links of the pairs (data.alignment_path), read in step with them


def prepare(config: Config, out_dir: str | Path, force: bool = False, progress: bool = True,
            tokenizer_from: str | Path | None = None) -> dict[str, Any]:
    """Build (or reuse) the prepared directory ``out_dir`` and return its manifest.

    The returned dict is the manifest plus ``"reused"`` (True when an up-to-date
    directory was found and nothing was rebuilt). ``progress`` shows bars/log lines on stderr.
    ``tokenizer_from`` is a directory holding SentencePiece models (a prepared directory
    or a checkpoint) to encode with instead of training new ones.
    """
    out = Path(out_dir).expanduser().resolve()
    corpus = open_corpus(config.data)
    parts = _split_parts(config, corpus)
    given = Tokenizer.from_directory(Path(tokenizer_from)) if tokenizer_from is not None else None
    inputs = _input_fingerprints(parts, given)
    fingerprint = _fingerprint(config, inputs)
    existing = _read_manifest(out)
    if existing is not None and existing.get("fingerprint") == fingerprint and not force:
        _say(progress, f"prepare: {out} is up to date (same inputs and settings); reusing it (--force rebuilds)")
        return {**existing, "reused": True}
    if existing is None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise NmtError(f"{out}: exists and is not a prepared directory; choose another --out or remove it")

    started = time.monotonic()
    with atomic_directory(out, owned=_prepared_entry) as tmp:
        stats = {name: _write_clean_split(split_parts, name, tmp, config, progress)
                 for name, split_parts in parts.items()}
        if given is not None:
            tokenizer, tokenizer_info = given, _tokenizer_info(given, config, sampled_pairs=0, origin=tokenizer_from)
        else:
            tokenizer, tokenizer_info = _train_tokenizer(tmp, config, stats["train"]["kept"], progress)
        dtype = _encode_splits(tmp, stats, config, tokenizer, progress)
        elapsed = time.monotonic() - started
        pairs_read = sum(s["read"] for s in stats.values())
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tool_version": __version__,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "fingerprint": fingerprint,
            "src_lang": config.data.src_lang,
            "tgt_lang": config.data.tgt_lang,
            "source": corpus.describe(),
            "inputs": inputs,
            "splits": stats,
            "tokenizer": tokenizer_info,
            "special_ids": dict(SPECIAL_IDS),
            "token_dtype": dtype.name,
            "arrays": _array_records(tmp, stats),
            "gold_alignments": corpus.kind == "synthetic" and not config.data.corpora,
            "alignment_files": {name: str(part.link_file) for name, split_parts in parts.items()
                                for part in split_parts if part.link_file is not None},
            "elapsed_seconds": round(elapsed, 2),
            "pairs_per_second": round(pairs_read / max(elapsed, 1e-9), 1),
        }
        atomic_write_json(tmp / MANIFEST, manifest)
        atomic_write_text(tmp / "config.yaml", _resolved_config(config).to_yaml())
    return {**manifest, "reused": False}


def _split_parts(config: Config, corpus: Corpus) -> dict[str, list[SplitPart]]:
    """Each prepared split's parts: the main source's split (with its word links, if
    ``data.alignment_path`` has them), then, for ``train``, the ``data.corpora``."""
    data = config.data
    splits = corpus.splits()
    link_files = _link_files(config, splits)
    parts = {name: [SplitPart("main", corpus, source_split,
                              data.max_train_pairs if name == "train" else data.max_eval_pairs, data.weight,
                              link_files.get(name))]
             for name, source_split in splits.items()}
    parts["train"] += [SplitPart(spec.name, open_corpus(corpus_data_config(data, spec)), spec.split,
                                 data.max_train_pairs, spec.weight) for spec in data.corpora]
    return parts


def _input_fingerprints(parts: dict[str, list[SplitPart]], given: Tokenizer | None) -> dict[str, Any]:
    """What the prepared data is made of: every part's input (and word links), and a given tokenizer."""
    inputs = {}
    for name, split_parts in parts.items():
        for part in split_parts:
            links = {part.link_file.name: file_digest(part.link_file)[0]} if part.link_file is not None else {}
            inputs[_input_name(name, part)] = {**part.corpus.fingerprint(part.source_split), **links}
    if given is not None:
        inputs["tokenizer"] = {file: hashlib.sha256(data).hexdigest() for file, data in given.model_files().items()}
    return inputs


def _prepared_entry(name: str) -> bool:
    """Whether a file of that name is one ``nmt prepare`` writes (an older version of the
    directory holding anything else is not replaced)."""
    return name in (MANIFEST, "config.yaml", "spm.model", "spm.src.model", "spm.tgt.model") or \
        name.startswith(("train.", "valid.", "test."))


def _array_records(directory: Path, stats: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every token file, checked when the directory is read."""
    records = {}
    for name, split_stats in stats.items():
        for file in array_files(name, len(split_stats["shards"])):
            path = directory / file
            records[file] = {"bytes": path.stat().st_size, "sha256": file_digest(path)[0]}
    return records


def _say(enabled: bool, message: str) -> None:
    if enabled:
        print(message, file=sys.stderr, flush=True)


def corpus_data_config(data: DataConfig, spec: CorpusConfig) -> DataConfig:
    """The data settings that read one of ``data.corpora`` like a source of its own."""
    return dataclasses.replace(data, source=spec.source, path=spec.path, hf_config=spec.hf_config,
                               train_split=spec.split, corpora=(), streaming=data.streaming and spec.source == "hf")


def _input_name(split: str, part: SplitPart) -> str:
    """``train``, or ``train:<corpus>`` for the training corpora beside the main source."""
    return split if part.name == "main" else f"{split}:{part.name}"


def _fingerprint(config: Config, inputs: dict[str, Any]) -> str:
    """sha256 of what decides the prepared data: data settings (but not where local
    folders are, their content is in ``inputs``, nor the memory duplicate removal may use),
    input fingerprints and the format version."""
    settings = {k: v for k, v in config.to_dict()["data"].items()
                if k not in ("path", "alignment_path", *DataConfig.RESOURCE_KEYS)}
    if config.data.source == "hf":
        settings["path"] = config.data.path  # a hub id is part of the identity
    settings["corpora"] = [{k: v for k, v in spec.items() if k != "path" or spec["source"] == "hf"}
                           for spec in settings["corpora"]]
    blob = json.dumps({"data": settings, "inputs": inputs, "format_version": FORMAT_VERSION,
                       "tool_version": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_manifest(out: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def _resolved_config(config: Config) -> Config:
    """The config with local paths (``data.path``, ``data.alignment_path``, ``data.corpora``) made absolute, so it
    works from any folder."""

    def absolute(path: str) -> str:
        local = Path(path).expanduser()
        return str(local.resolve()) if path and local.exists() else path

    data = config.data
    path = absolute(data.path) if data.source != "synthetic" else data.path
    corpora = tuple(dataclasses.replace(spec, path=absolute(spec.path)) for spec in data.corpora)
    return dataclasses.replace(config, data=dataclasses.replace(data, path=path, corpora=corpora,
                                                                alignment_path=absolute(data.alignment_path)))


# ---- pass 1: read, clean, write text ------------------------------------------------------


def _link_files(config: Config, splits: dict[str, str]) -> dict[str, Path]:
    """Prepared split -> ``<data.alignment_path>/<source split>.align``, for the splits that have one."""
    if not config.data.alignment_path:
        return {}
    folder = Path(config.data.alignment_path).expanduser().resolve()
    if not folder.is_dir():
        raise InputError(folder, f"word link folder not found (data.alignment_path: {config.data.alignment_path})")
    found = {name: folder / f"{source_split}.align" for name, source_split in splits.items()}
    found = {name: path for name, path in found.items() if path.is_file()}
    if not found:
        raise InputError(folder, f"no <split>.align file for any split ({', '.join(splits.values())})")
    return found


def _write_clean_split(parts: list[SplitPart], name: str, out: Path, config: Config,
                       progress: bool) -> dict[str, Any]:
    """Read, clean and write the text of split ``name`` from its parts, one after the other.

    With duplicate removal the text goes to a scratch folder inside ``out`` first and is
    copied without the repeated pairs once they are known. A mixed training split records
    each part's pairs (``corpora``), in order.
    """
    data = config.data
    with_alignment = all(part.corpus.kind == "synthetic" or part.link_file is not None for part in parts)
    files = [f"{name}.{data.src_lang}", f"{name}.{data.tgt_lang}"] + ([f"{name}.align"] if with_alignment else [])
    with contextlib.ExitStack() as scratch_folder:
        scratch = None
        if name == "train" and data.dedup:
            scratch = Path(scratch_folder.enter_context(tempfile.TemporaryDirectory(prefix=".dedup.", dir=out)))
        cleaner = PairCleaner(data, training=name == "train", scratch=scratch)
        kept = []
        with contextlib.ExitStack() as outputs:
            src, tgt, *align = [outputs.enter_context(atomic_open((scratch or out) / file)) for file in files]
            for part in parts:
                before = cleaner.kept
                total = part.corpus.size_hint(part.source_split)
                if part.limit:
                    total = min(total, part.limit) if total is not None else part.limit
                label = part.source_split if part.name == "main" else f"{part.name}: {part.source_split}"
                with Progress(f"read {name} ({label})", total, enabled=progress) as bar:
                    pairs = part.corpus.pairs(part.source_split)
                    if part.link_file is not None:
                        pairs = attach_links(pairs, part.link_file, data.normalize)
                    pairs = _counted(iter_limited(pairs, part.limit), bar)
                    for pair in cleaner.clean(pairs):
                        src.write(pair.source + "\n")
                        tgt.write(pair.target + "\n")
                        if align:
                            align[0].write(pair.alignment + "\n")
                kept.append(cleaner.kept - before)
        if scratch is not None:
            kept = _copy_without_duplicates(cleaner, name, scratch, out, files, kept, progress)
    stats = cleaner.stats()
    if stats["kept"] == 0:
        raise NmtError(f"split '{parts[0].source_split}' has no pairs left after cleaning "
                       f"(read {stats['read']}, dropped {stats['dropped']})")
    result = {"source_split": parts[0].source_split, **stats}
    if len(parts) > 1:
        result["corpora"] = [{"name": part.name, "source": part.corpus.describe(), "split": part.source_split,
                              "pairs": count, "weight": part.weight} for part, count in zip(parts, kept)]
    return result


def _copy_without_duplicates(cleaner: PairCleaner, name: str, scratch: Path, out: Path, files: list[str],
                             kept: list[int], progress: bool) -> list[int]:
    """Copy split ``name``'s text ``files`` from ``scratch`` to ``out`` leaving out the pairs
    that repeat an earlier one; the pairs each part keeps then (``kept``: each part's before)."""
    ends = np.cumsum(kept)
    repeated = np.zeros(len(kept), dtype=np.int64)

    def numbers() -> Iterator[int]:
        for block in cleaner.duplicates():
            repeated[:] += np.bincount(np.searchsorted(ends, block.astype(np.int64), side="right"),
                                       minlength=len(kept))
            yield from block.tolist()

    with contextlib.ExitStack() as files_open:
        sources = [files_open.enter_context(open(scratch / file, "rb")) for file in files]
        targets = [files_open.enter_context(atomic_open(out / file, "wb")) for file in files]
        duplicates = numbers()
        skip = next(duplicates, None)
        with Progress(f"remove duplicates ({name})", int(ends[-1]), enabled=progress) as bar:
            for number, lines in enumerate(zip(*sources)):
                bar.update()
                if number == skip:
                    skip = next(duplicates, None)
                    continue
                for target, line in zip(targets, lines):
                    target.write(line)
    return [count - dropped for count, dropped in zip(kept, repeated.tolist())]


def _counted(items: Iterator[Any], bar: Progress) -> Iterator[Any]:
    for item in items:
        bar.update()
        yield item


# ---- SentencePiece ----------------------------------------------------------------------------


def _train_tokenizer(out: Path, config: Config, train_pairs: int, progress: bool) -> tuple[Tokenizer, dict[str, Any]]:
    """Train joint or separate SentencePiece models on a seeded uniform sample of pairs."""
    data = config.data
    budget = max(1, data.spm_input_sentence_size // (2 if data.joint_vocab else 1))
    sample = min(train_pairs, budget)
    chosen = np.arange(sample) if sample == train_pairs else \
        np.sort(np.random.default_rng(data.spm_seed).choice(train_pairs, sample, replace=False))
    paths = {"src": out / f"train.{data.src_lang}", "tgt": out / f"train.{data.tgt_lang}"}

    def sentences(*sides: str) -> Iterator[str]:
        wanted = iter(chosen.tolist())
        next_number = next(wanted, None)
        for number, lines in enumerate(zip(*(iter_lines(paths[side]) for side in sides))):
            if number == next_number:
                yield from lines
                next_number = next(wanted, None)

    def train(*sides: str) -> bytes:
        _say(progress, f"prepare: training SentencePiece ({data.spm_model_type}, vocab {data.vocab_size}) "
                       f"on {sample * len(sides):,} sentences ({'+'.join(sides)})")
        try:
            return train_sentencepiece(sentences(*sides), data.vocab_size, data.spm_model_type,
                                       data.character_coverage, data.spm_input_sentence_size, data.spm_seed)
        except RuntimeError as exc:
            problem = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise NmtError(f"SentencePiece training failed (data.vocab_size={data.vocab_size}): {problem}") from None

    if data.joint_vocab:
        tokenizer = Tokenizer(train("src", "tgt"))
    else:
        tokenizer = Tokenizer(train("src"), train("tgt"))
    return tokenizer, _tokenizer_info(tokenizer, config, sample)


def _tokenizer_info(tokenizer: Tokenizer, config: Config, sampled_pairs: int,
                    origin: str | Path | None = None) -> dict[str, Any]:
    """The manifest's record of the SentencePiece models (``from``: reused from there)."""
    data = config.data
    info = {
        "type": "sentencepiece",
        "model_type": data.spm_model_type,
        "joint": tokenizer.joint,
        "vocab_size_requested": None if origin is not None else data.vocab_size,
        "src_vocab_size": tokenizer.src_vocab_size,
        "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "character_coverage": data.character_coverage,
        "sampled_pairs": sampled_pairs,
        "seed": data.spm_seed,
        "files": sorted(tokenizer.model_files()),
    }
    if origin is not None:
        info["from"] = str(Path(origin).resolve())
    return info


# ---- pass 2: token arrays -----------------------------------------------------------------------


def _encode_splits(out: Path, stats: dict[str, dict[str, Any]], config: Config, tokenizer: Tokenizer,
                   progress: bool) -> np.dtype:
    """Token arrays (and piece links, where a split has word links) of every split, and the
    SentencePiece models beside them; adds ``tokens`` (and ``links``) to each split's stats."""
    dtype = token_dtype(max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size))
    for name, split_stats in stats.items():
        parts = [corpus["pairs"] for corpus in split_stats.get("corpora", ())] or [split_stats["kept"]]
        split_stats["shards"] = shard_sizes(parts, config.data.shard_pairs)
        split_stats["tokens"] = _binarize(out, name, split_stats, config, tokenizer, dtype, progress)
        if (out / f"{name}.align").is_file():
            split_stats["links"] = write_piece_links(out, name, config.data.src_lang, config.data.tgt_lang,
                                                     tokenizer, split_stats["kept"], progress)
    for name, model in tokenizer.model_files().items():
        atomic_write_bytes(out / name, model)
    return dtype


def _binarize(out: Path, name: str, split_stats: dict[str, Any], config: Config, tokenizer: Tokenizer,
              dtype: np.dtype, progress: bool) -> dict[str, Any]:
    """Encode ``<name>.<lang>`` into the shards ``split_stats["shards"]`` sizes and the
    lengths of ``<name>.src|tgt``; token counts per side."""
    counts = {}
    for side, lang, encode in (("src", config.data.src_lang, tokenizer.encode_src_batch),
                               ("tgt", config.data.tgt_lang, tokenizer.encode_tgt_batch)):
        writer = ShardedTokenWriter(out, name, side, dtype, split_stats["shards"])
        try:
            with Progress(f"encode {name}.{lang}", split_stats["kept"], unit="sentences", enabled=progress) as bar:
                batch: list[str] = []
                for line in iter_lines(out / f"{name}.{lang}"):
                    batch.append(line)
                    if len(batch) == ENCODE_BATCH:
                        writer.extend(encode(batch))
                        bar.update(len(batch))
                        batch = []
                if batch:
                    writer.extend(encode(batch))
                    bar.update(len(batch))
            writer.close()
        except BaseException:
            writer.abort()
            raise
        counts[side] = {"tokens": writer.num_tokens, "max_length": writer.longest}
    return counts
