"""``nmt evaluate``: sacreBLEU scores of a hypothesis file, or of a checkpoint on a prepared split.

Prints each score as sacreBLEU does (``name|signature = score``); ``--json`` prints one
JSON object instead. ``--baseline`` adds a paired bootstrap test against another
system's output, with its p-value. ``--confidence`` instead reads ``nmt translate
--format jsonl`` records and says how well their confidence predicts sentence chrF
(:mod:`nmt_cli.evaluation.confidence`).
"""

from __future__ import annotations

import json

import click
from sacrebleu.metrics import BLEU

from nmt_cli.cli import cli
from nmt_cli.cli.options import checkpoints_option, decode_options
from nmt_cli.evaluation import BootstrapResult, MetricOptions, corpus_scores, paired_bootstrap, parse_metrics
from nmt_cli.evaluation.confidence import (CONFIDENCE_FIELDS, DEFAULT_FIELD, DEFAULT_FLAG_SHARE, confidence_report,
                                           read_confidence_records, report_lines)
from nmt_cli.fileio import atomic_write_text
from nmt_cli.textio import check_same_length, one_line, read_lines, read_parallel

FILE = click.Path(dir_okay=False)


def bootstrap_lines(results: list[BootstrapResult], baseline_path: str, samples: int) -> list[str]:
    lines = [f"paired bootstrap resampling ({samples} samples) against {baseline_path}:"]
    for result in results:
        lines.append(
            f"  {result.name}: baseline {result.baseline:.2f} "
            f"({result.baseline_mean:.2f} +- {result.baseline_ci:.2f}), "
            f"system {result.system:.2f} ({result.system_mean:.2f} +- {result.system_ci:.2f}), "
            f"p = {result.p_value:.4f}"
        )
    return lines


@cli.command("evaluate")
@click.option("--hyp", "hyp_path", type=FILE, help="Hypotheses, one per line.")
@click.option("--ref", "ref_paths", type=FILE, multiple=True, help="References, line-aligned (repeat for several).")
@checkpoints_option(required=False)
@click.option("--data", "prepared_dir", type=click.Path(file_okay=False), help="Prepared directory (nmt prepare).")
@click.option("--split", type=click.Choice(["train", "valid", "test"]), default="test", show_default=True)
@click.option("--output", "output_path", type=FILE, help="With --checkpoint: also save the translations here.")
@click.option("--metrics", "metric_spec", default="bleu,chrf,ter", show_default=True,
              help="Comma-separated: bleu, chrf, ter.")
@click.option("--chrf-plus", is_flag=True, help="chrF++ (word bigrams too, word_order=2) instead of chrF.")
@click.option("--lowercase", is_flag=True, help="Case-insensitive scores (to compare with papers that lowercase).")
@click.option("--tokenize", type=click.Choice(sorted(BLEU.TOKENIZERS)), default=None,
              help="sacreBLEU tokenizer for BLEU [default: sacreBLEU's, 13a].")
@click.option("--baseline", "baseline_path", type=FILE, help="Another system's output: paired bootstrap test.")
@click.option("--bootstrap-samples", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--confidence", "confidence_path", type=FILE,
              help="Records of nmt translate --format jsonl: how well their confidence predicts sentence chrF "
              "against --ref (Spearman's rho, and a flag for the worst sentences with its precision and recall).")
@click.option("--confidence-field", type=click.Choice(CONFIDENCE_FIELDS), default=DEFAULT_FIELD, show_default=True,
              help="With --confidence: the confidence that sets the flag.")
@click.option("--flag-share", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=DEFAULT_FLAG_SHARE,
              show_default=True, help="With --confidence: the share of sentences the flag is for (the worst by chrF).")
