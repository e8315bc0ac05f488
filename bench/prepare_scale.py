"""`nmt prepare` at WMT14 en-de scale: pairs/s and peak RSS on a 4.5M-pair corpus.

The corpus is the built-in synthetic grammar written out as plain text files
(``train.de``/``train.en`` plus small ``valid``/``test`` files), so the run exercises the
``files`` source exactly like a real corpus. It is generated once into the work folder and
reused. ``nmt prepare`` then runs in a subprocess; its peak RSS comes from ``wait4``.
The target: peak RSS under 2 GB at 4.5M pairs.

    python bench/prepare_scale.py --quick          # 20k pairs
    python bench/prepare_scale.py                  # 4.5M pairs (about as many as WMT14 en-de)
    python bench/prepare_scale.py --pairs 1000000
"""

from __future__ import annotations

import json
import sys
from itertools import islice
from pathlib import Path

from common import REPO, Report, bench_arguments, fmt, project_version, run_measured, tail, thread_env

from nmt_cli.data.synthetic import generate
from nmt_cli.fileio import atomic_open

WMT14_PAIRS = 4_500_000
QUICK_PAIRS = 20_000
EVAL_PAIRS = 3000
RSS_LIMIT_MB = 2048


def write_corpus(folder: Path, pairs: int) -> None:
    """``train/valid/test.{de,en}`` from the synthetic grammar; skipped when present."""
    sizes = {"train": pairs, "valid": EVAL_PAIRS, "test": EVAL_PAIRS}
    if all((folder / f"{split}.en").is_file() for split in sizes):
        return
    for split, size in sizes.items():
        with atomic_open(folder / f"{split}.de") as german, atomic_open(folder / f"{split}.en") as english:
            for pair in islice(generate(f"bench:{split}"), size):
                german.write(pair.german + "\n")
                english.write(pair.english + "\n")


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=None,
                        help=f"training pairs (default {WMT14_PAIRS:,}; {QUICK_PAIRS:,} with --quick)")
    args = parser.parse_args()
    pairs = args.pairs or (QUICK_PAIRS if args.quick else WMT14_PAIRS)
    corpus = args.work / f"prepare-scale-{pairs}"
    write_corpus(corpus, pairs)

    report = Report("prepare_scale", f"nmt prepare at scale ({pairs:,} training pairs)",
                    ["pairs", "vocab", "seconds", "pairs/s", "pairs/s inside prepare", "peak RSS (MB)", "under 2 GB"],
                    quick=args.quick)
    report.versions = {"nmt-cli": project_version()}
    vocab = 8000 if not args.quick else 1000
    out = args.work / f"prepared-scale-{pairs}"
    command = [sys.executable, "-m", "nmt_cli", "prepare", "--force",
               "--set", "data.source=files", "--set", f"data.path={corpus}",
               "--set", "data.valid_split=valid", "--set", f"data.vocab_size={vocab}",
               "--set", "data.spm_input_sentence_size=1000000",
               "--out", str(out)]
    measured = run_measured(command, args.work / f"prepare-scale-{pairs}.log", env=thread_env(), cwd=REPO)
    if measured.returncode != 0:
        sys.exit(f"prepare failed (exit {measured.returncode}):\n{tail(measured.log)}")
    total = pairs + 2 * EVAL_PAIRS
    inside = json.loads((out / "manifest.json").read_text())["pairs_per_second"]
    report.add_row(fmt(pairs), fmt(vocab), fmt(measured.seconds, 1), fmt(total / measured.seconds), fmt(inside),
                   fmt(measured.peak_rss_mb), "yes" if measured.peak_rss_mb < RSS_LIMIT_MB else "NO")
    report.notes.append("Seconds and pairs/s cover the whole `nmt prepare` command (start-up included); "
                        "'inside prepare' is the manifest's figure for prepare() alone: hashing inputs, reading "
                        "and cleaning, SentencePiece on a 1M-sentence sample, encoding and writing token arrays.")
    report.notes.append("Corpus: the built-in synthetic grammar written as train/valid/test.{de,en} text files.")
    report.emit(args.json)


if __name__ == "__main__":
    main()
