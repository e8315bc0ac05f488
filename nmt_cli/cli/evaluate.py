"""``nmt evaluate``: sacreBLEU scores of a hypothesis file, or of a checkpoint on a prepared split.

Prints each score as sacreBLEU does (``name|signature = score``); ``--json`` prints one
JSON object instead. ``--baseline`` adds a paired bootstrap test against another
system's output, with its p-value.
"""

from __future__ import annotations

import json

import click
from sacrebleu.metrics import BLEU

from nmt_cli.cli import cli
from nmt_cli.cli.options import checkpoints_option, decode_options
from nmt_cli.evaluation import BootstrapResult, MetricOptions, corpus_scores, paired_bootstrap, parse_metrics
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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@decode_options
def evaluate(hyp_path, ref_paths, checkpoints, prepared_dir, split, output_path, metric_spec, chrf_plus, lowercase,
             tokenize, baseline_path, bootstrap_samples, as_json, translator_options) -> None:
    """Score translations with sacreBLEU (BLEU, chrF, TER)."""
    metrics = parse_metrics(metric_spec)
    options = MetricOptions(chrf_plus=chrf_plus, lowercase=lowercase, tokenize=tokenize)
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


__all__ = ["evaluate"]
