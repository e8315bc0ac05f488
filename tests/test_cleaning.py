"""Cleaning rules: normalisation, each filter with its count, bad pairs, no shifted pairs."""

from __future__ import annotations

import pytest

from nmt_cli.config import DataConfig
from nmt_cli.data.cleaning import PairCleaner, normalize_text
from nmt_cli.data.sources import RawPair, open_corpus
from nmt_cli.errors import InputError


@pytest.mark.parametrize("raw, clean", [
    ("  Zwei\u00a0Männer  sind\tda ", "Zwei Männer sind da"),             # NBSP, tab, double spaces
    ("Kno\u0308del", "Knödel"),                                            # NFC composes
    ("zero\u200bwidth\ufeff soft\u00adhyphen", "zerowidth softhyphen"),   # invisible characters go
    ("line\u2028separator\r\nend", "line separator end"),
    ("bell\x07 and C1\x9b", "bell and C1"),
])
def test_normalize_text(raw, clean):
    assert normalize_text(raw) == clean


def run(pairs, training=True, **settings):
    cleaner = PairCleaner(DataConfig(**settings), training=training)
    kept = list(cleaner.clean(RawPair(n, s, t) if isinstance(s, str) else s for n, (s, t) in enumerate(pairs, 1)))
    return kept, cleaner.stats()


def test_each_training_filter_is_counted():
    pairs = [("ein kurzer Satz", "a short sentence"),
             ("  ", "empty source"),
             ("eins", "one"),                                              # too short with min_length 2
             ("w " * 9, "many words here"),                                 # too long with max_length 8
             ("ein zwei drei vier fünf sechs", "one two"),                  # ratio 3 > 2
             ("ein kurzer Satz", "a short sentence")]                       # duplicate
    kept, stats = run(pairs, min_length=2, max_length=8, max_length_ratio=2.0, dedup=True)
    assert [(p.line, p.source) for p in kept] == [(1, "ein kurzer Satz")]
    assert stats["dropped"] == {"duplicate": 1, "empty": 1, "length_ratio": 1, "too_long": 1, "too_short": 1}
    assert stats["read"] == 6 and stats["kept"] == 1 and stats["normalized"] == 2


def test_length_filters_apply_to_training_split_only():
    pairs = [("eins", "one"), ("ein zwei drei vier fünf sechs", "one two"), ("eins", "one"), ("", "x")]
    kept, stats = run(pairs, training=False, min_length=2, max_length_ratio=2.0, dedup=True)
    assert len(kept) == 3 and stats["dropped"] == {"empty": 1}


def test_zero_disables_max_length_and_ratio():
    kept, _ = run([("w " * 400, "x")], max_length=0, max_length_ratio=0)
    assert len(kept) == 1


def test_normalize_off_keeps_text_but_not_line_breaks():
    kept, stats = run([("a\u00a0 b", "c\nd")], normalize=False)
    assert (kept[0].source, kept[0].target) == ("a\u00a0 b", "c d")


def test_bad_pair_fails_or_is_skipped():
    bad = RawPair.invalid(2, "invalid_utf8", "/data/train.de", "invalid UTF-8 (byte 0xff at column 3)")
    pairs = [("eins zwei", "one two"), (bad, None), ("drei vier", "three four")]
    with pytest.raises(InputError) as info:
        run(pairs)
    assert str(info.value).startswith("/data/train.de:2: invalid UTF-8 (byte 0xff at column 3)")
    assert "--on-invalid skip" in str(info.value)
    kept, stats = run(pairs, on_invalid="skip")
    assert [(p.line, p.source, p.target) for p in kept] == [(1, "eins zwei", "one two"), (3, "drei vier", "three four")]
    assert stats["dropped"] == {"invalid_utf8": 1}


def test_skipping_never_shifts_pairs(tmp_path):
    """A bad line on one side drops that pair only; later lines keep their partners."""
    de = [f"Satz {i}".encode() for i in range(1, 7)]
    en = [f"Sentence {i}".encode() for i in range(1, 7)]
    de[1] = b"Satz \xc3"       # truncated UTF-8
    en[3] = b"   "            # empty after normalisation
    (tmp_path / "train.de").write_bytes(b"\n".join(de) + b"\n")
    (tmp_path / "train.en").write_bytes(b"\n".join(en) + b"\nSentence 7\n")  # one line too many
    data = DataConfig(source="files", path=str(tmp_path), on_invalid="skip")
    cleaner = PairCleaner(data, training=True)
    kept = list(cleaner.clean(open_corpus(data).pairs("train")))
    assert all(p.source.split()[1] == p.target.split()[1] for p in kept)
    assert [p.line for p in kept] == [1, 3, 5, 6]
    assert cleaner.stats()["dropped"] == {"empty": 1, "invalid_utf8": 1, "unpaired_line": 1}


def test_multi30k_quirks_are_normalized(multi30k):
    data = DataConfig(source="files", path=str(multi30k))
    cleaner = PairCleaner(data, training=True)
    kept = {p.line: p for p in cleaner.clean(open_corpus(data).pairs("train"))}
    raw = (multi30k / "train.de").read_text(encoding="utf-8").split("\n")
    assert "\t" in raw[7365] and "\t" not in kept[7366].source
    assert kept[7366].source.startswith('"Zwei männliche und eine weibliche Person spielen in einer Wasserfontäne')
    assert all("  " not in p.source and "\u00a0" not in p.source and p.source == p.source.strip()
               for p in kept.values())
    stats = cleaner.stats()
    assert stats["read"] == 29000 and stats["kept"] + sum(stats["dropped"].values()) == 29000
    assert stats["normalized"] >= 100  # 40 padded lines, 44 double spaces, 47 NBSPs, 1 tab
