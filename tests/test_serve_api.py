"""`nmt serve`'s HTTP API in-process: answers equal `nmt translate`'s, limits, errors, auth, metrics."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("fastapi", reason="nmt serve needs the serve extra (pip install 'nmt-cli[serve]')")

from fastapi.testclient import TestClient  # noqa: E402  (after the skip above)

from nmt_cli.cli import cli  # noqa: E402
from nmt_cli.cli import serve as _serve_command  # noqa: E402, F401  (registers `nmt serve`)
from nmt_cli.cli import translate as _translate_command  # noqa: E402, F401  (registers `nmt translate`)
from nmt_cli.decoding import Translator  # noqa: E402
from nmt_cli.serve.app import create_app  # noqa: E402
from nmt_cli.serve.batcher import MicroBatcher  # noqa: E402
from nmt_cli.serve.model import ServedModel, load_served_model  # noqa: E402
from nmt_cli.serve.settings import ServeSettings  # noqa: E402

SENTENCES = ["Eine traurige Tante besucht selten seine leeren Küchen .", "Haben Männer keinem Vater gedankt ?",
             "Abends findet eine Katze unsere hungrige Kuh nicht .", "Kellner kennen heute nette Schulen ."]


@pytest.fixture(scope="module")
def served(tiny_trained_run: Path) -> ServedModel:
    return load_served_model(tiny_trained_run, device="cpu")


@contextlib.contextmanager
def serving(served: ServedModel, **settings) -> Iterator[TestClient]:
    """A client of an app on ``served`` (loaded once per module), ready to translate."""
    app = create_app(lambda: served, ServeSettings(**settings))
    with TestClient(app) as client:
        wait_until_ready(client)
        yield client


def wait_until_ready(client: TestClient) -> None:
    """Wait for the app's loading thread itself to finish (started when the client entered), then check."""
    for thread in threading.enumerate():
        if thread.name == "nmt-serve-load":
            thread.join(60)
            assert not thread.is_alive(), "the model is still loading after 60 s"
    assert client.get("/health").status_code == 200, client.get("/health").text


@pytest.fixture(scope="module")
def client(served: ServedModel) -> Iterator[TestClient]:
    with serving(served) as client:
        yield client


