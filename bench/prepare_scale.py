"""`nmt prepare` and `nmt train` at WMT scale: seconds, pairs/s, peak RSS and disk at 4.5M, 13.5M and 40M pairs.

The corpus is generated text with the length distributions of real parallel text (see
:func:`write_corpus`), written as plain ``train/valid/test.{de,en}`` files so the run
exercises the ``files`` source exactly like a real corpus; it is generated once per size
into the work folder (a smaller one is the first lines of a larger one already there) and
reused. ``nmt prepare`` (with duplicate removal) runs in a subprocess and its peak RSS comes
from ``wait4``; then ``nmt train`` trains a small Transformer for a few steps on the result:
seconds from its start to its first logged update, and its peak RSS, which should not grow
with the corpus. Each prepared directory is removed once measured (disk).

Sizes run smallest first; a size whose prepare time, extrapolated from the seconds per
million pairs of the size before it (plus generating its corpus when it must be generated,
at the slowest rate a corpus in the work folder was generated), would pass
``--budget-minutes`` is not run and its row says so.

    python bench/prepare_scale.py --quick                     # 20k pairs
    python bench/prepare_scale.py                             # 4.5M, 13.5M, 40M pairs
    python bench/prepare_scale.py --pairs 4500000,13500000 --budget-minutes 75
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
from common import (REPO, Report, bench_arguments, disk_mb, fmt, nmt_command, project_version, run_measured, tail,
                    thread_env)

from nmt_cli.fileio import atomic_open, atomic_write_json

SIZES = (4_500_000, 13_500_000, 40_000_000)  # WMT14 en-de, 3x, WMT14 en-fr
QUICK_PAIRS = 20_000
EVAL_PAIRS = 3000
RSS_LIMIT_MB = 2048
CHUNK = 50_000  # pairs generated at a time
GENERATED = "generated.json"  # how long generating a corpus took: pairs, seconds
TRAIN_STEPS = 5
#: a small Transformer: the same model at every size, so its RSS compares across sizes
MODEL = ["model.d_model=128", "model.heads=4", "model.ffn_dim=512", "model.encoder_layers=2",
         "model.decoder_layers=2", "train.max_tokens=2048", "train.warmup_steps=10", "train.valid_every=0",
         "train.save_every=0", "train.log_every=1", "train.num_threads=2", "train.keep_last=1"]

SYLLABLES = ("ka ri to ne sa mu lo pe di va ch en st ar ol ui ge be ze fu ha in ra ta").split()


def _vocabulary(seed: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``size`` distinct words of 1-5 syllables, as one byte string of ``"word "`` entries
    (starts, byte lengths) and a Zipf cumulative distribution over them (exponent 1.07)."""
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        syllables = rng.integers(0, len(SYLLABLES), size=(size, 5))
        counts = rng.choice([1, 2, 2, 3, 3, 3, 4, 4, 5], size=size)
        for row, count in zip(syllables.tolist(), counts.tolist()):
            words.setdefault("".join(SYLLABLES[k] for k in row[:count]))
            if len(words) == size:
                break
    blob = "".join(word + " " for word in words).encode()
    lengths = np.fromiter((len(word) + 1 for word in words), dtype=np.int64, count=size)
    starts = np.cumsum(lengths) - lengths
    cdf = np.cumsum(1.0 / (np.arange(size) + 2.7) ** 1.07)
    return np.frombuffer(blob, dtype=np.uint8), starts, lengths, cdf / cdf[-1]


def _lines(vocabulary: tuple[np.ndarray, ...], rng: np.random.Generator, words_per_line: np.ndarray) -> bytes:
    """Lines of Zipf-drawn words, ``words_per_line[i]`` words on line ``i``, built without a Python loop."""
    blob, starts, lengths, cdf = vocabulary
    ids = np.minimum(np.searchsorted(cdf, rng.random(int(words_per_line.sum()))), len(cdf) - 1)
    sizes = lengths[ids]
    ends = np.cumsum(sizes)
    text = blob[np.arange(int(ends[-1])) + np.repeat(starts[ids] - (ends - sizes), sizes)]
    text[ends[np.cumsum(words_per_line) - 1] - 1] = ord("\n")  # each line's last space
    return text.tobytes()