@click.option("--threshold", type=float, default=None,
              help="With --confidence: flag confidence <= this (chosen on a dev set) instead of choosing it here.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@decode_options
def evaluate(hyp_path, ref_paths, checkpoints, prepared_dir, split, output_path, metric_spec, chrf_plus, lowercase,
             tokenize, baseline_path, bootstrap_samples, confidence_path, confidence_field, flag_share, threshold,
             as_json, translator_options) -> None:
    """Score translations with sacreBLEU (BLEU, chrF, TER).

    With --confidence: how well each translation's confidence (nmt translate --format jsonl)
    predicts its sentence chrF, and a threshold that flags the worst ones (docs/confidence.md).

    \b
    nmt evaluate --hyp out.en --ref test.en
    nmt evaluate --checkpoint run/ --data prepared/ --split test
    nmt evaluate --confidence dev.jsonl --ref dev.en         # choose a threshold on dev
    nmt evaluate --confidence test.jsonl --ref test.en --threshold -1.25
    """
    metrics = parse_metrics(metric_spec)
    options = MetricOptions(chrf_plus=chrf_plus, lowercase=lowercase, tokenize=tokenize)
    if confidence_path:
        evaluate_confidence(confidence_path, ref_paths, confidence_field, flag_share, threshold, options, as_json)
        return
    confidence_only = [name for name in ("confidence_field", "flag_share", "threshold") if given(name)]
    if confidence_only:
        raise click.UsageError(f"--{confidence_only[0].replace('_', '-')} goes with --confidence")
    report: dict = {}
    if checkpoints or prepared_dir:
        if not (checkpoints and prepared_dir) or hyp_path or ref_paths:
            raise click.UsageError("use either --hyp with --ref, or --checkpoint with --data")
        from nmt_cli.decoding import load_translator  # imports torch; only this mode needs it
        from nmt_cli.evaluation.checkpoint_eval import evaluate_split

        translator = load_translator(checkpoints, **translator_options)
        evaluation = evaluate_split(translator, prepared_dir, split, metrics, options)
        hypotheses, references, scores = evaluation.hypotheses, [evaluation.references], evaluation.scores
        hypotheses_name = f"{'+'.join(checkpoints)} on {split}"
        report.update(translation_signature=translator.signature(), references=[str(evaluation.reference_path)])
        if output_path:
            atomic_write_text(output_path, "".join(one_line(text) + "\n" for text in hypotheses),
                              inputs=[evaluation.reference_path])
            report["hypotheses"] = output_path
    else:
        if not hyp_path or not ref_paths:
            raise click.UsageError("give --hyp and at least one --ref (or --checkpoint and --data)")
        hypotheses, *references = read_parallel(hyp_path, *ref_paths)
        scores = corpus_scores(hypotheses, references, metrics, options, source=hyp_path)
        hypotheses_name = hyp_path
        report.update(hypotheses=hyp_path, references=list(ref_paths))
    report["scores"] = [score.to_dict() for score in scores]

    bootstrap: list[BootstrapResult] = []
    if baseline_path:
        baseline = read_lines(baseline_path)
        check_same_length(hypotheses_name, len(hypotheses), baseline_path, len(baseline))
        bootstrap = paired_bootstrap(hypotheses, baseline, references, metrics, options, bootstrap_samples)
        report["bootstrap"] = {"baseline": baseline_path, "samples": bootstrap_samples,
                               "results": [result.to_dict() for result in bootstrap]}

    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    if "translation_signature" in report:
        click.echo(f"translation: {report['translation_signature']}")
    for score in scores:
        click.echo(score.text)
    if bootstrap:
        click.echo("\n".join(bootstrap_lines(bootstrap, baseline_path, bootstrap_samples)))


def given(parameter: str) -> bool:
    """Whether the command line set ``parameter`` (not its default)."""
    source = click.get_current_context().get_parameter_source(parameter)
    return source not in (None, click.core.ParameterSource.DEFAULT)


def evaluate_confidence(path: str, ref_paths: tuple[str, ...], field: str, share: float, threshold: float | None,
                        options: MetricOptions, as_json: bool) -> None:
    """``--confidence``: the records against ``--ref``; no other mode's options."""
    others = [name for name in ("hyp_path", "checkpoints", "prepared_dir", "output_path", "metric_spec", "tokenize",
                                "baseline_path", "bootstrap_samples") if given(name)]
    if others:
        option = {"hyp_path": "hyp", "checkpoints": "checkpoint", "prepared_dir": "data", "output_path": "output",
                  "metric_spec": "metrics", "baseline_path": "baseline"}.get(others[0], others[0].replace("_", "-"))
        raise click.UsageError(f"--{option} does not go with --confidence (which scores sentence chrF against --ref)")
    if not ref_paths:
        raise click.UsageError("--confidence needs --ref (the references its records translate)")
    records = read_confidence_records(path, field)
    references = [read_lines(ref) for ref in ref_paths]
    report = confidence_report(records, references, ref_paths, field, share, threshold, options)
    text = json.dumps(report.to_dict(), ensure_ascii=False, indent=2) if as_json else "\n".join(report_lines(report))
    click.echo(text)


__all__ = ["evaluate"]