def cli_jsonl(checkpoint: Path, lines: list[str], *options: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["translate", "--checkpoint", str(checkpoint), "--format", "jsonl", *options],
                                input="\n".join(lines) + "\n", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_health_is_ready_only_once_the_model_is_loaded(served):
    release = threading.Event()

    def slow_load() -> ServedModel:
        release.wait(60)
        return served

    with TestClient(create_app(slow_load, ServeSettings())) as client:
        assert client.get("/health").status_code == 503 and client.get("/health").json() == {"status": "loading"}
        early = client.post("/v1/translate", json={"text": "Haben Männer gedankt ?"})
        assert early.status_code == 503 and early.headers["retry-after"] == "1"
        assert early.json() == {"error": "the model is still loading"}
        release.set()
        wait_until_ready(client)
        assert client.get("/health").json() == {"status": "ready"}


def test_translations_equal_nmt_translate_with_nbest_and_alignments(client, tiny_trained_run):
    response = client.post("/v1/translate", json={"text": SENTENCES, "beam_size": 3, "n_best": 2,
                                                  "alignments": True})
    assert response.status_code == 200, response.text
    body = response.json()
    expected = cli_jsonl(tiny_trained_run, SENTENCES, "--beam", "3", "--nbest", "2", "--alignments")
    assert [{key: t[key] for key in ("text", "score", "tokens", "nbest")} for t in body["translations"]] == [
        {key: record[key] for key in ("text", "score", "tokens", "nbest")} for record in expected]
    assert [t["alignment"]["links"] for t in body["translations"]] == [record["alignment"] for record in expected]
    assert "|beam:3|" in body["signature"] and f"checkpoint:{tiny_trained_run}" in body["signature"]


def test_a_prefix_starts_the_translation_as_in_nmt_translates_jsonl_input(client, served, tiny_trained_run):
    prefixes = ["Kellner kennen", ""] + [""] * (len(SENTENCES) - 2)
    response = client.post("/v1/translate", json={"text": SENTENCES, "prefix": prefixes, "beam_size": 2})
    assert response.status_code == 200, response.text
    records = [json.dumps({"text": text, "prefix": prefix}) for text, prefix in zip(SENTENCES, prefixes)]
    expected = cli_jsonl(tiny_trained_run, records, "--input-format", "jsonl", "--beam", "2")
    translations = response.json()["translations"]
    assert [{key: t[key] for key in ("text", "score", "tokens")} for t in translations] == [
        {key: record[key] for key in ("text", "score", "tokens")} for record in expected]
    tokenizer = served.engine.tokenizer
    prefix_pieces = tokenizer.tgt_pieces(tokenizer.encode_tgt(prefixes[0]))
    assert translations[0]["tokens"][:len(prefix_pieces)] == prefix_pieces
    assert translations[0]["text"].startswith("Kellner kennen")
    single = client.post("/v1/translate", json={"text": SENTENCES[0], "prefix": prefixes[0], "beam_size": 2}).json()
    assert single["translations"][0]["tokens"] == translations[0]["tokens"]


def test_soft_alignment_matrix_is_words_by_words_and_the_links_are_its_row_maxima(client):
    translation = client.post("/v1/translate", json={"text": SENTENCES[0], "alignments": True}).json()[
        "translations"][0]
    alignment = translation["alignment"]
    assert alignment["source_words"] == SENTENCES[0].split()
    assert " ".join(alignment["target_words"]) == translation["text"]
    matrix = np.array(alignment["matrix"])
    assert matrix.shape == (len(alignment["target_words"]), len(alignment["source_words"]))
    assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-3)
    links = {tuple(map(int, link.split("-"))) for link in alignment["links"].split()}
    assert links == {(int(np.argmax(row)), j) for j, row in enumerate(matrix)}


def test_a_string_gives_one_translation_and_no_alignment_unless_asked(client, tiny_trained_run):
    translation = client.post("/v1/translate", json={"text": SENTENCES[1]}).json()["translations"]
    assert len(translation) == 1 and translation[0]["alignment"] is None
    assert translation[0]["text"] == Translator.from_checkpoint(tiny_trained_run).translate([SENTENCES[1]])[0].text


