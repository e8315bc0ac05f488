"""The corpora of the alignment bench: the text every system of a corpus trains on, the
gold-aligned pairs choices are made on (dev) and scored on (test), and the blind pairs without
gold, written under the run's folder for ``nmt prepare``."""

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
BLIND_DEEN = Path("gold-align") / "de-en-blind"
MULTI30K = Path("multi30k")
TATOEBA = Path("tatoeba-deen")
PUNCTUATION = re.compile(r"""([.,!?;:"()])""")
#: the gold pairs every choice of the bench is made on (de-en: pairs 1-25 of the gold set); the rest are test pairs
DEV_PAIRS = 25


@dataclass(frozen=True)
class PairSet:
    """Pairs every system aligns (tokenised source and target), appended to the training text
    from line ``start`` of the appended block on; ``gold``: their links (None: blind pairs)."""

    src: Path
    tgt: Path
    gold: Path | None
    label: str  # which pairs, for the table: "dev 1-25", "test 26-50"
    start: int  # the set's first line among the lines appended to the training text
    size: int


@dataclass(frozen=True)
class BenchCorpus:
    """Raw text for ``nmt prepare`` (``train``/``valid``/``test`` ``.de``/``.en``): the training pairs
    with the blind, dev and test pairs appended (in that order, :attr:`appended` lines), the
    three sets and the text BLEU is measured on.

    The protocol: every choice (a reading, a symmetrization, a threshold, the best
    eflomal reading, the best reading without an external aligner) is made on ``dev``; every
    row is scored on ``test``, which no choice looks at; ``blind`` has no gold links here."""

    name: str
    raw: Path
    dev: PairSet
    test: PairSet
    blind: PairSet
    blind_source: str  # where the blind pairs come from, for the README beside their links
    bleu: tuple[Path, Path] | None = None  # (source, reference), tokenised

    def text(self, split: str, lang: str) -> Path:
        return self.raw / f"{split}.{lang}"

    @property
    def appended(self) -> int:
        """How many lines end the training text that are the three sets' pairs."""
        return self.blind.size + self.dev.size + self.test.size


def text_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _write_lines(path: Path, lines) -> None:
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _write_split(raw: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    _write_lines(raw / f"{split}.de", [de for de, _ in pairs])
    _write_lines(raw / f"{split}.en", [en for _, en in pairs])


def _pair_set(raw: Path, name: str, pairs: list[tuple[str, str]], links: list[str] | None, label: str,
              start: int) -> PairSet:
    _write_split(raw, name, pairs)
    gold = None
    if links is not None:
        gold = raw / f"{name}.gold"
        _write_lines(gold, links)
    return PairSet(raw / f"{name}.de", raw / f"{name}.en", gold, label, start, len(pairs))


def _corpus(name: str, raw: Path, train: list, blind: tuple[list, str], dev: tuple[list, list],
            test: tuple[list, list], labels: tuple[str, str, str], bleu: tuple[Path, Path] | None = None) -> BenchCorpus:
    """Write the training text (``train`` + blind + dev + test pairs) and the three sets."""
    pairs, source = blind
    _write_split(raw, "train", train + pairs + dev[0] + test[0])
    blind_set = _pair_set(raw, "blind", pairs, None, labels[0], 0)
    dev_set = _pair_set(raw, "dev", *dev, labels[1], len(pairs))
    test_set = _pair_set(raw, "test", *test, labels[2], len(pairs) + len(dev[0]))
    return BenchCorpus(name, raw, dev_set, test_set, blind_set, source, bleu)


def synthetic_corpus(settings: Settings) -> BenchCorpus:
    """Generated pairs; blind, dev and test pairs (with their generated gold) appended to the training text."""
    scale = settings.scale
    raw = settings.folders("synthetic").raw
    train = [(p.german, p.english) for p in islice(generate("align-bench:train"), scale.synthetic_train)]
    blind = [(p.german, p.english) for p in islice(generate("align-bench:blind"), scale.synthetic_test)]
    dev, test = (list(islice(generate(f"align-bench:{name}"), scale.synthetic_test)) for name in ("dev", "test"))
    valid = [(p.german, p.english) for p in islice(generate("align-bench:valid"), 100)]
    _write_split(raw, "valid", valid)
    size = scale.synthetic_test
    return _corpus("synthetic", raw, train, (blind, "generated pairs (`align-bench:blind`), whose gold no step reads"),
                   ([(p.german, p.english) for p in dev], [p.alignment for p in dev]),
                   ([(p.german, p.english) for p in test], [p.alignment for p in test]),
                   (f"blind 1-{size}", f"dev 1-{size}", f"test 1-{size}"))


def _tokenise(line: str) -> str:
    """``nmt prepare``'s normalisation, then lowercase and split off punctuation, close to the
    gold set's own tokenisation: eflomal and the models count the same words (a soft hyphen
    standing alone in newstest's German is a word to eflomal, nothing after normalisation)."""
    return " ".join(PUNCTUATION.sub(r" \1 ", normalize_text(line).lower()).split())


def _tokenised_pairs(folder: Path, split: str) -> list[tuple[str, str]]:
    return [(_tokenise(de), _tokenise(en))
            for de, en in zip(text_lines(folder / f"{split}.de"), text_lines(folder / f"{split}.en"))]


def deen_corpus(settings: Settings, name: str, with_tatoeba: bool) -> BenchCorpus:
    """Multi30k train (+ Tatoeba train) tokenised, then the 50 blind Europarl pairs and the 50
    gold ones (dev: gold pairs 1-25, test: 26-50), all of them in every system's training text."""
    raw = settings.folders(name).raw
    multi30k, gold = settings.data / MULTI30K, settings.data / GOLD_DEEN
    gold_pairs = list(zip(text_lines(gold / "src"), text_lines(gold / "tgt")))
    links = text_lines(gold / "gold")
    blind_folder = settings.data / BLIND_DEEN
    blind = list(zip(text_lines(blind_folder / "src"), text_lines(blind_folder / "tgt")))
    train = _tokenised_pairs(multi30k, "train")
    if with_tatoeba:
        train += _tokenised_pairs(settings.data / TATOEBA, "train")
    _write_split(raw, "valid", _tokenised_pairs(multi30k, "val")[:500])
    _write_split(raw, "bleu", _tokenised_pairs(multi30k, "test2016"))
    source = (f"`{BLIND_DEEN}/{{src,tgt}}` in the data folder: Europarl pairs whose gold links are kept elsewhere, "
              "so no choice of any setting here can have looked at them")
    return _corpus(name, raw, train, (blind, source), (gold_pairs[:DEV_PAIRS], links[:DEV_PAIRS]),
                   (gold_pairs[DEV_PAIRS:], links[DEV_PAIRS:]),
                   (f"blind 1-{len(blind)}", f"dev 1-{DEV_PAIRS}", f"test {DEV_PAIRS + 1}-{len(gold_pairs)}"),
                   (raw / "bleu.de", raw / "bleu.en"))


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
        needed = [settings.data / GOLD_DEEN / "gold", settings.data / BLIND_DEEN / "src",
                  settings.data / MULTI30K / "train.de"] + (
            [settings.data / TATOEBA / "train.de"] if with_tatoeba else [])
        missing = [str(path) for path in needed if not path.is_file()]
        if missing:
            skipped.append(f"{name} skipped: {missing[0]} not found")
        else:
            found.append(deen_corpus(settings, name, with_tatoeba))
    return found, skipped
