"""The synthetic German-English grammar: determinism, variety, lengths and gold alignments."""

from __future__ import annotations

from itertools import islice

import pytest

from nmt_cli.config import DataConfig
from nmt_cli.data import synthetic
from nmt_cli.data.sources import SyntheticCorpus, invert_alignment
from nmt_cli.errors import ConfigError


def take(seed, n):
    return list(islice(synthetic.generate(seed), n))


@pytest.fixture(scope="module")
def sample():
    return take(7, 3000)


def links(pair):
    return [tuple(map(int, link.split("-"))) for link in pair.alignment.split()]


def test_deterministic_by_seed():
    assert take(3, 50) == take(3, 50)
    assert take(3, 50) != take(4, 50)


def test_varied_and_moderate_length(sample):
    assert len({(p.german, p.english) for p in sample}) > 0.99 * len(sample)
    lengths = [len(p.german.split()) for p in sample] + [len(p.english.split()) for p in sample]
    assert min(lengths) >= synthetic.MIN_WORDS and max(lengths) <= synthetic.MAX_WORDS
    assert 9 <= sum(lengths) / len(lengths) <= 16
    assert len({w for p in sample for w in p.german.split()}) > 400  # inflected forms


def test_alignment_indices_are_valid_and_cover_content_words(sample):
    for pair in sample:
        de, en = pair.german.split(), pair.english.split()
        pairs = links(pair)
        assert pairs == sorted(set(pairs))
        assert all(0 <= i < len(de) and 0 <= j < len(en) for i, j in pairs)
        aligned_en = {j for _, j in pairs}
        assert aligned_en == set(range(len(en)))  # every English word is aligned
        assert de[-1][-1] == en[-1][-1] in ".?" and pair.german[0].isupper() and pair.english[0].isupper()


def test_text_is_natural_detokenised_text(sample):
    for pair in sample:
        for text in (pair.german, pair.english):
            assert not any(f" {mark}" in text for mark in (".", "?", ",", "'s")), text
            assert text.count(".") + text.count("?") == 1


def test_alignments_are_often_non_monotonic(sample):
    crossing = sum(1 for p in sample if [j for _, j in links(p)] != sorted(j for _, j in links(p)))
    assert crossing / len(sample) > 0.5


def test_verb_final_subordinate_clause_is_reordered(sample):
    """In ``..., weil <subject> ... <verb>.`` the German verb is last but its English
    counterpart comes right after the subject, before the objects."""
    found = reordered = 0
    for pair in sample:
        de = pair.german.split()
        if de[0] == "Weil" or "weil" not in de or "," in " ".join(de[de.index("weil"):]):
            continue
        verb = len(de) - 1  # the last word, the final mark attached
        targets = [j for i, j in links(pair) if i == verb]
        assert targets
        found += 1
        reordered += all(j < len(pair.english.split()) - 1 for j in targets)
    assert found > 20 and reordered > found / 2


def test_grammar_phenomena_appear_with_their_links(sample):
    text = " ".join(p.german for p in sample)
    for phrase in (" den ", " dem ", " des ", " einen ", " einem ", " keinen ", " nicht ", " im ", " dass "):
        assert phrase in text, phrase
    kein = next(p for p in sample if "keinen" in p.german.split())
    i = kein.german.split().index("keinen")
    assert [kein.english.split()[j] for k, j in links(kein) if k == i] == ["no"]
    im = next(p for p in sample if "im" in p.german.split())
    i = im.german.split().index("im")
    assert [im.english.split()[j] for k, j in links(im) if k == i] == ["in", "the"]


def test_english_articles_agree_with_next_word(sample):
    for pair in sample:
        words = pair.english.split()
        for word, after in zip(words, words[1:]):
            if word.lower() in ("a", "an"):
                assert (word.lower() == "an") == (after[0] in "aeiou"), pair.english


def test_corpus_orientation_and_splits():
    de_en = SyntheticCorpus(DataConfig(synthetic_train_size=5, synthetic_valid_size=2, synthetic_test_size=0))
    en_de = SyntheticCorpus(DataConfig(src_lang="en", tgt_lang="de", synthetic_train_size=5))
    assert de_en.splits() == {"train": "train", "valid": "valid"}
    forward, backward = list(de_en.pairs("train")), list(en_de.pairs("train"))
    assert [p.line for p in forward] == [1, 2, 3, 4, 5]
    for f, b in zip(forward, backward):
        assert (b.source, b.target) == (f.target, f.source)
        assert b.alignment == invert_alignment(f.alignment)
    assert [p.source for p in de_en.pairs("valid")] != [p.source for p in forward[:2]]


def test_corpus_rejects_other_languages():
    with pytest.raises(ConfigError, match="German-English"):
        SyntheticCorpus(DataConfig(src_lang="fr", tgt_lang="en"))