def test_concurrent_requests_are_batched_and_each_gets_its_own_translation(gated, submitted, tiny_trained_run):
    model, engine = gated
    translator = Translator.from_checkpoint(tiny_trained_run)
    expected_beam2 = [h.text for h in translator.translate(SENTENCES)]
    expected_greedy = [h.text for h in translator.with_decode({"decode.beam_size": 1}).translate(SENTENCES)]
    with serving(model, batch_wait_ms=0) as client:
        def ask(index: int) -> tuple[int, str]:
            beam = 1 if index % 2 else 2
            response = client.post("/v1/translate", json={"text": SENTENCES[index // 2], "beam_size": beam})
            assert response.status_code == 200, response.text
            return index, response.json()["translations"][0]["text"]

        with ThreadPoolExecutor(8) as pool:
            asked = pool.map(ask, range(8))
            submitted(8)  # every request queued (the decoder holds the first): they arrived together
            engine.gate.set()
            answers = dict(asked)
        metrics = client.get("/metrics").text
    for index, text in answers.items():
        expected = expected_greedy if index % 2 else expected_beam2
        assert text == expected[index // 2]
    # 8 requests of two settings: at most 2 sentences per decode call would mean no batching happened
    assert batch_sizes(metrics)["count"] < 8 and batch_sizes(metrics)["max_over_2"] > 0


def batch_sizes(metrics: str) -> dict[str, float]:
    """Decode calls, and decode calls of more than 2 sentences, from the batch-size histogram."""
    values = {}
    for line in metrics.splitlines():
        if line.startswith("nmt_batch_sentences_count"):
            values["count"] = float(line.split()[-1])
        if line.startswith('nmt_batch_sentences_bucket{le="2.0"}'):
            values["le2"] = float(line.split()[-1])
    return {"count": values["count"], "max_over_2": values["count"] - values["le2"]}


BAD_REQUESTS = [
    (b"{", 400, "invalid JSON"),
    (b"", 400, "request body is empty"),
    (b"\xff\xfe{}", 400, "not valid UTF-8"),
    (b'{"text": "a", "alpha": NaN}', 400, "NaN is not a JSON number"),
    (b"[1, 2]", 422, "request body must be a JSON object"),
    (b"{}", 422, "text: Field required"),
    (b'{"text": 3}', 422, "text must be a string or a list of strings"),
    (b'{"text": ["ein Hund", 3]}', 422, "text must be a string or a list of strings"),
    (b'{"text": "Hund", "beam_size": "3"}', 422, "beam_size: Input should be a valid integer"),
    (b'{"text": "Hund", "alignments": "yes"}', 422, "alignments: Input should be a valid boolean"),
    (b'{"text": "Hund", "nbest": 2}', 422, "nbest: unknown field"),
    (b'{"text": ""}', 422, "text is empty"),
    (b'{"text": []}', 422, "text is empty"),
    (b'{"text": ["Hund", "  "]}', 422, "text[1] is empty"),
    (b'{"text": "ein Hund\\nzwei Katzen"}', 422, "text contains a line break"),
    (b'{"text": ["Hund", "ein \\ud800 Hund"]}', 422, "text[1] holds a lone surrogate"),
    (b'{"text": "Hund", "beam_size": 0}', 422, "beam_size must be between 1 and 16"),
    (b'{"text": "Hund", "beam_size": 1000000}', 422, "beam_size must be between 1 and 16"),
    (b'{"text": "Hund", "beam_size": 2, "n_best": 3}', 422, "n_best must be between 1 and beam_size (2)"),
    (b'{"text": "Hund", "alpha": -1}', 422, "alpha must be a finite number >= 0"),
    (json.dumps({"text": ["Hund"] * 65}).encode(), 413, "text has 65 sentences; at most 64"),
    (json.dumps({"text": "Hund " * 201}).encode(), 413, "text has 1005 characters; at most 1000"),
    (json.dumps({"text": " ".join(["Kellner"] * 110)}).encode(), 422, "the model takes at most"),
    (json.dumps({"text": "x" * 2_000_000}).encode(), 413, "request body is larger than 1,048,576 bytes"),
    (b'{"text": "Hund", "prefix": 3}', 422, "prefix must be a string or a list of strings"),
    (b'{"text": "Hund", "prefix": ["a"]}', 422, "prefix must be a string when text is one"),
    (b'{"text": ["Hund", "Katze"], "prefix": ["a"]}', 422, "prefix has 1 entries for 2 sentences"),
    (b'{"text": ["Hund", "Katze"], "prefix": ["a", "b\\nc"]}', 422, "prefix[1] contains a line break"),
]


@pytest.mark.parametrize("body, status, problem", BAD_REQUESTS, ids=[problem for _, _, problem in BAD_REQUESTS])
def test_bad_requests_get_a_4xx_json_error_naming_the_problem(client, body, status, problem):
    response = client.post("/v1/translate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert problem in response.json()["error"]


def test_odd_json_of_every_shape_is_a_4xx_never_a_500(client):
    bodies = [b"[" * 200_000 + b"]" * 200_000, b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
              b'"just a string"', b"null", b"12", b'{"text": {"de": "Hund"}}', b'{"text": "Hund", "beam_size": 1e400}',
              b'{"text": "Hund", "beam_size": 99999999999999999999999999}', b'{"text": "Hund", "alpha": "0.5"}',
              b'{"text": null}', b'{"text": "Hund", "alignments": 1}', b'{"text": "Hund", "text": 5}']
    for body in bodies:
        response = client.post("/v1/translate", content=body)
        assert 400 <= response.status_code < 500 and response.json()["error"], (body[:40], response.text)
        libre = client.post("/translate", content=body)
        assert 400 <= libre.status_code < 500 and libre.json()["error"], (body[:40], libre.text)


def test_a_streamed_body_over_the_limit_is_refused_without_reading_it_all(served):
    with serving(served, max_body_bytes=1000) as client:
        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must count what arrives
            yield b'{"text": "'
            for _ in range(100):
                yield b"x" * 100

        response = client.post("/v1/translate", content=chunks())
        assert response.status_code == 413 and "larger than 1,000 bytes" in response.json()["error"]
        assert client.post("/v1/translate", json={"text": "Hund"}).status_code == 200


def test_unknown_paths_and_methods_are_json_errors_and_the_server_still_answers(client):
    assert client.get("/nothing/here").json() == {"error": "Not Found"}
    wrong_method = client.get("/v1/translate")
    assert wrong_method.status_code == 405 and wrong_method.json() == {"error": "Method Not Allowed"}
    assert client.post("/v1/translate", json={"text": "Hund"}).status_code == 200


class GatedEngine:
    """The real engine, except that decoding waits until the test opens ``gate``; records what it decodes."""

    def __init__(self, engine, gate: threading.Event, entered: threading.Event, decoded: list[str],
                 finished: threading.Event | None = None):
        self.engine, self.gate, self.entered, self.decoded = engine, gate, entered, decoded
        self.finished = finished or threading.Event()  # set when a decode call has returned
        self.decode, self.tokenizer, self.device = engine.decode, engine.tokenizer, engine.device

    def translate(self, texts, with_attention=False, token_scores=False):
        self.entered.set()
        self.gate.wait(60)  # a bound against a hung test, not a timing: every test opens the gate
        self.decoded.extend(texts)
        try:
            return self.engine.translate(texts, with_attention)
        finally:
            self.finished.set()

    def with_decode(self, overrides):
        return GatedEngine(self.engine.with_decode(overrides), self.gate, self.entered, self.decoded, self.finished)

    def signature(self):
        return self.engine.signature()


@pytest.fixture
def gated(served: ServedModel) -> tuple[ServedModel, GatedEngine]:
    engine = GatedEngine(served.engine, threading.Event(), threading.Event(), [])
    return ServedModel(engine, served.src_lang, served.tgt_lang, served.max_source_tokens), engine


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """``submitted(n)`` waits until the service's batcher has queued ``n`` jobs: the state itself, not a sleep."""
    count, changed = [0], threading.Condition()
    submit = MicroBatcher.submit

    def counted(batcher: MicroBatcher, job):
        future = submit(batcher, job)
        with changed:
            count[0] += 1
            changed.notify_all()
        return future

    monkeypatch.setattr(MicroBatcher, "submit", counted)

    def wait_for(jobs: int) -> None:
        with changed:
            assert changed.wait_for(lambda: count[0] >= jobs, 60), f"{count[0]} of {jobs} jobs were queued"

    return wait_for


def test_a_full_queue_answers_503_with_retry_after_and_recovers(gated, submitted):
    model, engine = gated
    with serving(model, queue_size=2, max_sentences=2, batch_wait_ms=0) as client, ThreadPoolExecutor(2) as pool:
        running = pool.submit(client.post, "/v1/translate", json={"text": "Hund"})
        assert engine.entered.wait(60)  # the decoder holds it, the queue is empty
        assert client.get("/health").status_code == 200  # decoding runs off the event loop
        waiting = pool.submit(client.post, "/v1/translate", json={"text": ["Hund", "Katze"]})
        submitted(2)
        assert queued(client) == 2  # now the queue is full
        refused = client.post("/v1/translate", json={"text": "Kuh"})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "server busy: 2 sentences are queued (limit 2)" in refused.json()["error"]
        engine.gate.set()
        assert running.result().status_code == 200 and waiting.result().status_code == 200
        assert client.post("/v1/translate", json={"text": "Kuh"}).status_code == 200


def queued(client: TestClient) -> float:
    line = next(line for line in client.get("/metrics").text.splitlines() if line.startswith("nmt_queue_sentences "))
    return float(line.split()[-1])


def test_a_request_that_waits_too_long_gets_503_and_its_sentences_are_dropped(gated):
    model, engine = gated
    with serving(model, request_timeout_s=2, batch_wait_ms=0) as client, ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.post, "/v1/translate", json={"text": "Hund"})
        assert engine.entered.wait(60)
        late = client.post("/v1/translate", json={"text": "Katze"})  # queued behind the blocked decode call
        assert late.status_code == 503 and "did not finish within 2 s" in late.json()["error"]
        assert late.headers["retry-after"] == "1"
        assert first.result().status_code == 503
        engine.gate.set()
        assert engine.finished.wait(60)  # the decode call nobody waits for any more ends; then one sentence of
        # the tiny model must take less than the 2 s timeout, which even a busy machine gives it many times over
        assert client.post("/v1/translate", json={"text": "Kuh"}).status_code == 200
        assert [request.text for request in engine.decoded] == ["Hund", "Kuh"] and queued(client) == 0


def test_api_key_is_required_when_set(served):
    with serving(served, api_key="s3cret") as client:
        assert client.get("/health").status_code == 200  # health stays open for probes
        missing = client.post("/v1/translate", json={"text": "Hund"})
        assert missing.status_code == 401 and "missing API key" in missing.json()["error"]
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = client.post("/v1/translate", json={"text": "Hund"}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json() == {"error": "wrong API key"}
        right = client.post("/v1/translate", json={"text": "Hund"}, headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
        assert client.get("/metrics").status_code == 401
        libre = client.post("/translate", json={"q": "Hund", "source": "de", "target": "en", "api_key": "s3cret"})
        assert libre.status_code == 200
        odd = client.post("/translate", content=b'{"q": "Hund", "source": "de", "target": "en", "api_key": "\\ud800"}')
        assert odd.status_code == 401 and odd.json() == {"error": "wrong API key"}
        assert client.get("/v1/info").json()["auth_required"] is True


def test_cors_is_off_unless_an_origin_is_given(client, served):
    origin = {"Origin": "https://example.org"}
    assert "access-control-allow-origin" not in client.post("/v1/translate", json={"text": "Hund"},
                                                            headers=origin).headers
    with serving(served, cors_origins=("https://example.org",)) as open_client:
        allowed = open_client.post("/v1/translate", json={"text": "Hund"}, headers=origin)
        assert allowed.headers["access-control-allow-origin"] == "https://example.org"
        other = open_client.post("/v1/translate", json={"text": "Hund"}, headers={"Origin": "https://evil.test"})
        assert "access-control-allow-origin" not in other.headers


def test_libretranslate_api_keeps_lines_and_checks_the_languages(client, tiny_trained_run):
    expected = [h.text for h in Translator.from_checkpoint(tiny_trained_run).translate(SENTENCES[:2])]
    one = client.post("/translate", json={"q": f"{SENTENCES[0]}\n\n{SENTENCES[1]}", "source": "de", "target": "en"})
    assert one.json() == {"translatedText": f"{expected[0]}\n\n{expected[1]}"}
    listed = client.post("/translate", json={"q": SENTENCES[:2], "source": "auto", "target": "en", "format": "text"})
    assert listed.json() == {"translatedText": expected}
    form = client.post("/translate", data={"q": SENTENCES[0], "source": "de", "target": "en"})
    assert form.json() == {"translatedText": expected[0]}
    assert client.get("/languages").json() == [{"code": "de", "name": "German", "targets": ["en"]}]
    for body, problem in [({"q": "Hund", "source": "fr", "target": "en"}, "source language 'fr' is not supported"),
                          ({"q": "Hund", "source": "de", "target": "es"}, "target language 'es' is not supported"),
                          ({"q": "Hund", "source": "de", "target": "en", "format": "html"}, "format 'html'"),
                          ({"q": "\n \n", "source": "de", "target": "en"}, "q is empty"),
                          ({"source": "de", "target": "en"}, "q: Field required")]:
        response = client.post("/translate", json=body)
        assert 400 <= response.status_code < 500 and problem in response.json()["error"], response.text


def test_every_request_is_one_log_line_and_counted_in_the_metrics(served, caplog):
    with serving(served) as client:
        with caplog.at_level(logging.INFO, logger="nmt_cli.serve"):
            client.post("/v1/translate", json={"text": SENTENCES[:3]})
            client.post("/v1/translate", json={"text": ""})
        metrics = client.get("/metrics").text
    lines = [record.getMessage() for record in caplog.records if record.name == "nmt_cli.serve"]
    assert any(line.startswith("POST /v1/translate 200 3 sentences ") and line.endswith(" ms") for line in lines)
    assert any(line.startswith("POST /v1/translate 422 0 sentences ") for line in lines)
    for expected in ('nmt_requests_total{path="/v1/translate",status="200"} 1.0',
                     'nmt_requests_total{path="/v1/translate",status="422"} 1.0',
                     "nmt_sentences_total 3.0", 'nmt_request_seconds_count{path="/v1/translate"} 2.0',
                     "nmt_batch_sentences_count 1.0", "nmt_queue_sentences 0.0"):
        assert expected in metrics, expected


def test_openapi_docs_page_and_info(client):
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"text", "beam_size", "n_best", "alignments"} <= set(body["properties"])
    assert "/translate" in schema["paths"] and "/health" in schema["paths"] and "/metrics" in schema["paths"]
    assert client.get("/docs").status_code == 200
    page = client.get("/")
    assert page.status_code == 200 and 'src="/static/app.js"' in page.text
    assert client.get("/static/app.js").status_code == 200 and client.get("/static/style.css").status_code == 200
    info = client.get("/v1/info").json()
    assert info["source_language"] == "de" and info["target_language"] == "en" and info["beam_size"] == 2
    assert info["max_source_tokens"] == int((128 - 1 - 10) / 1.2)  # learned positions: the output must fit too


def test_serve_without_its_extra_says_how_to_install(monkeypatch, tiny_trained_run):
    import sys

    for name in [name for name in sys.modules if name.startswith("nmt_cli.serve")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(cli, ["serve", "--checkpoint", str(tiny_trained_run)])
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: nmt serve needs the serve extra: pip install 'nmt-cli[serve]' " \
                                    "(uvicorn is missing)"


def test_bad_serve_options_are_one_line_errors(tiny_trained_run):
    result = CliRunner().invoke(cli, ["serve", "--checkpoint", str(tiny_trained_run), "--queue-size", "8"])
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: serve: queue_size (8) must hold at least max_sentences (64), "
                                     "or a full request could never be queued")


def test_an_exported_model_serves_through_the_ctranslate2_engine(tiny_trained_run, tmp_path):
    pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed (pip install 'nmt-cli[ctranslate2]')")
    from nmt_cli.decoding import load_translator
    from nmt_cli.export import export_ctranslate2

    exported = export_ctranslate2(tiny_trained_run, tmp_path / "ct2")
    served = load_served_model(exported, device="cpu")
    assert served.engine.engine == "ctranslate2" and (served.src_lang, served.tgt_lang) == ("de", "en")
    with serving(served) as client:
        body = client.post("/v1/translate", json={"text": SENTENCES, "alignments": True}).json()
    expected = load_translator(exported).translate(SENTENCES)
    assert [t["text"] for t in body["translations"]] == [h.text for h in expected]
    assert all(t["alignment"]["links"] for t in body["translations"])
    assert "engine:ctranslate2" in body["signature"]
