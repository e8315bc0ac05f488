"""`/v1/translate` with a glossary, constraints and phrases to avoid: the CLI's records, bounded requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("fastapi", reason="nmt serve needs the serve extra (pip install 'nmt-cli[serve]')")

from fastapi.testclient import TestClient  # noqa: E402  (after the skip above)

from nmt_cli.serve.model import ServedModel, load_served_model  # noqa: E402
from tests.test_serve_api import SENTENCES, cli_jsonl, serving  # noqa: E402

GLOSSARY = [["Katze", "cat"], ["Kuh", "cow"], ["Kuh", "cattle"], ["Kellner", "waiters"], ["Flugzeug", "plane"]]
RECORD_FIELDS = ("text", "score", "tokens", "nbest", "confidence", "degenerate", "terms", "constraints_met")


@pytest.fixture(scope="module")
def served(tiny_trained_run: Path) -> ServedModel:
    return load_served_model(tiny_trained_run, device="cpu")


@pytest.fixture(scope="module")
def client(served: ServedModel) -> Iterator[TestClient]:
    with serving(served, max_terms=8, max_constraints=4, max_term_chars=20) as client:
        yield client


def answer(client: TestClient, **body) -> list[dict]:
    response = client.post("/v1/translate", json={"beam_size": 2, **body})
    assert response.status_code == 200, response.text
    return response.json()["translations"]


def cli_fields(record: dict) -> dict:
    """A CLI record as the service answers it: every field of the reply, null where the CLI leaves it out."""
    fields = {key: record.get(key) for key in RECORD_FIELDS}
    fields["confidence"] = {"min_token_prob": None, **record["confidence"]}
    return fields


def test_a_glossary_gives_the_records_nmt_translate_gives(client, tiny_trained_run, tmp_path):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("".join(f"{source}\t{target}\n" for source, target in GLOSSARY), encoding="utf-8")
    expected = cli_jsonl(tiny_trained_run, SENTENCES, "--beam", "2", "--glossary", str(glossary))
    translations = answer(client, text=SENTENCES, glossary=GLOSSARY)
    assert [{key: t[key] for key in RECORD_FIELDS} for t in translations] == [cli_fields(r) for r in expected]
    assert [[term["source"] for term in t["terms"] or []] for t in translations] == [[], [], ["Katze", "Kuh"],
                                                                                       ["Kellner"]]
    assert translations[2]["terms"][1]["target"] == ["cow", "cattle"]
    assert all(term["met"] for t in translations for term in t["terms"] or [])  # the constrained search
    assert all(t["confidence"]["log_prob_per_token"] < 0 for t in translations)
    ignoring = answer(client, text=SENTENCES[0].lower(), glossary=[["TANTE", "aunt"]], glossary_ignore_case=True)
    assert [term["source"] for term in ignoring[0]["terms"]] == ["TANTE"]


def test_constraints_and_avoid_per_sentence_give_the_records_of_jsonl_input(client, served, tiny_trained_run):
    constraints = [["cat", ["cow", "cattle"]], [], [], ["waiters"]]
    first_word = answer(client, text=SENTENCES[1])[0]["text"].split()[0]
    avoid = [[], [first_word], [], []]
    records = [json.dumps({"text": text, "constraints": wanted, "avoid": unwanted})
               for text, wanted, unwanted in zip(SENTENCES, constraints, avoid)]
    expected = cli_jsonl(tiny_trained_run, records, "--input-format", "jsonl", "--beam", "2")
    translations = answer(client, text=SENTENCES, constraints=constraints, avoid=avoid)
    assert [{key: t[key] for key in RECORD_FIELDS} for t in translations] == [cli_fields(r) for r in expected]
    assert [t["constraints_met"] for t in translations] == [[True, True], None, None, [True]]
    tokenizer = served.engine.tokenizer
    avoided = tuple(tokenizer.tgt_pieces(tokenizer.encode_tgt(first_word)))
    pieces = translations[1]["tokens"]
    assert avoided not in {tuple(pieces[start:start + len(avoided)]) for start in range(len(pieces))}
    single = answer(client, text=SENTENCES[0], constraints=constraints[0])
    assert single[0]["tokens"] == translations[0]["tokens"]


BAD_REQUESTS = [
    ({"glossary": [["Katze", "cat"]] * 9}, 413, "glossary has 9 entries; at most 8 per request"),
    ({"glossary": [["Katze", "c" * 21]]}, 413, "glossary[0] target term has 21 characters; at most 20 per term"),
    ({"glossary": [["Katze", " "]]}, 422, "glossary[0] has an empty target term"),
    ({"glossary": [["Katze", "cat", "dog"]]}, 422, "glossary[0] must be a [source, target] pair of strings"),
    ({"glossary": [["Katze", 3]]}, 422, "glossary[0] must be a [source, target] pair of strings"),
    ({"glossary": {"Katze": "cat"}}, 422, "glossary must be a list of [source, target] pairs of strings"),
    ({"glossary": [["Katze", "c\nat"]]}, 422, "glossary[0] target term contains a line break"),
    ({"constraints": "cat"}, 422, "constraints must be an array of phrases"),
    ({"constraints": ["cat", ""]}, 422, "constraints[1] is an empty string"),
    ({"constraints": [["cat", 3]]}, 422, "constraints[0][1] must be a string, got a number"),
    ({"constraints": [["cat", "x" * 21]]}, 413, "constraints[0][1] has 21 characters; at most 20"),
    ({"avoid": [["the"]]}, 422, "avoid[0] must be a string, got an array"),
    ({"constraints": ["a", ["b", "c"]], "avoid": ["d", "e"]}, 413,
     "text asks for 5 constraint and avoid phrases (alternatives and glossary matches counted); at most 4"),
    ({"constraints": ["a", "b", "c"], "glossary": [["Tante", "aunt"], ["Küchen", "kitchens"]]}, 413,
     "text asks for 5 constraint and avoid phrases"),
    ({"text": ["Hund", "Katze"], "constraints": ["cat", "dog"]}, 422,
     "constraints[0] must be an array of phrases"),
    ({"text": ["Hund", "Katze"], "avoid": [["cat"]]}, 422,
     "avoid has 1 entries for 2 sentences; send one per sentence ([] for none)"),
    ({"text": ["Hund", "Katze"], "avoid": [[], [""]]}, 422, "avoid[1][0] is an empty string"),
    ({"text": ["Hund", "Katze"], "prefix": ["a"]}, 422,
     'prefix has 1 entries for 2 sentences; send one per sentence ("" for none)'),
]


@pytest.mark.parametrize("body, status, problem", BAD_REQUESTS, ids=[problem for _, _, problem in BAD_REQUESTS])
def test_bad_or_oversized_terms_get_a_4xx_naming_the_problem(client, body, status, problem):
    response = client.post("/v1/translate", json={"text": SENTENCES[0], **body})
    assert response.status_code == status, response.text
    assert problem in response.json()["error"]
