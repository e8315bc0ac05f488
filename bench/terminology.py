"""Terminology constraints: term success, chrF and BLEU with and without terms, and what the constraints cost.

One model translates the WMT 2023 terminology shared task's German-English dev set (450
sentences, ``../shared/data/terminology-deen``, README section 6) three ways: with no terms,
with each line's "proper" terms and with its "random" terms, every term's English side a
lexical constraint of its sentence's ``Request`` (one alternative; the search must put it
in the output). Each way runs at every beam of ``--beams`` (default 5 and 10) with the
model's own length penalty and length rule, on the torch engine, on the same sources in the
same batches (batches are cut by source tokens), so each row decodes the same inputs and only
the constraints differ.

Each row reports, against both term lists (so the row without terms shows how often the
model finds the terms unprompted):

* term success: the share of the list's terms whose English side is a substring of the
  output, exactly as written (case-sensitive), and beside it case-insensitively (both sides
  ``str.casefold``-ed);
* chrF and BLEU of the outputs against the references (sacreBLEU, default settings), and
  the share of outputs at the length limit (``floor(a * |source pieces| + b)`` output pieces
  or more);
* sentences/s and output pieces/s over the whole set, the median of ``--repeats`` runs after
  an untimed warm-up of each setting, and the time of the row over the time of the row
  without terms at the same beam.

``--quick`` (for the tests): a few short lines whose terms the model's vocabulary can spell,
on the ``--model`` given or on translate_speed's quick tiny Transformer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from common import (RATIO_SPREAD_NOTE, REPO, SHARED_DATA, THREADS, Report, absolute_path, bench_arguments, fmt,
                    fmt_ratio_spread, measured_at, median, project_version, repeats_of)
from translate_speed import Quality, text_quality

from nmt_cli.decoding import Hypothesis, load_translator
from nmt_cli.decoding.generator import output_limit
from nmt_cli.decoding.request import Request
from nmt_cli.errors import NmtError
from nmt_cli.textio import read_parallel

TERMINOLOGY = SHARED_DATA / "terminology-deen"
#: recipes/run_recipe.py's output for general-deen-transformer: its last 5 checkpoints averaged
GENERAL_MODEL = REPO / "results" / "general-deen-transformer" / "averaged"
MODES = ("none", "proper", "random")  # which term list each row passes as constraints
LISTS = ("proper", "random")  # which term lists each row is scored against
BEAMS = (5, 10)
WARMUP_SENTENCES = 16
QUICK_LINES = 12
QUICK_MAX_SOURCE = 40  # source pieces of a line --quick takes


@dataclass(frozen=True)
class Line:
    """One dev sentence: German source, English reference and both lists' English terms."""

    source: str
    reference: str
    terms: dict[str, list[str]]  # list name -> the English side of each of its terms


@dataclass
class Run:
    """One timed translation of the whole set at one beam with one list's terms (or none)."""

    seconds: float
    hypotheses: list[Hypothesis]


def read_dev_set(data: Path) -> list[Line]:
    """The dev set: ``dev.de``, ``dev.en`` and ``dev.terms.{proper,random}.jsonl`` (a JSON list of
    ``{"de", "en"}`` items per line), read in step."""
    sources, references = read_parallel(data / "dev.de", data / "dev.en")
    lists = {}
    for name in LISTS:
        path = data / f"dev.terms.{name}.jsonl"
        lists[name] = [[term["en"] for term in json.loads(line)]
                       for line in path.read_text(encoding="utf-8").splitlines()]
        if len(lists[name]) != len(sources):
            raise NmtError(f"{path}: {len(lists[name])} lines but {data / 'dev.de'} has {len(sources)}")
    return [Line(source, reference, {name: lists[name][i] for name in LISTS})
            for i, (source, reference) in enumerate(zip(sources, references))]


