"""Lexically constrained search: the tracking arithmetic against brute force, dynamic beam
allocation on a scripted decoder, then every family, ensembles, prefixes, n-best and the
CTranslate2 engine's refusal."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.constraints import (ConstraintTable, advance, all_met, constraints_met, initial_state,
                                          met_units, next_tokens, tokens_needed)
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.generator import generate
from nmt_cli.decoding.request import Request, UnfitConstraintsError
from nmt_cli.decoding.strategies.constrained import ConstrainedSearch, stripe_order
from nmt_cli.decoding.translator import Translator
from nmt_cli.errors import NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.specials import EOS_ID
from tests.test_generate import ARCHITECTURES, VOCAB_REAL, ScriptedModel, decode_config, tiny_model

A, B, C, D = 4, 5, 6, 7

# ---- tracking ------------------------------------------------------------------------------

phrases = st.lists(st.integers(4, 6), min_size=1, max_size=4).map(tuple)
constraint_sets = st.lists(st.lists(phrases, min_size=1, max_size=2).map(tuple), min_size=1, max_size=3)


def longest_match(tokens: list[int], phrase: tuple[int, ...]) -> int:
    """Brute force: the length of the longest prefix of ``phrase`` that ends ``tokens``."""
    return max(j for j in range(min(len(phrase), len(tokens)) + 1) if tuple(tokens[len(tokens) - j:]) == phrase[:j])


@settings(max_examples=200, deadline=None)
@given(constraint_sets, st.lists(st.integers(4, 6), max_size=14))
def test_tracking_agrees_with_brute_force_on_every_prefix_of_an_output(constraints, tokens):
    table = ConstraintTable.build([constraints], torch.device("cpu"))
    alternatives = [alt for constraint in constraints for alt in constraint]
    owners = [number for number, constraint in enumerate(constraints) for _ in constraint]
    sentence = torch.zeros((), dtype=torch.long)
    progress, matched = initial_state(table, sentence)
    for t in range(len(tokens) + 1):
        output = tokens[:t]
        met = constraints_met(constraints, output)
        assert bool(all_met(table, sentence, matched)) == all(met)
        for p, alt in enumerate(alternatives):
            assert bool(matched[p]) == met[owners[p]]
            assert int(progress[p]) == longest_match(output, alt), (output, alt)
        expected_units = sum(max(map(len, c)) if m else min(max(map(len, c)) - 1,
                                                              max(longest_match(output, a) for a in c))
                             for c, m in zip(constraints, met))
        assert int(met_units(table, sentence, progress, matched)) == expected_units
        unmet = [c for c, m in zip(constraints, met) if not m]
        expected_needed = sum(min(map(len, c)) for c in unmet) - max(
            [min(map(len, c)) - min(len(a) - longest_match(output, a) for a in c) for c in unmet] + [0])
        assert int(tokens_needed(table, sentence, progress, matched)) == expected_needed
        upcoming = next_tokens(table, sentence, progress, matched).tolist()
        for p, alt in enumerate(alternatives):
            assert upcoming[p] == (-1 if met[owners[p]] else alt[int(progress[p])])
        if t < len(tokens):
            progress, matched = advance(table, sentence, progress, matched, torch.tensor(tokens[t]))


def test_a_phrase_whose_prefix_is_its_suffix_keeps_its_partial_match():
    table = ConstraintTable.build([[((A, A, B),)]], torch.device("cpu"))
    progress, matched = initial_state(table, torch.tensor(0))
    seen = []
    for token in (A, A, A, B):  # "a a a b" contains "a a b": after "a a a" the match is still 2 long
        progress, matched = advance(table, torch.tensor(0), progress, matched, torch.tensor(token))
        seen.append(int(progress[0]))
    assert seen == [1, 2, 2, 3] and bool(matched[0])


def test_stripes_take_the_best_of_each_bank_in_turn_highest_bank_first():
    scores = torch.tensor([[-1.0, -2.0, -3.0, -4.0, float("-inf"), -0.5]], dtype=torch.float64)
    banks = torch.tensor([[0, 0, 1, 2, 2, 0]])
    # bank 2: -4; bank 1: -3; bank 0: -0.5, -1, -2; the impossible candidate last
    assert stripe_order(scores, banks, 2).tolist() == [[3, 2, 5, 0, 1, 4]]
    assert stripe_order(scores, torch.zeros_like(banks), 0).tolist() == [[5, 0, 1, 2, 3, 4]]  # one bank: by score


# ---- dynamic beam allocation on a scripted decoder -----------------------------------------------

# the model prefers "A EOS"; "D" is nearly impossible
SCRIPT = {(1,): {A: 0.9, B: 0.09, D: 0.01}, (1, A): {EOS_ID: 0.9, C: 0.09, D: 0.01},
          (1, B): {EOS_ID: 1.0}, (1, A, D): {EOS_ID: 0.9, C: 0.1}, (1, D): {A: 0.5, EOS_ID: 0.5},
          (1, A, C): {EOS_ID: 0.95, D: 0.05}, (1, A, C, D): {EOS_ID: 1.0}, (1, D, A): {EOS_ID: 1.0}}


@pytest.mark.parametrize("beam", [1, 2, 3])
def test_an_unlikely_constraint_is_placed_and_eos_waits_for_it(beam):
    model = ScriptedModel(SCRIPT)
    plain = generate(model, [[1]], decode_config(beam_size=beam))[0]
    assert plain.tokens == [A] and plain.constraints_met == []
    result = generate(model, [Request([1], constraints=(((D,),),))], decode_config(beam_size=beam))[0]
    assert D in result.tokens and result.constraints_met == [True]
    assert result.tokens in ([A, D], [D, A])
    assert sum(result.token_log_probs) == pytest.approx(result.log_prob)
    two = generate(model, [Request([1], constraints=(((C, D),), ((A,),)))], decode_config(beam_size=beam))[0]
    assert two.tokens == [A, C, D] and two.constraints_met == [True, True]


def test_an_alternative_satisfies_its_constraint_and_the_likelier_one_wins():
    model = ScriptedModel(SCRIPT)
    result = generate(model, [Request([1], constraints=(((D,), (B,)),))], decode_config(beam_size=3))[0]
    assert result.tokens == [B] and result.constraints_met == [True]


def test_at_its_limit_a_hypothesis_ends_with_its_constraints_unmet():
    model = ScriptedModel(SCRIPT)
    decode = decode_config(beam_size=2, max_len_b=1)  # "C" only ever follows "A": not within one token
    result = generate(model, [Request([1], constraints=(((C,),),))], decode)[0]
    assert len(result.tokens) == 1 and result.constraints_met == [False]
    assert math.isfinite(result.log_prob)


def test_an_explicit_strategy_that_ignores_constraints_refuses_them():
    model = ScriptedModel(SCRIPT)
    request = Request([1], constraints=(((D,),),))
    for changes in (dict(search="beam"), dict(search="greedy"), dict(sampling="top_k", top_k=2)):
        with pytest.raises(NmtError, match="does not enforce constraints"):
            generate(model, [request], decode_config(**changes))


# ---- on_unmet --------------------------------------------------------------------------------


class EagerToEnd(dict):
    """A script whose every entry is: EOS 0.6, A B C D 0.1 each."""

    def get(self, key, default=None):
        return {EOS_ID: 0.6, A: 0.1, B: 0.1, C: 0.1, D: 0.1}


def test_on_unmet_error_names_the_sentence_relax_raises_the_limit_drop_keeps_what_fits():
    model = ScriptedModel(EagerToEnd())  # would end at once: only the constraints and the limit shape the output
    fits = Request([1], constraints=(((A,),),))
    too_long = Request([1], prefix=(B,), constraints=(((C, D),), ((A,),), ((D, D, D),)))  # needs 7 tokens
    decode = decode_config(beam_size=2, max_len_b=4)
    with pytest.raises(UnfitConstraintsError, match=r"input 2: .*need 7 output tokens.*limit \(4\)") as error:
        generate(model, [fits, too_long], decode)
    assert error.value.index == 1
    relaxed = generate(model, [fits, too_long], replace(decode, on_unmet="relax"))[1]
    assert relaxed.tokens[0] == B and relaxed.constraints_met == [True, True, True]
    dropped = generate(model, [fits, too_long], replace(decode, on_unmet="drop"))[1]
    assert dropped.tokens[0] == B and dropped.constraints_met == [True, True, False]
    assert len(dropped.tokens) <= 4


@pytest.mark.parametrize("beam", [1, 2])
def test_constraints_that_share_their_first_token_both_fit_a_limit_with_no_slack(beam):
    """"A B" and "A C": after "A" only one of them can go on, so the other must be written whole;
    a limit of 4 holds both only if the search counts it so."""
    model = ScriptedModel(EagerToEnd())
    request = Request([1], constraints=(((A, B),), ((A, C),)))
    result = generate(model, [request], decode_config(beam_size=beam, max_len_a=0.0, max_len_b=4))[0]
    assert result.constraints_met == [True, True] and result.tokens in ([A, B, A, C], [A, C, A, B])


def test_relax_never_passes_the_models_longest_output(tiny_trained_run):
    translator = Translator.from_checkpoint(tiny_trained_run, device="cpu", overrides={"decode.on_unmet": "relax"})
    long_phrase = " ".join(["kitchen"] * 80)  # far more pieces than the 127 positions of the model hold
    request = Request.from_text(translator.tokenizer, "a cat", constraints=[long_phrase, long_phrase])
    with pytest.raises(UnfitConstraintsError, match="model's longest output"):
        translator.translate([request])


def test_a_chunked_stream_numbers_the_unfit_sentence_within_the_whole_stream(tiny_trained_run):
    translator = Translator.from_checkpoint(tiny_trained_run, device="cpu",
                                            overrides={"decode.max_len_a": 0.0, "decode.max_len_b": 2})
    requests = [Request.from_text(translator.tokenizer, "a cat") for _ in range(5)]
    requests.append(Request.from_text(translator.tokenizer, "a cat", constraints=["the big kitchen today"]))
    with pytest.raises(UnfitConstraintsError, match="^input 6: ") as error:
        list(translator.translate_stream(requests, chunk_size=2))
    assert error.value.index == 5


# ---- every family: constraints drawn from a reference always appear ----------------------------

VOCAB_TOKENS = st.integers(4, VOCAB_REAL - 1)


@st.composite
def constrained_requests(draw):
    """A random source, and 1-3 constraints (with 1-2 alternatives) cut from a random reference."""
    source = draw(st.lists(VOCAB_TOKENS, min_size=1, max_size=8))
    reference = draw(st.lists(VOCAB_TOKENS, min_size=3, max_size=10))
    constraints = []
    for _ in range(draw(st.integers(1, 3))):
        alternatives = []
        for _ in range(draw(st.integers(1, 2))):
            start = draw(st.integers(0, len(reference) - 1))
            alternatives.append(tuple(reference[start:start + draw(st.integers(1, 3))]))
        constraints.append(tuple(alternatives))
    prefix = tuple(draw(st.lists(VOCAB_TOKENS, max_size=2)))
    return Request(tuple(source), prefix=prefix, constraints=tuple(constraints))


MODELS = {arch: tiny_model(arch) for arch in sorted(ARCHITECTURES)}


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@settings(max_examples=6, deadline=None)
@given(requests=st.lists(constrained_requests(), min_size=1, max_size=3), beam=st.sampled_from([1, 3]))
def test_constraints_and_the_prefix_always_appear_in_every_family(arch, requests, beam):
    """The best hypothesis meets every constraint; in the n-best list those that meet them all
    come first (the others reached their limit first)."""
    decode = DecodeConfig(beam_size=beam, nbest=beam, alpha=0.6, max_len_a=1.0, max_len_b=4, on_unmet="relax")
    results = generate(MODELS[arch], requests, decode)
    for request, result in zip(requests, results):
        assert result.constraints_met == [True] * len(request.constraints), (request, result.tokens)
        satisfied = [all(entry.constraints_met) for entry in result.nbest]
        assert satisfied == sorted(satisfied, reverse=True)
        for entry in result.nbest:
            assert entry.tokens[:len(request.prefix)] == list(request.prefix)
            assert entry.constraints_met == constraints_met(request.constraints, entry.tokens)
            assert sum(entry.token_log_probs) == pytest.approx(entry.log_prob, abs=1e-6)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@settings(max_examples=6, deadline=None)
@given(requests=st.lists(constrained_requests(), min_size=1, max_size=3), beam=st.sampled_from([1, 3]))
def test_with_no_slack_left_the_constraints_fill_the_output_in_every_family(arch, requests, beam):
    """An output limit of exactly what the prefix and constraints take: however the model would
    wander, a hypothesis with no slack left may only advance a constraint, so all are met."""
    for request in requests:
        needed = len(request.prefix) + sum(min(map(len, constraint)) for constraint in request.constraints)
        decode = DecodeConfig(beam_size=beam, alpha=0.6, max_len_a=0.0, max_len_b=needed, on_unmet="error")
        result = generate(MODELS[arch], [request], decode)[0]
        assert result.constraints_met == [True] * len(request.constraints), (request, result.tokens)
        assert len(result.tokens) <= needed


def test_an_ensemble_meets_constraints_with_nbest_and_attention_of_the_right_shape():
    ensemble = Ensemble([tiny_model("transformer"), tiny_model("rnn_bahdanau")]).eval()
    rng = np.random.default_rng(7)
    requests = [Request(tuple(rng.integers(4, VOCAB_REAL, size=5).tolist()),
                        constraints=(((9, 10),), ((11,), (12, 13)))) for _ in range(3)]
    requests.append(Request((4, 5, 6)))  # a sentence without constraints in the same batch
    decode = DecodeConfig(beam_size=4, nbest=3, alpha=0.6, max_len_a=1.0, max_len_b=4)
    results = generate(ensemble, requests, decode, need_attention=True)
    for request, result in zip(requests, results):
        assert len(result.nbest) == 3
        assert result.constraints_met == [True] * len(request.constraints)
        for entry in result.nbest:
            assert len(entry.constraints_met) == len(request.constraints)
            layers, heads = ensemble.attention_layers, ensemble.attention_heads
            assert entry.attention.shape == (layers, heads, len(entry.tokens), len(request.source))


@pytest.mark.parametrize("beam", [2, 4])
def test_sentences_without_constraints_are_searched_as_plain_beam_search_does(tiny_trained_run, beam):
    translator = Translator.from_checkpoint(tiny_trained_run, device="cpu",
                                            overrides={"decode.beam_size": beam, "decode.nbest": beam})
    texts = ["a cat sees the dog", "two aunts visit the kitchen today", "the waiter", "my sister reads a book"]
    plain = translator.translate(texts)
    mixed = [Request.from_text(translator.tokenizer, text, constraints=["kitchen"] if i % 2 else [])
             for i, text in enumerate(texts)]
    together = translator.translate(mixed)
    for i, (alone, found) in enumerate(zip(plain, together)):
        if i % 2:
            assert found.constraints_met == [True] and "kitchen" in found.text
        else:
            assert [(h.tokens, h.score) for h in found.nbest] == [(h.tokens, h.score) for h in alone.nbest]
            assert found.token_log_probs == alone.token_log_probs
    explicit = translator.with_decode({"decode.search": "constrained"}).translate(texts)
    assert [(h.tokens, h.score) for h in explicit] == [(h.tokens, h.score) for h in plain]


# ---- CTranslate2 ---------------------------------------------------------------------------


def test_the_ctranslate2_engine_refuses_constraints_and_guards_and_scores_each_token(tiny_trained_run, tmp_path):
    pytest.importorskip("ctranslate2")
    from nmt_cli.decoding import load_translator
    from nmt_cli.export import export_ctranslate2

    exported = export_ctranslate2(tiny_trained_run, tmp_path / "ct2", "float32")
    engine = load_translator([exported], engine="ctranslate2", device="cpu", overrides={"decode.nbest": 2})
    for asked in (dict(constraints=["kitchen"]), dict(avoid=["kitchen"])):
        with pytest.raises(NmtError, match="--engine torch"):
            engine.translate([Request.from_text(engine.tokenizer, "a cat", **asked)])
    for key, value in (("decode.repetition_penalty", 1.5), ("decode.no_repeat_ngram", 2)):
        with pytest.raises(NmtError, match="--engine torch"):
            engine.with_decode({key: value})
    sentences = ["a cat sees the dog", "the waiter", ""]
    assert all(hypothesis.token_log_probs is None for hypothesis in engine.translate(sentences))  # not asked for
    for hypothesis in engine.translate(sentences, token_scores=True):
        for entry in hypothesis.nbest:
            assert len(entry.token_log_probs) == len(entry.tokens) + 1
            assert sum(entry.token_log_probs) == pytest.approx(entry.log_prob, abs=1e-3)


# ---- stopping once the finished hypotheses cannot be beaten ----------------------------------


def everything_about(results) -> list:
    """Every field of every n-best entry, attention included, to compare two searches exactly."""
    return [[(entry.tokens, entry.score, entry.log_prob, entry.token_log_probs, entry.constraints_met,
              None if entry.attention is None else entry.attention.tolist()) for entry in result.nbest]
            for result in results]


class EndingSooner(Seq2SeqModel):
    """A model with its EOS logit raised by ``boost``: an untrained one runs to its limit, this one
    ends its hypotheses at different lengths, as a trained one does."""

    def __init__(self, inner: Seq2SeqModel, boost: float):
        super().__init__()
        self.inner, self.boost = inner, boost
        self.attention_layers, self.attention_heads = inner.attention_layers, inner.attention_heads

    def encode(self, src_tokens, src_mask):
        return self.inner.encode(src_tokens, src_mask)

    def decode_step(self, prev_tokens, memory, state, need_attention=False, features_only=False):
        logits, state, attention = self.inner.decode_step(prev_tokens, memory, state, need_attention)
        logits = logits.clone()
        logits[:, EOS_ID] += self.boost
        return logits, state, attention

    def reorder_state(self, state, indices):
        return self.inner.reorder_state(state, indices)

    def reorder_memory(self, memory, indices):
        return self.inner.reorder_memory(memory, indices)


def seeded_constrained_requests(count: int, seed: int) -> list[Request]:
    """Random sources with 1-2 constraints each (1-2 alternatives of 1-3 tokens), cut from random references."""
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(count):
        reference = rng.integers(4, VOCAB_REAL, size=int(rng.integers(3, 9))).tolist()
        constraints = []
        for _ in range(int(rng.integers(1, 3))):
            alternatives = []
            for _ in range(int(rng.integers(1, 3))):
                start = int(rng.integers(0, len(reference)))
                alternatives.append(tuple(reference[start:start + int(rng.integers(1, 4))]))
            constraints.append(tuple(alternatives))
        source = rng.integers(4, VOCAB_REAL, size=int(rng.integers(1, 9))).tolist()
        requests.append(Request(tuple(source), constraints=tuple(constraints)))
    requests.append(Request((4, 5, 6)))  # and one without constraints in the same batch
    return requests


def counting_decoded_rows(model: Seq2SeqModel, monkeypatch) -> list[int]:
    """A list to which each search appends 0 before it runs: the model adds every decoder step's
    row count to its last entry."""
    rows_decoded: list[int] = []
    step_log_probs = model.step_log_probs

    def counting(tokens, *args, **kwargs):
        rows_decoded[-1] += tokens.size(0)
        return step_log_probs(tokens, *args, **kwargs)

    monkeypatch.setattr(model, "step_log_probs", counting)
    return rows_decoded


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_stopping_once_no_live_beam_can_win_changes_no_output_and_spares_steps(arch, monkeypatch):
    """The search that ends a sentence once no live beam can beat its n-best met hypotheses gives
    the outputs of the search that waits for K finished hypotheses (every beam, n-best, length
    penalty on and off), and decodes fewer rows.

    One sentence a batch, they are identical to the last bit. In a batch of several, tokens are
    the same and scores agree to float32 rounding only: a sentence that leaves the batch sooner
    changes the shape of its batch-mates' matrix products, as any sentence that ends does."""
    model = EndingSooner(MODELS[arch], boost=3.0)
    requests = seeded_constrained_requests(12, seed=len(arch))
    rows_decoded = counting_decoded_rows(model, monkeypatch)
    settled = ConstrainedSearch.settled
    for beam, nbest in [(1, 1), (3, 1), (3, 2), (5, 1), (5, 3)]:
        for alpha in (0.0, 0.6):
            for per_batch in (1, 0):
                decode = DecodeConfig(beam_size=beam, nbest=nbest, alpha=alpha, max_len_a=1.0, max_len_b=6,
                                      on_unmet="relax", workers=1, max_sentences=per_batch,
                                      constrained_stop="exact")
                outputs, rows = [], []
                for rule in (settled, lambda self, step, scores: None):
                    monkeypatch.setattr(ConstrainedSearch, "settled", rule)
                    rows_decoded.append(0)
                    outputs.append(everything_about(generate(model, requests, decode, need_attention=True)))
                    rows.append(rows_decoded[-1])
                assert rows[0] <= rows[1]
                if per_batch == 1:
                    assert outputs[0] == outputs[1], (beam, nbest, alpha)
                    continue
                for stopped, waited in zip(*outputs):
                    assert [entry[0] for entry in stopped] == [entry[0] for entry in waited], (beam, nbest, alpha)
                    for stopped_entry, waited_entry in zip(stopped, waited):
                        assert stopped_entry[1:3] == pytest.approx(waited_entry[1:3], rel=1e-6)
    spared = [without - with_rule for with_rule, without in zip(rows_decoded[::2], rows_decoded[1::2])]
    assert sum(spared) > 0, spared


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_stopping_now_meets_every_constraint_leaves_the_unconstrained_alone_and_ends_no_later(arch, monkeypatch):
    """``decode.constrained_stop: now`` judges a live beam as if it ended at its next token: it may
    change outputs, but every output still meets its constraints, a sentence without constraints
    in the batch gets the output it gets with the exact rule, and no more rows are decoded."""
    model = EndingSooner(MODELS[arch], boost=3.0)
    requests = seeded_constrained_requests(12, seed=7 + len(arch))
    rows_decoded = counting_decoded_rows(model, monkeypatch)
    for beam, nbest in [(1, 1), (3, 1), (5, 2)]:
        outputs = {}
        for stop in ("exact", "now"):
            decode = DecodeConfig(beam_size=beam, nbest=nbest, alpha=0.6, max_len_a=1.0, max_len_b=6,
                                  on_unmet="relax", workers=1, max_sentences=1, constrained_stop=stop)
            rows_decoded.append(0)
            outputs[stop] = generate(model, requests, decode)
        assert rows_decoded[-1] <= rows_decoded[-2], (beam, nbest)
        for request, result in zip(requests, outputs["now"]):
            assert all(all(constraints_met(request.constraints, entry.tokens)) for entry in result.nbest)
        assert everything_about(outputs["now"][-1:]) == everything_about(outputs["exact"][-1:])