def write_corpus(folder: Path, pairs: int, work: Path) -> None:
    """``train/valid/test.{de,en}`` of generated text; skipped when present.

    Source sentences have a log-normal number of words (median 19, mean about 23, as in
    WMT14 news and Europarl text) with 5% short lines of 1-4 words (titles, list items: most
    of the exact duplicates); the target's length is the source's times a log-normal ratio
    (median 1.03, spread 15%). Words are drawn from a Zipf distribution over 60,000 words per
    language. Chunk ``k`` is seeded by ``(split, k)``, so a corpus is the first lines of any
    larger one: it is copied from a larger one in ``work`` when there is one.
    """
    sizes = {"train": pairs, "valid": EVAL_PAIRS, "test": EVAL_PAIRS}
    if all((folder / f"{split}.en").is_file() for split in sizes):
        return
    larger = sorted((int(path.name.rsplit("-", 1)[1]), path) for path in work.glob("realistic-corpus-*")
                    if path.name.rsplit("-", 1)[1].isdigit() and (path / "test.en").is_file())
    larger = [path for size, path in larger if size > pairs]
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    vocabularies = {"de": _vocabulary(1, 60_000), "en": _vocabulary(2, 60_000)}
    for number, (split, size) in enumerate(sizes.items()):
        for lang in ("de", "en"):
            with atomic_open(folder / f"{split}.{lang}", "wb") as out:
                if larger and split == "train":
                    with open(larger[0] / f"{split}.{lang}", "rb") as source:
                        for _, line in zip(range(size), source):
                            out.write(line)
                    continue
                for chunk, first in enumerate(range(0, size, CHUNK)):
                    count = min(CHUNK, size - first)
                    rng = np.random.default_rng([number, chunk])
                    short = rng.random(count) < 0.05
                    source = np.where(short, rng.integers(1, 5, count),
                                      np.clip(np.rint(rng.lognormal(np.log(19), 0.65, count)), 1, 200)).astype(np.int64)
                    target = np.clip(np.rint(source * rng.lognormal(0.03, 0.15, count)), 1, 200).astype(np.int64)
                    line_rng = np.random.default_rng([number, chunk, 1 if lang == "de" else 2])
                    out.write(_lines(vocabularies[lang], line_rng, source if lang == "de" else target))
    if not larger:
        atomic_write_json(folder / GENERATED, {"pairs": pairs, "seconds": time.perf_counter() - started})


def generating_seconds_per_million(work: Path) -> float | None:
    """Seconds per million pairs the slowest corpus generated in ``work`` took (None: none was)."""
    records = [json.loads(path.read_text()) for path in work.glob(f"realistic-corpus-*/{GENERATED}")]
    return max((record["seconds"] / (record["pairs"] / 1e6) for record in records), default=None)