def spellable(tokenizer, term: str) -> bool:
    """Whether the target vocabulary can write ``term``: its SentencePiece round trip gives it back
    (a term it cannot spell, such as one with a character it maps to the unknown piece, never matches)."""
    return tokenizer.decode_tgt(tokenizer.encode_tgt(term)) == term


def quick_lines(lines: list[Line], tokenizer) -> list[Line]:
    """The first :data:`QUICK_LINES` lines of at most :data:`QUICK_MAX_SOURCE` source pieces whose
    terms (both lists) the vocabulary can spell."""
    fit = [line for line in lines if len(tokenizer.encode_src(line.source)) <= QUICK_MAX_SOURCE
           and all(spellable(tokenizer, term) for terms in line.terms.values() for term in terms)]
    return fit[:QUICK_LINES]


def requests(lines: list[Line], tokenizer, mode: str) -> list[Request]:
    """A request per line; with ``mode`` a term list, each of its terms is a constraint."""
    return [Request.from_text(tokenizer, line.source, constraints=line.terms[mode] if mode != "none" else ())
            for line in lines]


def term_success(outputs: Sequence[str], terms: Sequence[Sequence[str]], any_case: bool = False) -> float:
    """``sum over lines of #{term in line's terms: term is a substring of the output}`` over the
    number of terms; ``any_case``: both sides ``str.casefold``-ed first."""
    fold = str.casefold if any_case else (lambda text: text)
    found = sum(fold(term) in fold(output) for output, line in zip(outputs, terms) for term in line)
    return found / sum(len(line) for line in terms)


def output_quality(hypotheses: Sequence[Hypothesis], batch: Sequence[Request], references: list[str],
                   decode) -> Quality:
    """BLEU and chrF of the outputs, and the share with at least as many pieces as the length
    rule's limit for their sentence (``generator.output_limit``: ``floor(a * |source| + b)``,
    before constraints)."""
    return text_quality([h.text for h in hypotheses], [len(h.tokens) for h in hypotheses], references,
                        [output_limit(request, decode, None) for request in batch])


def measure(translator, batches: dict[str, list[Request]], beams: Sequence[int],
            repeats: int) -> dict[tuple[int, str], list[Run]]:
    """``(beam, mode) -> runs``: every setting warmed up on the first requests, then timed over the
    whole set ``repeats`` times, the settings in turn in each repeat (a slow spell hits them all)."""
    settings = {(beam, mode): translator.with_decode({"decode.beam_size": beam, "decode.on_unmet": "relax"})
                for beam in beams for mode in MODES}
    for (_, mode), decoder in settings.items():
        decoder.translate(batches[mode][:WARMUP_SENTENCES])
    runs: dict[tuple[int, str], list[Run]] = {key: [] for key in settings}
    for _ in range(repeats):
        for (beam, mode), decoder in settings.items():
            started = time.process_time()  # CPU time: on a shared machine wall-clock time measures the load
            hypotheses = decoder.translate(batches[mode])
            runs[beam, mode].append(Run(time.process_time() - started, hypotheses))
    return runs


COLUMNS = ["terms given", "beam", "proper: success", "proper: any case", "random: success", "random: any case",
           "chrF", "BLEU", "at limit", "sent/s", "out tok/s", "time vs no terms"]