def test_a_sentence_ends_once_its_met_hypothesis_cannot_be_beaten(monkeypatch):
    """Beam 2, no length penalty: "D" (P = 0.5) meets the constraint and ends at step 1, when the
    live beams, "A A" (0.45) and "A D" (0.05), can only lose probability: the search stops there;
    without the rule it takes one more step, until "A D" ends too, for the same output."""
    script = {(1,): {D: 0.5, A: 0.5}, (1, D): {EOS_ID: 1.0}}
    script.update({(1, *[A] * length): {A: 0.9, D: 0.1} for length in range(1, 10)})
    model = ScriptedModel(script)
    calls = []
    decode_step = model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda *args, **kwargs: calls.append(1) or decode_step(*args, **kwargs))
    request = Request([1], constraints=(((D,),),))
    results = []
    for rule in (ConstrainedSearch.settled, lambda self, step, scores: None):
        monkeypatch.setattr(ConstrainedSearch, "settled", rule)
        calls.clear()
        results.append((generate(model, [request], decode_config(beam_size=2, max_len_b=10))[0], len(calls)))
    (stopped, stopped_steps), (waited, waited_steps) = results
    assert stopped.tokens == waited.tokens == [D]
    assert stopped.log_prob == waited.log_prob == pytest.approx(math.log(0.5))
    assert (stopped_steps, waited_steps) == (2, 3)
