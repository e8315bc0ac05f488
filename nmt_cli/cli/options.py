"""Option sets shared by several subcommands, each declared once.

* :func:`config_options` (prepare, train): ``--config FILE`` and ``--set section.key=value``;
* :func:`checkpoints_option`, :func:`model_options` (translate, evaluate, score): which
  checkpoints, averaged or not, on which device;
* :func:`decode_options` (translate, evaluate): search settings on top of a checkpoint's own;
* :func:`reading_options` (translate, align): which attention becomes alignments, and how;
  :func:`link_options` (align sweep): the hard-link rule alone.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from nmt_cli.config import Config, load_config, parse_overrides

__all__ = [
    "DEVICE_HELP", "checkpoints_option", "config_options", "decode_options", "link_options", "model_options",
    "reading_options",
]

DEVICE_HELP = "auto (CUDA when present, else CPU), cpu, cuda or cuda:N."

Command = Callable[..., Any]


def config_options(func: Command) -> Command:
    """Add ``--config FILE`` and repeatable ``--set KEY=VALUE``; pass the resolved ``config``."""

    @click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False), default=None,
                  help="YAML config or recipe (defaults: the built-in settings).")
    @click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                  help="Override one setting, e.g. --set train.max_steps=100 (repeatable).")
    @functools.wraps(func)
    def wrapper(*args: Any, config_path: str | None, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        config: Config = load_config(config_path, parse_overrides(overrides))
        return func(*args, config=config, **kwargs)

    return wrapper


def checkpoints_option(required: bool) -> Callable[[Command], Command]:
    """``--checkpoint`` (repeatable: several make an ensemble); passes ``checkpoints``, a tuple."""
    return click.option("--checkpoint", "checkpoints", multiple=True, required=required, type=click.Path(),
                        help="Checkpoint or run directory (its newest); repeat it to decode with an ensemble "
                             "of models that share a vocabulary.")


def model_options(func: Command) -> Command:
    """``--average --device``; passes ``translator_options``, keyword arguments of
    :meth:`nmt_cli.decoding.Translator.from_checkpoint` and :func:`nmt_cli.decoding.load_translator`."""

    @click.option("--average", metavar="last:N", help="Average the weights of the run's last N checkpoints.")
    @click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
    @functools.wraps(func)
    def wrapper(*args: Any, average, device, **kwargs: Any) -> Any:
        return func(*args, translator_options={"device": device, "average": average}, **kwargs)

    return wrapper


def decode_options(func: Command) -> Command:
    """``--beam --alpha --nbest --workers --on-long-line --on-unmet --engine --quantize --shortlist
    --shortlist-scope --set decode.*`` and :func:`model_options`.

    Adds ``engine``, ``quantize``, ``shortlist`` (a file, False for ``none``, None unset) and
    ``overrides`` (``{"decode.beam_size": 4, ...}``, applied to the checkpoint's config) to
    the ``translator_options`` it passes on, the keyword arguments of
    :func:`nmt_cli.decoding.load_translator`.
    """

    @click.option("--beam", type=click.IntRange(min=1), help="Beam size; 1 = greedy [default: the checkpoint's].")
    @click.option("--alpha", type=float, help="GNMT length penalty alpha [default: the checkpoint's].")
    @click.option("--nbest", type=click.IntRange(min=1), help="Hypotheses per sentence (at most the beam size).")
    @click.option("--workers", type=click.IntRange(min=1),
                  help="CPU: batches decoded at once, each in a process of one thread (decode.workers) [default: 1].")
    @click.option("--on-long-line", type=click.Choice(["error", "truncate", "skip"]),
                  help="A source line longer than the model takes: stop naming it (default), translate its "
                       "first tokens, or give it an empty translation (decode.on_long_line).")
    @click.option("--on-unmet", type=click.Choice(["error", "relax", "drop"]),
                  help="Constraints (and prefix) longer than a sentence's output limit: stop naming its line "
                       "(default), raise that sentence's limit to fit them, or drop the constraints that do not "
                       "fit (decode.on_unmet).")
    @click.option("--engine", metavar="NAME", default="auto", show_default=True,
                  help="torch, ctranslate2, or auto: ctranslate2 for an `nmt export` directory, torch otherwise; "
                       "ctranslate2 on a checkpoint converts it first (pip install 'nmt-cli[ctranslate2]').")
    @click.option("--quantize", metavar="TYPE",
                  help="torch: int8 (dynamic int8 Linear/LSTM/GRU, on the CPU, which --device auto then picks); "
                       "ctranslate2: float32, int8, int8_float32, int16, float16 or bfloat16 [default: the export's].")
    @click.option("--shortlist", metavar="FILE|none",
                  help="A lexical shortlist (nmt shortlist): each sentence may output only its candidates. The "
                       "ctranslate2 engine uses an export's own (nmt export --shortlist) unless this is none.")
    @click.option("--shortlist-scope", type=click.Choice(["batch", "sentence"]),
                  help="ctranslate2 with a vocabulary map: decode each batch over its sentences' union of candidates "
                       "(batch: fast, an output may depend on its batch-mates) or each sentence alone over its own "
                       "(sentence: the same output in any batch, slower) (decode.shortlist_scope) [default: batch].")
    @click.option("--set", "overrides", multiple=True, metavar="decode.KEY=VALUE",
                  help="Any decoding setting, e.g. --set decode.max_len_b=50 (repeatable).")
    @model_options
    @functools.wraps(func)
    def wrapper(*args: Any, beam, alpha, nbest, workers, on_long_line, on_unmet, engine, quantize, shortlist,
                shortlist_scope, overrides, translator_options, **kwargs: Any) -> Any:
        changes = parse_overrides(overrides)
        flags = (("beam_size", beam), ("alpha", alpha), ("nbest", nbest), ("workers", workers),
                 ("on_long_line", on_long_line), ("on_unmet", on_unmet), ("shortlist_scope", shortlist_scope))
        changes.update({f"decode.{key}": value for key, value in flags if value is not None})
        options = {**translator_options, "engine": engine, "quantize": quantize, "overrides": changes,
                   "shortlist": False if shortlist == "none" else shortlist}
        return func(*args, translator_options=options, **kwargs)

    return wrapper


def link_options(func: Command) -> Command:
    """``--method --threshold``: how a soft word matrix becomes hard links."""
    func = click.option("--threshold", type=float, default=0.2, show_default=True,
                        help="Weight threshold for --method threshold.")(func)
    return click.option("--method", type=click.Choice(["argmax", "threshold"]), default="argmax", show_default=True,
                        help="Hard links: argmax per target word, or every weight >= --threshold.")(func)


def reading_options(func: Command) -> Command:
    """``--layer --heads`` and :func:`link_options`; passes ``reading``, an
    :class:`nmt_cli.alignment.reader.AttentionReading` (imported only when a command runs)."""

    @click.option("--layer", default=None,
                  help="Decoder layer to read: index, negative from the end, or 'all' [default: the model's: the "
                  "head trained on word links (guided alignment), else -1].")
    @click.option("--heads", default=None,
                  help="Heads to average: comma-separated indices or 'all' [default: the model's, else all].")
    @link_options
    @functools.wraps(func)
    def wrapper(*args: Any, layer, heads, method, threshold, **kwargs: Any) -> Any:
        from nmt_cli.alignment.reader import AttentionReading, HeadSelection

        reading = AttentionReading(HeadSelection.parse(layer, heads), method, threshold)
        return func(*args, reading=reading, **kwargs)

    return wrapper