def children_cpu_seconds() -> float:
    """User + system CPU seconds of the finished subprocesses (and theirs): what a measured
    command cost the CPUs, which a busy machine changes far less than its wall-clock time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def measure_training(prepared: Path, run: Path, log: Path) -> tuple[float | None, float, int]:
    """Train :data:`MODEL` for :data:`TRAIN_STEPS` steps: seconds to the first logged update
    (from the command's start), peak RSS (MB) and exit status."""
    if run.exists():
        shutil.rmtree(run)
    command = nmt_command("train", "--data", prepared, "--out", run, "--set", f"train.max_steps={TRAIN_STEPS}",
                          *[arg for item in MODEL for arg in ("--set", item)])
    result = {}
    started = time.perf_counter()
    runner = threading.Thread(target=lambda: result.update(measured=run_measured(command, log, env=thread_env(),
                                                                                 cwd=REPO)))
    runner.start()
    first = None
    while runner.is_alive():
        runner.join(0.1)
        metrics = run / "metrics.jsonl"
        if first is None and metrics.is_file() and '"kind": "train"' in metrics.read_text(errors="replace"):
            first = time.perf_counter() - started
    measured = result["measured"]
    return first, measured.peak_rss_mb, measured.returncode


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=None,
                        help=f"comma list of training pair counts (default {','.join(map(str, SIZES))}; "
                             f"{QUICK_PAIRS} with --quick)")
    parser.add_argument("--budget-minutes", type=float, default=75.0,
                        help="skip a size whose prepare, extrapolated from the size before, would not end "
                             "within this many minutes of the script's start (default 75)")
    args = parser.parse_args()
    sizes = [int(value) for value in args.pairs.split(",")] if args.pairs else \
        ([QUICK_PAIRS] if args.quick else list(SIZES))
    report = Report("prepare_scale", "nmt prepare and nmt train at scale",
                    ["pairs", "load avg (1/5/15 min)", "prepare seconds", "s per M pairs", "pairs/s",
                     "CPU s per M pairs", "prepare peak RSS (MB)", "under 2 GB", "input (MB)", "prepared (MB)",
                     "shards", "train: s to 1st update", "train peak RSS (MB)"], quick=args.quick)
    report.versions = {"nmt-cli": project_version()}
    vocab = 8000 if not args.quick else 1000
    script_start, per_million = time.perf_counter(), None
    for pairs in sorted(sizes):
        corpus = args.work / f"realistic-corpus-{pairs}"
        if per_million is not None:
            missing = not (corpus / "test.en").is_file()
            generating = generating_seconds_per_million(args.work) or 0.0
            projected = (per_million + generating * missing) * pairs / 1e6
            left = args.budget_minutes * 60 - (time.perf_counter() - script_start)
            if projected > left:
                report.add_row(fmt(pairs), load_average(), f"not run: about {projected / 60:.0f} min projected, "
                               f"{max(left, 0) / 60:.0f} min of the budget left", *["-"] * 10)
                continue
        write_corpus(corpus, pairs, args.work)
        out = args.work / f"prepared-scale-{pairs}"
        load = load_average()
        command = nmt_command("prepare", "--force",
                              "--set", "data.source=files", "--set", f"data.path={corpus}",
                              "--set", "data.valid_split=valid", "--set", f"data.vocab_size={vocab}",
                              "--set", "data.dedup=true", "--set", "data.spm_input_sentence_size=1000000",
                              "--out", out)
        cpu_before = children_cpu_seconds()
        measured = run_measured(command, args.work / f"prepare-scale-{pairs}.log", env=thread_env(), cwd=REPO)
        cpu = children_cpu_seconds() - cpu_before
        if measured.returncode != 0:
            sys.exit(f"prepare failed (exit {measured.returncode}):\n{tail(measured.log)}")
        total = pairs + 2 * EVAL_PAIRS
        per_million = measured.seconds / (total / 1e6)
        manifest = json.loads((out / "manifest.json").read_text())
        first, train_rss, code = measure_training(out, args.work / f"train-scale-{pairs}",
                                                  args.work / f"train-scale-{pairs}.log")
        if code != 0:
            sys.exit(f"train failed (exit {code}):\n{tail(args.work / f'train-scale-{pairs}.log')}")
        report.add_row(fmt(pairs), f"{load} -> {load_average()}", fmt(measured.seconds, 1), fmt(per_million, 1),
                       fmt(total / measured.seconds), fmt(cpu / (total / 1e6), 1), fmt(measured.peak_rss_mb),
                       "yes" if measured.peak_rss_mb < RSS_LIMIT_MB else "NO", fmt(disk_mb(corpus)),
                       fmt(disk_mb(out)), fmt(len(manifest["splits"]["train"]["shards"])), fmt(first, 1),
                       fmt(train_rss))
        shutil.rmtree(out)
        shutil.rmtree(args.work / f"train-scale-{pairs}", ignore_errors=True)
    report.notes.append("Prepare: the whole `nmt prepare` command (start-up included) with duplicate removal, "
                        f"SentencePiece (BPE, vocabulary {vocab:,}) on a 1M-sentence sample, token shards of 1M "
                        "pairs; pairs/s counts the training pairs and the two 3,000-pair evaluation splits read.")
    report.notes.append(f"Train: `nmt train` of a 2+2-layer Transformer (d_model 128) for {TRAIN_STEPS} steps of "
                        "2,048 tokens on 2 threads; seconds from the command's start to the first update in "
                        "metrics.jsonl (start-up, checking every token file's sha256 and cutting the first "
                        "batching window included).")
    report.notes.append("Corpus: generated text with real-text lengths (log-normal words per sentence, median 19, "
                        "5% short lines of 1-4 words; target length the source's times a log-normal ratio) over "
                        "Zipf-distributed 60,000-word vocabularies, as train/valid/test.{de,en} files.")
    report.notes.append("CPU s per M pairs: user + system CPU seconds of the prepare command per million pairs "
                        "read; on a loaded machine it tracks the work done where wall-clock seconds track the load.")
    report.notes.append("The machine is shared: the load average (1/5/15 minutes, before -> after the prepare) says "
                        "how busy it was; figures under a load above its 2 cores are not benchmark figures.")
    report.emit(args.json)


if __name__ == "__main__":
    main()
