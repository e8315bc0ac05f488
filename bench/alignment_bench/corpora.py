"""The corpora of the alignment bench: the text every system of a corpus trains on, and
the gold-aligned pairs it is scored on, written under the run's folder for ``nmt prepare``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from alignment_bench.settings import Settings

from nmt_cli.data.cleaning import normalize_text
from nmt_cli.data.synthetic import generate
from nmt_cli.fileio import atomic_write_text

CORPORA = ("synthetic", "multi30k", "multi30k+tatoeba")
#: where the de-en corpora's parts are in the data folder (``--data``)
GOLD_DEEN = Path("gold-align") / "de-en"
MULTI30K = Path("multi30k")
TATOEBA = Path("tatoeba-deen")
PUNCTUATION = re.compile(r"""([.,!?;:"()])""")


@dataclass(frozen=True)
class GoldSet:
    """Gold-aligned pairs: source and target text (tokenised) and their links."""

    src: Path
    tgt: Path
    gold: Path
    label: str  # which pairs, for the table


@dataclass(frozen=True)
class BenchCorpus:
    """Raw text for ``nmt prepare`` (``train``/``valid``/``test`` ``.de``/``.en``; the test pairs are
    the last training lines), the gold sets and the text BLEU is measured on."""

    name: str
    raw: Path
    test: GoldSet  # headline rows
    tune: GoldSet  # tuned readings are picked here ...
    report: GoldSet  # ... and scored here
    bleu: tuple[Path, Path] | None = None  # (source, reference), tokenised

    def text(self, split: str, lang: str) -> Path:
        return self.raw / f"{split}.{lang}"


def text_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _write_lines(path: Path, lines) -> None:
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _write_split(raw: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    _write_lines(raw / f"{split}.de", [de for de, _ in pairs])
    _write_lines(raw / f"{split}.en", [en for _, en in pairs])


def _gold_set(raw: Path, name: str, pairs: list[tuple[str, str]], links: list[str], label: str) -> GoldSet:
    _write_split(raw, name, pairs)
    _write_lines(raw / f"{name}.gold", links)
    return GoldSet(raw / f"{name}.de", raw / f"{name}.en", raw / f"{name}.gold", label)


def synthetic_corpus(settings: Settings) -> BenchCorpus:
    """Generated pairs; the test pairs (with gold) are appended to the training text."""
    scale = settings.scale
    raw = settings.folders("synthetic").raw
    train = [(p.german, p.english) for p in islice(generate("align-bench:train"), scale.synthetic_train)]
    test = list(islice(generate("align-bench:test"), scale.synthetic_test))
    dev = list(islice(generate("align-bench:dev"), scale.synthetic_test))
    valid = [(p.german, p.english) for p in islice(generate("align-bench:valid"), 100)]
    test_pairs = [(p.german, p.english) for p in test]
    _write_split(raw, "train", train + test_pairs)
    _write_split(raw, "valid", valid)
    gold = _gold_set(raw, "test", test_pairs, [p.alignment for p in test], f"test 1-{len(test)}")
    tune = _gold_set(raw, "dev", [(p.german, p.english) for p in dev], [p.alignment for p in dev], "dev")
    return BenchCorpus("synthetic", raw, gold, tune, gold)


def _tokenise(line: str) -> str:
    """``nmt prepare``'s normalisation, then lowercase and split off punctuation, close to the
    gold set's own tokenisation: eflomal and the models count the same words (a soft hyphen
    standing alone in newstest's German is a word to eflomal, nothing after normalisation)."""
    return " ".join(PUNCTUATION.sub(r" \1 ", normalize_text(line).lower()).split())


def _tokenised_pairs(folder: Path, split: str) -> list[tuple[str, str]]:
    return [(_tokenise(de), _tokenise(en))
            for de, en in zip(text_lines(folder / f"{split}.de"), text_lines(folder / f"{split}.en"))]


def deen_corpus(settings: Settings, name: str, with_tatoeba: bool) -> BenchCorpus:
    """Multi30k train (+ Tatoeba train) tokenised, then the 50 gold Europarl pairs; test = the gold pairs."""
    raw = settings.folders(name).raw
    multi30k, gold = settings.data / MULTI30K, settings.data / GOLD_DEEN
    gold_pairs = list(zip(text_lines(gold / "src"), text_lines(gold / "tgt")))
    links = text_lines(gold / "gold")
    train = _tokenised_pairs(multi30k, "train")
    if with_tatoeba:
        train += _tokenised_pairs(settings.data / TATOEBA, "train")
    _write_split(raw, "train", train + gold_pairs)
    _write_split(raw, "valid", _tokenised_pairs(multi30k, "val")[:500])
    half = len(gold_pairs) // 2
    test = _gold_set(raw, "test", gold_pairs, links, f"1-{len(gold_pairs)}")
    tune = _gold_set(raw, "tune", gold_pairs[:half], links[:half], f"1-{half}")
    report = _gold_set(raw, "report", gold_pairs[half:], links[half:], f"{half + 1}-{len(gold_pairs)}")
    _write_split(raw, "bleu", _tokenised_pairs(multi30k, "test2016"))
    return BenchCorpus(name, raw, test, tune, report, (raw / "bleu.de", raw / "bleu.en"))


def corpus_names(text: str) -> list[str]:
    """The corpora of a ``--corpora`` comma list (whole names: ``multi30k`` is not ``multi30k+tatoeba``)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CORPORA]
    if unknown:
        raise SystemExit(f"--corpora: unknown corpus {unknown[0]!r} (choose from {', '.join(CORPORA)})")
    return names


def corpora(names: list[str], quick: bool, settings: Settings) -> tuple[list[BenchCorpus], list[str]]:
    """The corpora of ``names`` that can be made (--quick: synthetic only), and a note for each
    one skipped because its data is not there."""
    found = [synthetic_corpus(settings)] if "synthetic" in names else []
    skipped = []
    for name, with_tatoeba in (("multi30k", False), ("multi30k+tatoeba", True)):
        if name not in names or quick:
            continue
        needed = [settings.data / GOLD_DEEN / "gold", settings.data / MULTI30K / "train.de"] + (
            [settings.data / TATOEBA / "train.de"] if with_tatoeba else [])
        missing = [str(path) for path in needed if not path.is_file()]
        if missing:
            skipped.append(f"{name} skipped: {missing[0]} not found")
        else:
            found.append(deen_corpus(settings, name, with_tatoeba))
    return found, skipped
