"""The repetition guards, phrases to avoid and per-token scores, in every strategy."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.constraints import contains
from nmt_cli.decoding.generator import generate
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import phrase_end_mask, repeated_ngram_mask
from nmt_cli.specials import EOS_ID
from tests.test_generate import ARCHITECTURES, VOCAB_REAL, ScriptedModel, decode_config, tiny_model

A, B, C, D = 4, 5, 6, 7
VOCAB = 8

#: decode settings of each strategy (constrained: with a constraint in the batch)
STRATEGIES = {"greedy": dict(beam_size=1), "beam": dict(beam_size=3, nbest=3),
              "sampling": dict(beam_size=2, nbest=2, sampling="top_k", top_k=5)}


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(4, 7), max_size=9), min_size=1, max_size=4), st.integers(1, 3))
def test_the_ngram_mask_blocks_exactly_the_tokens_that_repeat_an_ngram(rows, n):
    length = min(map(len, rows))
    outputs = torch.tensor([row[:length] for row in rows], dtype=torch.long).view(len(rows), length)
    mask = repeated_ngram_mask(outputs, n, VOCAB)
    for row, blocked in zip(outputs.tolist(), mask.tolist()):
        for token in range(VOCAB):  # blocked: the n-gram it would end already occurs
            extended = row + [token]
            assert blocked[token] == (len(extended) >= n and tuple(extended[-n:]) in ngrams(row, n))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(4, 7), max_size=6),
       st.lists(st.lists(st.integers(4, 7), min_size=1, max_size=3), min_size=1, max_size=3))
def test_the_phrase_mask_blocks_the_last_token_of_a_phrase_the_output_ends_with_the_rest_of(output, phrases):
    width = max(map(len, phrases)) - 1
    heads = torch.full((len(phrases), width), -1, dtype=torch.long)
    for number, phrase in enumerate(phrases):
        if len(phrase) > 1:
            heads[number, width - len(phrase) + 1:] = torch.tensor(phrase[:-1])
    last = torch.tensor([phrase[-1] for phrase in phrases])
    owner = torch.tensor([number % 2 for number in range(len(phrases))])  # phrases of two sentences
    outputs = torch.tensor([output, output], dtype=torch.long).view(2, len(output))
    mask = phrase_end_mask(outputs, heads, last, owner, torch.tensor([0, 1]), VOCAB)
    for row in (0, 1):
        own = [phrase for number, phrase in enumerate(phrases) if number % 2 == row]
        for token in range(VOCAB):
            completes = any(contains((output + [token])[-len(phrase):], phrase) and
                            len(output) + 1 >= len(phrase) for phrase in own)
            assert bool(mask[row, token]) == completes


def strategy_decode(name: str, **changes) -> DecodeConfig:
    return DecodeConfig(alpha=0.6, max_len_a=1.5, max_len_b=6, min_len=1, **STRATEGIES[name], **changes)


def random_sources(count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, VOCAB_REAL, size=int(rng.integers(2, 9))).tolist() for _ in range(count)]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("name", [*STRATEGIES, "constrained"])
@pytest.mark.parametrize("n", [1, 2])
def test_no_ngram_ever_repeats_and_every_row_still_ends(arch, name, n):
    model = tiny_model(arch)
    requests = [Request(tuple(source)) for source in random_sources(5, seed=11)]
    if name == "constrained":
        requests[0] = replace(requests[0], constraints=(((9, 10),),))
    decode = strategy_decode("beam" if name == "constrained" else name, no_repeat_ngram=n)
    for request, result in zip(requests, generate(model, requests, decode)):
        assert all(result.constraints_met)
        for entry in result.nbest:
            assert len(set(ngrams(entry.tokens, n))) == len(ngrams(entry.tokens, n)), entry.tokens
            assert math.isfinite(entry.log_prob)


@pytest.mark.parametrize("name", [*STRATEGIES, "constrained"])
def test_phrases_to_avoid_never_appear(name):
    model = tiny_model("transformer")
    sources = random_sources(6, seed=12)
    decode = strategy_decode("beam" if name == "constrained" else name)
    unguarded = generate(model, sources, decode)
    # avoid what the model said: a bigram and a single token of each output
    requests = [Request(tuple(source), avoid=(tuple(h.tokens[1:3]), tuple(h.tokens[:1])))
                for source, h in zip(sources, unguarded)]
    if name == "constrained":
        requests[0] = replace(requests[0], constraints=(((20,),),))
    guarded = generate(model, requests, decode)
    assert any(any(h.tokens for h in result.nbest) for result in unguarded)
    for request, result in zip(requests, guarded):
        for entry in result.nbest:
            assert not any(contains(entry.tokens, phrase) for phrase in request.avoid if phrase), entry.tokens


def test_a_prefix_is_kept_even_where_it_holds_a_phrase_to_avoid():
    model = ScriptedModel({(1,): {A: 0.5, B: 0.5}, (1, A): {A: 0.5, C: 0.5}})
    result = generate(model, [Request([1], prefix=(A, A), avoid=((A, A),))], decode_config(beam_size=2))[0]
    assert result.tokens[:2] == [A, A]


@pytest.mark.parametrize("beam", [1, 2])
def test_the_repetition_penalty_scales_log_probs_of_seen_tokens_and_renormalises(beam):
    # after A: p(A) = 0.6, p(C) = 0.4; a penalty of 2 makes them 0.36 and 0.4, renormalised
    model = ScriptedModel({(1,): {A: 1.0}, (1, A): {A: 0.6, C: 0.4}, (1, A, A): {EOS_ID: 1.0},
                           (1, A, C): {EOS_ID: 1.0}})
    plain = generate(model, [[1]], decode_config(beam_size=beam))[0]
    assert plain.tokens == [A, A] and plain.log_prob == pytest.approx(math.log(0.6))
    penalised = generate(model, [[1]], decode_config(beam_size=beam, repetition_penalty=2.0))[0]
    assert penalised.tokens == [A, C]
    assert penalised.token_log_probs == pytest.approx([0.0, math.log(0.4 / 0.76), 0.0])
    assert penalised.log_prob == pytest.approx(math.log(0.4 / 0.76))


@pytest.mark.parametrize("name", [*STRATEGIES, "constrained"])
@pytest.mark.parametrize("guards", [{}, {"repetition_penalty": 1.3, "no_repeat_ngram": 3}])
def test_token_log_probs_sum_to_the_log_prob_of_every_hypothesis(name, guards):
    model = tiny_model("rnn_bahdanau")
    requests = [Request(tuple(source), prefix=(5,) if i % 2 else ()) for i, source in
                enumerate(random_sources(5, seed=13))]
    if name == "constrained":
        requests[1] = replace(requests[1], constraints=(((8, 9),), ((12,),)))
    decode = strategy_decode("beam" if name == "constrained" else name, **guards)
    for result in generate(model, requests, decode):
        for entry in result.nbest:
            assert len(entry.token_log_probs) == len(entry.tokens) + 1
            assert sum(entry.token_log_probs) == pytest.approx(entry.log_prob, abs=1e-9)
        assert result.token_log_probs == result.nbest[0].token_log_probs


def test_a_phrase_to_avoid_is_blocked_in_every_likely_spelling(tiny_trained_run):
    from nmt_cli.decoding import load_translator
    from nmt_cli.decoding.request import AVOID_SEGMENTATIONS

    translator = load_translator(tiny_trained_run)
    tokenizer = translator.tokenizer
    spellings = tokenizer.tgt_segmentations("kitchen", AVOID_SEGMENTATIONS)
    assert spellings[0] == tokenizer.encode_tgt("kitchen") and len(spellings) == AVOID_SEGMENTATIONS
    assert len({tuple(ids) for ids in spellings}) == len(spellings)
    assert {tokenizer.decode_tgt(ids) for ids in spellings} == {"kitchen"}
    # the sentences whose translation says a word: avoided, no spelling of it is left in the text
    sources = ["the cook sees the kitchen", "a waiter walks into the kitchen", "the cat eats fish"]
    plain = translator.translate(sources)
    words = {word for hypothesis in plain for word in hypothesis.text.split() if len(word) > 3}
    assert words
    for word in sorted(words)[:3]:
        requests = [Request.from_text(tokenizer, source, avoid=[word]) for source in sources]
        for result in translator.translate(requests):
            assert word not in result.text.split(), (word, result.text)
