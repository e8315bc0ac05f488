"""The generation loop: bookkeeping with a scripted decoder, then every real architecture."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_cli.config import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS, DecodeConfig, ModelConfig
from nmt_cli.decoding import generator
from nmt_cli.decoding.batching import batch_token_budget, pad_sources, token_budget_batches
from nmt_cli.decoding.generator import decoding_workers, generate, run_search
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import max_output_lengths
from nmt_cli.decoding.strategies.beam import BeamSearch
from nmt_cli.decoding.strategies.greedy import GreedySearch
from nmt_cli.errors import ConfigError
from nmt_cli.models import Seq2SeqModel, build_model
from nmt_cli.specials import EOS_ID

REPO = Path(__file__).resolve().parents[1]
A, B, C, D = 4, 5, 6, 7  # ordinary target tokens of the scripted vocabulary
VOCAB = 8


class ScriptedModel(Seq2SeqModel):
    """A decoder whose next-token probabilities are fixed in advance.

    ``script[(first source token, *prefix)]`` gives ``{token: probability}``; every
    other token has probability 0. Without an entry the decoder says EOS. Attention is
    one-hot on source position ``min(t, |x| - 1)`` so its collection can be checked.
    """

    def __init__(self, script: dict[tuple[int, ...], dict[int, float]]):
        super().__init__()
        self.script = script

    def encode(self, src_tokens, src_mask):
        return {"src_mask": src_mask, "src_tokens": src_tokens}

    def decode_step(self, prev_tokens, memory, state, need_attention=False):
        rows, width = memory["src_tokens"].shape
        prefix = prev_tokens.new_zeros(rows, 0) if state is None else torch.cat(
            [state["prefix"], prev_tokens[:, None]], dim=1)  # (N, t) without BOS
        logits = torch.full((rows, VOCAB), float("-inf"))
        for row in range(rows):
            key = (int(memory["src_tokens"][row, 0]), *prefix[row].tolist())
            for token, prob in self.script.get(key, {EOS_ID: 1.0}).items():
                logits[row, token] = math.log(prob)
        attention = None
        if need_attention:
            lengths = memory["src_mask"].sum(1)  # (N,)
            position = torch.clamp(lengths - 1, max=prefix.size(1))  # (N,)
            attention = torch.nn.functional.one_hot(position, width).float()[:, None, None, :]  # (N, 1, 1, S)
        return logits, {"prefix": prefix}, attention


def decode_config(**changes) -> DecodeConfig:
    return replace(DecodeConfig(beam_size=2, alpha=0.0, max_len_a=0.0, max_len_b=10, min_len=0), **changes)


def test_beam_finds_the_more_probable_short_translation_that_greedy_misses():
    # greedy: A (0.6) then C (0.55) -> P = 0.33; beam 2 also keeps B (0.4) -> EOS, P = 0.4
    script = {(1,): {A: 0.6, B: 0.4}, (1, A): {C: 0.55, D: 0.45}, (1, B): {EOS_ID: 1.0}}
    model = ScriptedModel(script)
    greedy = generate(model, [[1, 1]], decode_config(beam_size=1))[0]
    beam = generate(model, [[1, 1]], decode_config(beam_size=2, nbest=2))[0]
    assert greedy.tokens == [A, C]
    assert greedy.log_prob == pytest.approx(math.log(0.33))
    assert beam.tokens == [B]
    assert [h.tokens for h in beam.nbest] == [[B], [A, C]]
    assert [h.score for h in beam.nbest] == pytest.approx([math.log(0.4), math.log(0.33)])


def test_length_penalty_reorders_the_finished_hypotheses():
    # "A" has P = 0.5 (2 tokens with EOS); "B C C" has P = 0.45 (4 tokens with EOS)
    script = {(1,): {A: 0.5, B: 0.5}, (1, A): {EOS_ID: 1.0}, (1, B): {C: 1.0}, (1, B, C): {C: 0.9, D: 0.1},
              (1, B, C, C): {EOS_ID: 1.0}, (1, B, C, D): {D: 1.0}}
    model = ScriptedModel(script)
    plain = generate(model, [[1]], decode_config(beam_size=2, nbest=2, alpha=0.0))[0]
    assert [h.tokens for h in plain.nbest] == [[A], [B, C, C]]
    penalised = generate(model, [[1]], decode_config(beam_size=2, nbest=2, alpha=1.0))[0]
    assert [h.tokens for h in penalised.nbest] == [[B, C, C], [A]]
    assert penalised.score == pytest.approx(math.log(0.45) / (9 / 6))
    assert penalised.nbest[1].score == pytest.approx(math.log(0.5) / (7 / 6))
    assert penalised.log_prob == pytest.approx(math.log(0.45))


def test_a_sentence_stops_after_beam_size_finished_hypotheses():
    # every prefix may end; the third-best continuation keeps going but must not be kept
    script = {(1,): {A: 0.5, B: 0.3, C: 0.2}, (1, A): {EOS_ID: 0.6, D: 0.4},
              (1, B): {EOS_ID: 0.7, D: 0.3}, (1, C): {EOS_ID: 0.5, D: 0.5}}
    model = ScriptedModel(script)
    decode = decode_config(beam_size=2, nbest=2)
    src, mask = pad_sources([[1]], "cpu")
    search = BeamSearch([Request([1])], max_output_lengths(mask.sum(1), 0.0, 10), decode, keep_attention=False)
    run_search(model, src, mask, search, need_attention=False)
    finished = search.finished[0]
    assert len(finished) == 2  # A EOS (0.30) and B EOS (0.21); A D (0.2) is never expanded further
    assert sorted(h.tokens for h in finished) == [[A], [B]]


def test_min_len_forbids_early_eos():
    script = {(1,): {EOS_ID: 0.7, A: 0.3}, (1, A): {EOS_ID: 1.0}}
    model = ScriptedModel(script)
    for beam in (1, 2):
        assert generate(model, [[1]], decode_config(beam_size=beam, min_len=0))[0].tokens == []
        forced = generate(model, [[1]], decode_config(beam_size=beam, min_len=1))[0]
        assert forced.tokens == [A]
        assert forced.log_prob == pytest.approx(math.log(0.3))


def test_max_len_is_per_sentence_and_forces_eos():
    # EOS is forbidden (min_len 10) so only the limit a * |x| + b (a = 1, b = 0) ends each sentence
    script = {(1, *([A] * n)): {A: 0.9, EOS_ID: 0.1} for n in range(20)}
    script.update({(2, *([A] * n)): {A: 0.9, EOS_ID: 0.1} for n in range(20)})
    model = ScriptedModel(script)
    sources = [[1, 1, 1], [2], [1, 1, 1, 1, 1]]
    for beam in (1, 3):
        decode = decode_config(beam_size=beam, max_len_a=1.0, max_len_b=0, min_len=10)
        results = generate(model, sources, decode)
        assert [len(h.tokens) for h in results] == [3, 1, 5]
        assert results[0].log_prob == pytest.approx(3 * math.log(0.9) + math.log(0.1))


def test_nbest_is_sorted_and_bounded_by_the_beam():
    script = {(1,): {A: 0.4, B: 0.35, C: 0.25}, (1, A): {EOS_ID: 1.0}, (1, B): {EOS_ID: 1.0}, (1, C): {EOS_ID: 1.0}}
    model = ScriptedModel(script)
    result = generate(model, [[1]], decode_config(beam_size=3, nbest=3))[0]
    assert [h.tokens for h in result.nbest] == [[A], [B], [C]]
    assert [h.score for h in result.nbest] == sorted((h.score for h in result.nbest), reverse=True)
    assert result.nbest[0].tokens == result.tokens and result.nbest[0].score == result.score
    with pytest.raises(ConfigError, match="decode.nbest"):
        generate(model, [[1]], decode_config(beam_size=2, nbest=3))


def test_batched_results_match_one_at_a_time_and_come_back_in_input_order():
    script = {
        (1,): {A: 0.6, B: 0.4}, (1, A): {C: 0.55, D: 0.45}, (1, B): {EOS_ID: 1.0},
        (2,): {D: 0.9, EOS_ID: 0.1}, (2, D): {D: 0.5, EOS_ID: 0.5},
        (3,): {C: 1.0}, (3, C): {B: 1.0},
    }
    model = ScriptedModel(script)
    sources = [[1, 4], [2], [3, 4, 4, 4], [], [2, 5, 5]]
    for beam in (1, 3):
        decode = decode_config(beam_size=beam, nbest=beam, max_tokens=6)
        batched = generate(model, sources, decode)
        alone = [generate(model, [source], decode)[0] for source in sources]
        assert [h.tokens for h in batched] == [h.tokens for h in alone]
        assert [h.score for h in batched] == pytest.approx([h.score for h in alone])
        assert batched[3].tokens == [] and batched[3].nbest == []  # empty source, empty output


def test_attention_of_the_chosen_hypothesis_is_collected_per_token():
    script = {(1,): {A: 1.0}, (1, A): {B: 1.0}, (1, A, B): {EOS_ID: 1.0}}
    model = ScriptedModel(script)
    for beam in (1, 2):
        result = generate(model, [[1, 5, 5, 5], [1, 5]], decode_config(beam_size=beam), need_attention=True)
        long, short = result
        assert long.attention.shape == (1, 1, 2, 4)  # (L, H, T, S)
        np.testing.assert_array_equal(long.attention[0, 0], np.eye(4)[:2])
        np.testing.assert_array_equal(short.attention[0, 0], np.eye(2))


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    script = {(1,): {A: 0.5, B: 0.3, C: 0.2}, (1, A): {EOS_ID: 1.0}, (1, B): {EOS_ID: 1.0}, (1, C): {EOS_ID: 1.0}}
    model = ScriptedModel(script)
    sources = [[1]] * 40
    samples = generate(model, sources, decode_config(beam_size=1, sampling="top_k", top_k=0, seed=3))
    again = generate(model, sources, decode_config(beam_size=1, sampling="top_k", top_k=0, seed=3))
    drawn = [h.tokens[0] for h in samples]
    assert drawn == [h.tokens[0] for h in again]
    assert set(drawn) == {A, B, C}
    top1 = generate(model, sources[:5], decode_config(beam_size=1, sampling="top_k", top_k=1))
    assert all(h.tokens == [A] for h in top1)
    nucleus = generate(model, sources[:5], decode_config(beam_size=4, nbest=4, sampling="top_p", top_p=0.5))
    assert all(len(h.nbest) == 4 and {n.tokens[0] for n in h.nbest} == {A} for h in nucleus)


def test_token_budget_batches_sort_by_length_and_respect_the_budget():
    lengths = [3, 10, 1, 7, 7, 2]
    batches = token_budget_batches(lengths, max_tokens=14)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 14
    assert batches[0] == [1]  # longest first, alone: 2 * 10 > 14

    capped = token_budget_batches(lengths, max_tokens=100, max_sentences=2)
    assert [len(batch) for batch in capped] == [2, 2, 2]
    assert sorted(i for batch in capped for i in batch) == list(range(len(lengths)))


def test_decoding_batches_take_the_devices_budget_unless_one_is_given(monkeypatch):
    assert DecodeConfig().max_tokens == 0
    assert batch_token_budget(0, torch.device("cpu")) == CPU_BATCH_TOKENS
    assert batch_token_budget(0, torch.device("cuda")) == GPU_BATCH_TOKENS
    assert batch_token_budget(500, torch.device("cpu")) == 500
    batch_tokens = []
    decode_task = generator.decode_task
    monkeypatch.setattr(generator, "decode_task", lambda model, device, number, task: (
        batch_tokens.append(sum(len(request.source) for request in task.requests)),
        decode_task(model, device, number, task))[1])
    sources = [[1] * 10] * 500  # 5,000 source tokens
    hypotheses = generate(ScriptedModel({(1,): {A: 1.0}}), sources, decode_config(beam_size=1))
    assert len(hypotheses) == 500 and all(h.tokens == [A] for h in hypotheses)
    assert batch_tokens == [CPU_BATCH_TOKENS, CPU_BATCH_TOKENS, 1000]
    batch_tokens.clear()
    generate(ScriptedModel({}), sources, decode_config(beam_size=1, max_tokens=4000))
    assert batch_tokens == [4000, 1000]


def test_sampling_does_not_depend_on_the_number_of_workers():
    script = {(1,): {A: 0.5, B: 0.3, C: 0.2}, (1, A): {EOS_ID: 1.0}, (1, B): {EOS_ID: 1.0}, (1, C): {EOS_ID: 1.0}}
    sources = [[1]] * 12
    by_workers = [
        [h.tokens for h in generate(ScriptedModel(script), sources, decode_config(
            beam_size=1, sampling="top_k", top_k=0, seed=5, max_sentences=3, workers=workers))]
        for workers in (1, 3)
    ]
    assert by_workers[0] == by_workers[1]
    assert len({tokens[0] for tokens in by_workers[0]}) > 1

# ---- real architectures, random weights -----------------------------------------------

ARCHITECTURES = {
    "transformer": {},
    "linear_transformer": {"linear_sites": ("encoder_self", "decoder_self", "cross")},
    "rnn_bahdanau": {},
    "rnn_luong": {"attention": "general", "local_attention": "local-p", "local_window": 2},
}
LOCAL_P = {"rnn_luong"}
VOCAB_REAL = 24


def tiny_model(arch: str) -> Seq2SeqModel:
    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, d_model=16, heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=2,
                      dropout=0.0, embed_dim=16, hidden_size=16, **ARCHITECTURES[arch])
    return build_model(cfg, VOCAB_REAL, VOCAB_REAL, True).eval()


def random_sources(count: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, VOCAB_REAL, size=int(rng.integers(1, 9))).tolist() for _ in range(count)]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_beam_search_of_size_one_equals_greedy_search(arch):
    model = tiny_model(arch)
    sources = random_sources(6)
    decode = DecodeConfig(beam_size=1, alpha=0.6, max_len_a=1.5, max_len_b=3, min_len=1)
    src, mask = pad_sources(sources, "cpu")
    max_lens = max_output_lengths(mask.sum(1), decode.max_len_a, decode.max_len_b)
    requests = [Request(source) for source in sources]
    greedy = GreedySearch(requests, max_lens, decode, keep_attention=True)
    beam = BeamSearch(requests, max_lens, decode, keep_attention=True)
    run_search(model, src, mask, greedy, need_attention=True)
    run_search(model, src, mask, beam, need_attention=True)
    for by_greedy, by_beam in zip(greedy.best(1), beam.best(1)):
        assert by_greedy[0].tokens == by_beam[0].tokens
        assert by_greedy[0].score == by_beam[0].score
        torch.testing.assert_close(torch.stack(by_greedy[0].attention), torch.stack(by_beam[0].attention))


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("beam", [1, 3])
def test_batched_decoding_equals_one_sentence_at_a_time(arch, beam):
    model = tiny_model(arch)
    sources = random_sources(5, seed=1)
    decode = DecodeConfig(beam_size=beam, nbest=beam, alpha=0.6, max_len_a=1.0, max_len_b=4)
    batched = generate(model, sources, decode, need_attention=True)
    for source, together in zip(sources, batched):
        alone = generate(model, [source], decode, need_attention=True)[0]
        assert together.tokens == alone.tokens
        assert together.score == pytest.approx(alone.score, abs=1e-4)
        assert [h.tokens for h in together.nbest] == [h.tokens for h in alone.nbest]
        np.testing.assert_allclose(together.attention, alone.attention, atol=1e-5)
        assert together.attention.shape[2:] == (len(together.tokens), len(source))  # (L, H, T, S)
        row_sums = together.attention.sum(axis=-1)
        if arch in LOCAL_P:  # local-p multiplies the softmax by a Gaussian: rows sum to at most one
            assert np.all((row_sums > 0) & (row_sums <= 1 + 1e-5))
        else:
            np.testing.assert_allclose(row_sums, 1.0, atol=1e-5)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_parallel_workers_give_the_output_of_one_worker(arch):
    model = tiny_model(arch)
    sources = random_sources(9, seed=3)
    decode = DecodeConfig(beam_size=3, nbest=2, alpha=0.6, max_len_a=1.0, max_len_b=4, max_sentences=2)
    threads = torch.get_num_threads()
    alone = generate(model, sources, decode)
    together = generate(model, sources, replace(decode, workers=3))
    assert torch.get_num_threads() == threads  # the caller's thread setting is left alone
    for one, other in zip(alone, together):
        assert one.tokens == other.tokens and one.score == other.score
        assert [h.tokens for h in one.nbest] == [h.tokens for h in other.nbest]


def test_a_kept_pool_gives_the_output_of_one_worker_call_after_call():
    model = tiny_model("transformer")
    decode = DecodeConfig(beam_size=3, nbest=2, max_len_a=1.0, max_len_b=4, max_sentences=2)
    with decoding_workers(model.eval(), torch.device("cpu"), 2) as pool:
        for seed in (3, 4):
            sources = random_sources(7, seed=seed)
            alone = generate(model, sources, decode)
            kept = generate(model, sources, decode, pool=pool)
            assert [(h.tokens, h.score) for h in kept] == [(h.tokens, h.score) for h in alone]
            assert [[n.tokens for n in h.nbest] for h in kept] == [[n.tokens for n in h.nbest] for h in alone]


def test_bad_decode_settings_fail_with_the_key_named():
    model = ScriptedModel({})
    with pytest.raises(ConfigError, match="decode.beam_size"):
        generate(model, [[1]], decode_config(beam_size=0))
    with pytest.raises(ConfigError, match="decode.temperature"):
        generate(model, [[1]], decode_config(sampling="top_k", temperature=0.0))
    with pytest.raises(ConfigError, match="decode.workers"):
        generate(model, [[1]], decode_config(workers=0))


@pytest.mark.slow  # runs a benchmark script
def test_decode_length_benchmark_runs_in_quick_mode(tmp_path):
    report_path = tmp_path / "decode_length.json"
    command = [sys.executable, str(REPO / "bench" / "decode_length.py"), "--quick", "--d-model", "16", "--heads", "2",
               "--ffn-dim", "32", "--layers", "1", "--threads", "1", "--no-cache-max", "256",
               "--json", str(report_path)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    report = json.loads(report_path.read_text())
    assert report["columns"][1:] == ["transformer + cache", "transformer, no cache", "linear transformer (RNN mode)"]
    assert [row[0] for row in report["rows"]] == ["64", "128", "256", "512", "512 / 64"]
    cache, no_cache, linear = zip(*(row[1:] for row in report["rows"]))
    assert all(float(cell.rstrip("x")) > 0 for cell in cache + linear + no_cache[:3])
    assert no_cache[3].startswith("not run (~") and no_cache[4].endswith("x (256 / 64)")


def test_decoding_turns_dropout_off_and_restores_the_training_mode():
    torch.manual_seed(0)
    cfg = ModelConfig(arch="transformer", d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1,
                      dropout=0.5)
    model = build_model(cfg, VOCAB_REAL, VOCAB_REAL, True).train()
    sources = random_sources(4, seed=2)
    decode = DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=3)
    first, second = generate(model, sources, decode), generate(model, sources, decode)
    assert [h.tokens for h in first] == [h.tokens for h in second]  # no dropout noise
    assert model.training


# ---- per-sentence requests: a target prefix ---------------------------------------------


PREFIX_SCRIPT = {(1,): {A: 0.6, B: 0.4}, (1, A): {C: 0.55, D: 0.45}, (1, B): {D: 0.7, C: 0.3},
                 (1, B, D): {EOS_ID: 1.0}, (1, B, C): {EOS_ID: 1.0}}


@pytest.mark.parametrize("changes", [{"beam_size": 1}, {"beam_size": 2, "nbest": 2},
                                     {"beam_size": 3, "nbest": 3, "sampling": "top_k", "top_k": 0}])
def test_a_prefix_starts_every_hypothesis_and_its_log_probs_count_in_the_score(changes):
    # unforced, every search starts with A (0.6); forced, B (0.4) comes first and is scored
    model = ScriptedModel(PREFIX_SCRIPT)
    (result,) = generate(model, [Request([1], prefix=[B])], decode_config(**changes))
    assert result.tokens == [B, D] and result.log_prob == pytest.approx(math.log(0.4 * 0.7))
    assert all(h.tokens[:1] == [B] for h in result.nbest) and len(result.nbest) == changes.get("nbest", 1)
    assert all(h.log_prob == pytest.approx(math.log(0.4) + math.log(0.7 if h.tokens == [B, D] else 0.3))
               for h in result.nbest)
    free = generate(model, [[1]], decode_config(**{**changes, "sampling": "none"}))[0]
    assert free.tokens[0] == A


@pytest.mark.parametrize("beam", [1, 2])
def test_a_prefix_longer_than_the_output_limit_is_kept_whole(beam):
    script = {(1,): {A: 0.5, EOS_ID: 0.5}, (1, A): {A: 0.5, EOS_ID: 0.5}, (1, A, A): {A: 0.5, EOS_ID: 0.5}}
    (result,) = generate(ScriptedModel(script), [Request([1], prefix=[A, A, A])],
                         decode_config(beam_size=beam, max_len_a=0.0, max_len_b=1))
    assert result.tokens == [A, A, A]  # the limit (1 token) is raised to the prefix; then EOS
    assert result.log_prob == pytest.approx(3 * math.log(0.5))  # EOS after A A A: probability 1


@pytest.mark.parametrize("beam", [1, 2])
def test_sentences_without_a_prefix_are_untouched_by_prefixed_ones_in_their_batch(beam):
    model = ScriptedModel(PREFIX_SCRIPT)
    decode = decode_config(beam_size=beam, nbest=beam)
    alone = generate(model, [[1], [1, 4]], decode)
    mixed = generate(model, [Request([1]), Request([1, 5], prefix=[B]), Request([1, 4])], decode)
    for without, within in zip(alone, [mixed[0], mixed[2]]):
        assert [(h.tokens, h.score) for h in without.nbest] == [(h.tokens, h.score) for h in within.nbest]
    assert mixed[1].tokens[0] == B


def random_prefixes(count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, VOCAB_REAL, size=int(rng.integers(0, 4))).tolist() for _ in range(count)]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("beam", [1, 3])
def test_every_family_starts_its_output_with_the_prefix_and_scores_it_as_forced_decoding_does(arch, beam):
    from nmt_cli.decoding.scoring import score_pairs

    model = tiny_model(arch)
    sources, prefixes = random_sources(6, seed=4), random_prefixes(6, seed=4)
    decode = DecodeConfig(beam_size=beam, nbest=beam, alpha=0.6, max_len_a=1.0, max_len_b=2)
    results = generate(model, [Request(s, prefix=p) for s, p in zip(sources, prefixes)], decode)
    forced = score_pairs(model, [(source, h.tokens) for source, result in zip(sources, results) for h in result.nbest],
                         "cpu")
    hypotheses = [h for result in results for h in result.nbest]
    assert any(prefixes) and len(forced) == len(hypotheses)
    for prefix, result in zip(prefixes, results):
        assert all(h.tokens[:len(prefix)] == prefix for h in result.nbest)
    for hypothesis, score in zip(hypotheses, forced):  # EOS at the limit is scored like any token
        assert hypothesis.log_prob == pytest.approx(score.log_prob, abs=1e-4)


def test_prefixed_requests_give_the_same_output_with_parallel_workers():
    model = tiny_model("transformer")
    requests = [Request(s, prefix=p) for s, p in zip(random_sources(9, seed=5), random_prefixes(9, seed=5))]
    decode = DecodeConfig(beam_size=3, nbest=2, max_len_a=1.0, max_len_b=4, max_sentences=2)
    alone = generate(model, requests, decode)
    together = generate(model, requests, replace(decode, workers=2))
    assert [[(n.tokens, n.score) for n in h.nbest] for h in alone] == \
        [[(n.tokens, n.score) for n in h.nbest] for h in together]


# ---- search strategies by name ------------------------------------------------------------


def test_decode_search_names_a_registered_strategy_and_auto_keeps_todays_choice():
    from nmt_cli.registry import SEARCH_STRATEGIES

    assert DecodeConfig().search == "auto"
    assert {"auto", "greedy", "beam", "sampling"} <= set(SEARCH_STRATEGIES.names())
    # greedy: A (0.6) then C (0.55) -> 0.33; beam 2 also keeps B (0.4) -> EOS, 0.4
    model = ScriptedModel({(1,): {A: 0.6, B: 0.4}, (1, A): {C: 0.55, D: 0.45}, (1, B): {EOS_ID: 1.0}})
    for search, beam, expected in [("auto", 1, [A, C]), ("greedy", 2, [A, C]), ("auto", 2, [B]),
                                   ("beam", 2, [B]), ("beam", 1, [A, C])]:
        assert generate(model, [[1]], decode_config(search=search, beam_size=beam))[0].tokens == expected, search
    with pytest.raises(ConfigError, match=r"decode.search.*'nucleus' is not one of: auto, beam, constrained, greedy"):
        decode_config(search="nucleus")
    with pytest.raises(ConfigError, match="decode.search"):
        decode_config(search="beam", sampling="top_k")
    with pytest.raises(ConfigError, match="decode.search"):
        decode_config(search="sampling")


def test_a_new_strategy_is_its_registration_alone():
    from nmt_cli.registry import SEARCH_STRATEGIES

    class LastChoice(GreedySearch):
        """Picks the highest token id that is possible: not what greedy or beam would do."""

        def choose(self, log_probs):
            possible = torch.isfinite(log_probs)
            return (possible * torch.arange(log_probs.size(1))).argmax(dim=1)

    SEARCH_STRATEGIES.register("last_choice")(LastChoice)
    try:
        (result,) = generate(ScriptedModel(PREFIX_SCRIPT), [[1]], decode_config(search="last_choice"))
        assert result.tokens == [B, D]  # B (5) over A (4), then D (7) over C (6)
    finally:
        del SEARCH_STRATEGIES._entries["last_choice"]