def add_rows(report: Report, runs: dict[tuple[int, str], list[Run]], lines: list[Line], batches, decode) -> None:
    references = [line.reference for line in lines]
    for (beam, mode), measured in runs.items():
        outputs = [h.text for h in measured[-1].hypotheses]
        success = [f"{100 * term_success(outputs, [line.terms[name] for line in lines], any_case):.1f}%"
                   for name in LISTS for any_case in (False, True)]
        seconds = [run.seconds for run in measured]
        tokens = sum(len(h.tokens) for h in measured[-1].hypotheses)
        scored = output_quality(measured[-1].hypotheses, batches[mode], references, decode)
        report.add_row(mode, str(beam), *success, f"{scored.chrf:.1f}", f"{scored.bleu:.1f}",
                       f"{100 * scored.at_limit:.1f}%",
                       fmt(len(lines) / median(seconds), 1), fmt(tokens / median(seconds)),
                       "-" if mode == "none" else fmt_ratio_spread(seconds, [r.seconds for r in runs[beam, "none"]]))


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", type=absolute_path, default=None,
                        help=f"checkpoint or run directory (default: {GENERAL_MODEL.relative_to(REPO)}, made by "
                             "python recipes/run_recipe.py general-deen-transformer; --quick: translate_speed's "
                             "quick tiny Transformer)")
    parser.add_argument("--data", type=absolute_path, default=TERMINOLOGY,
                        help="the terminology dev set (dev.de, dev.en, dev.terms.{proper,random}.jsonl)")
    parser.add_argument("--beams", default=",".join(map(str, BEAMS)), help="comma list of beam sizes")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = repeats_of(args)
    beams = [int(beam) for beam in args.beams.split(",")]
    model = args.model
    if model is None and args.quick:
        from translate_speed import tiny_transformer

        model = tiny_transformer(args.work, quick=True)[0]
    model = model or GENERAL_MODEL
    if not model.exists():
        parser.error(f"--model {model}: not found (python recipes/run_recipe.py general-deen-transformer makes "
                     "the default one)")
    translator = load_translator(model, engine="torch", device=args.device)
    lines = read_dev_set(args.data)
    all_lines = len(lines)
    if args.quick:
        lines = quick_lines(lines, translator.tokenizer)
    batches = {mode: requests(lines, translator.tokenizer, mode) for mode in MODES}
    runs = measure(translator, batches, beams, repeats)

    report = Report("terminology", "Terminology constraints (WMT 2023 terminology dev set, German-English)",
                    COLUMNS, quick=args.quick, versions={"nmt-cli": project_version(), "torch": torch.__version__})
    add_rows(report, runs, lines, batches, translator.decode)
    made = measured_at()
    counts = {name: sum(len(line.terms[name]) for line in lines) for name in LISTS}
    unspellable = {name: sum(not spellable(translator.tokenizer, term) for line in lines for term in line.terms[name])
                   for name in LISTS}
    report.notes += [
        f"Measured at commit {made['commit']} on {made['machine']}, {args.threads} torch thread(s), device "
        f"{translator.device}, {made['utc']}.",
        f"Model: {translator.signature()} (the beam is each row's; decode.on_unmet relax: a sentence whose "
        "constraints are longer than its output limit gets the limit raised to fit them).",
        f"{len(lines)} sentences" + (f" (--quick: the first {len(lines)} of {all_lines} with at most "
                                     f"{QUICK_MAX_SOURCE} source pieces whose terms the vocabulary can spell)"
                                     if args.quick else "") +
        f"; {counts['proper']} proper and {counts['random']} random terms, each term's English side a constraint "
        "of its sentence in the rows that give that list.",
        "Term success: the share of the list's terms whose English side appears in the output as an exact, "
        "case-sensitive substring; 'any case': both casefolded. Terms the model's vocabulary cannot spell "
        f"(its SentencePiece round trip changes them; no output can match them): {unspellable['proper']} proper, "
        f"{unspellable['random']} random.",
        "chrF, BLEU: sacreBLEU corpus scores against dev.en (default settings); at limit: outputs of at least "
        f"floor({translator.decode.max_len_a:g} * source pieces + {translator.decode.max_len_b}) pieces.",
        f"sent/s, out tok/s (output pieces, EOS not counted): per second of the process's CPU time (user + "
        f"system; with {args.threads} torch thread(s), so that a busy machine slows the clock, not the figure), "
        f"the whole set translated in one call, median of {repeats} run(s) after an untimed warm-up of each setting on the first {WARMUP_SENTENCES} sentences, "
        "model load excluded; time vs no terms: the row's time over the time without terms at the same beam, "
        + RATIO_SPREAD_NOTE + ".",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
