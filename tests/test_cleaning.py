"""Cleaning rules: normalisation, each filter with its count, bad pairs, no shifted pairs;
duplicate removal in bounded memory, the same as a set of hashes."""

from __future__ import annotations

import hashlib
import random
import tracemalloc

import numpy as np
import pytest

from nmt_cli.config import DataConfig
from nmt_cli.data.cleaning import DuplicateFinder, PairCleaner, normalize_text
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


def run(pairs, training=True, scratch=None, **settings):
    cleaner = PairCleaner(DataConfig(**settings), training=training, scratch=scratch)
    kept = list(cleaner.clean(RawPair(n, s, t) if isinstance(s, str) else s for n, (s, t) in enumerate(pairs, 1)))
    if cleaner.finder is not None:
        repeated = {int(number) for block in cleaner.duplicates() for number in block}
        kept = [pair for number, pair in enumerate(kept) if number not in repeated]
    return kept, cleaner.stats()


def test_each_training_filter_is_counted(tmp_path):
    pairs = [("ein kurzer Satz", "a short sentence"),
             ("  ", "empty source"),
             ("eins", "one"),                                              # too short with min_length 2
             ("w " * 9, "many words here"),                                 # too long with max_length 8
             ("ein zwei drei vier fünf sechs", "one two"),                  # ratio 3 > 2
             ("ein kurzer Satz", "a short sentence")]                       # duplicate
    kept, stats = run(pairs, scratch=tmp_path, min_length=2, max_length=8, max_length_ratio=2.0, dedup=True)
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


# ---- duplicate removal ---------------------------------------------------------------------------


def set_of_hashes(pairs):
    """The numbers of the repeated pairs as a set of 64-bit hashes finds them (the method before runs)."""
    seen, repeated = set(), []
    for number, (source, target) in enumerate(pairs):
        key = hashlib.blake2b(f"{source}\t{target}".encode(), digest_size=8).digest()
        if key in seen:
            repeated.append(number)
        seen.add(key)
    return repeated


def many_duplicates(count, seed=0):
    """Pairs drawn from a few hundred, with one pair repeated in long stretches (whole runs of one hash)."""
    rng = random.Random(seed)
    pairs = [(f"Satz {rng.randrange(400)} .", f"Sentence {rng.randrange(3)} .") for _ in range(count)]
    for start in (count // 5, count // 2):
        pairs[start : start + count // 10] = [("Danke .", "Thank you .")] * (count // 10)
    return pairs


def find(pairs, folder, memory):
    finder = DuplicateFinder(folder, memory)
    for source, target in pairs:
        finder.add(source, target)
    count = finder.finish()
    numbers = [int(number) for block in finder.numbers() for number in block]
    assert count == len(numbers)
    return finder, numbers


@pytest.mark.parametrize("memory", [6_000, 60_000, 256 * 2**20], ids=["runs-merged-in-levels", "runs", "one-run"])
def test_duplicates_are_those_a_set_of_hashes_finds(tmp_path, memory):
    pairs = many_duplicates(4000)
    finder, numbers = find(pairs, tmp_path, memory)
    assert numbers == set_of_hashes(pairs) and len(numbers) > 2500
    assert (finder.runs > 25) if memory == 6_000 else (finder.runs > 1) if memory == 60_000 else finder.runs == 1
    assert [path.name for path in tmp_path.iterdir()] == ["duplicates"]  # the runs are gone once merged


def test_no_pairs_and_no_duplicates(tmp_path):
    assert find([], tmp_path, 1000)[1] == []
    pairs = [(f"Satz {n}", f"Sentence {n}") for n in range(500)]
    assert find(pairs, tmp_path, 2000)[1] == []


def peak_memory(pairs, folder, memory):
    """The most memory (traced by Python: numpy's arrays too) finding the duplicates of ``pairs`` took."""
    reference = np.array(set_of_hashes(pairs))
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        finder = DuplicateFinder(folder, memory)
        for source, target in pairs:
            finder.add(source, target)
        assert finder.finish() == len(reference) and finder.runs > 1
        found = 0
        for block in finder.numbers():
            assert (block == reference[found : found + len(block)]).all()
            found += len(block)
        assert found == len(reference)
        return tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()


def test_memory_stays_within_the_setting_whatever_the_corpus(tmp_path):
    """A set of hashes grows with the distinct pairs (about 70 bytes each); the runs do not."""
    memory = 64 * 1024
    for size in (5000, 20000):
        pairs = [(f"Satz {n % (size // 2)} .", f"Sentence {n % (size // 2)} .") for n in range(size)]
        assert peak_memory(pairs, tmp_path, memory) < 2 * memory  # and some fixed costs: file buffers, ...
    tracemalloc.start()
    try:
        seen = {int.from_bytes(hashlib.blake2b(f"{s}\t{t}".encode(), digest_size=8).digest(), "little")
                for s, t in pairs}
        assert tracemalloc.get_traced_memory()[0] > 10 * memory and len(seen) == 10000
    finally:
        tracemalloc.stop()


def test_cleaner_counts_duplicates_after_the_other_filters(tmp_path):
    """A pair dropped for another reason does not make a later copy a duplicate; the first copy stays."""
    pairs = [("eins", "one"), ("ein Satz", "a sentence"), ("eins", "one"), ("ein Satz", "a sentence"),
             ("zwei Sätze", "two sentences"), ("ein  Satz", "a\u00a0sentence")]
    kept, stats = run(pairs, scratch=tmp_path, min_length=2, dedup=True, dedup_memory_mb=0.0001)
    assert [p.line for p in kept] == [2, 5]
    assert stats["dropped"] == {"duplicate": 2, "too_short": 2} and stats["kept"] == 2 and stats["read"] == 6


def test_duplicate_removal_needs_a_scratch_folder():
    with pytest.raises(ValueError, match="scratch folder"):
        PairCleaner(DataConfig(dedup=True), training=True)
    assert PairCleaner(DataConfig(dedup=True), training=False).finder is None
