"""``nmt serve``: translate over HTTP (JSON API, LibreTranslate API, a web page) with a checkpoint."""

from __future__ import annotations

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import decode_options
from nmt_cli.config import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS
from nmt_cli.errors import NmtError
from nmt_cli.serve.settings import ServeSettings  # a dataclass alone: its defaults are the options' defaults

INSTALL_HINT = "nmt serve needs the serve extra: pip install 'nmt-cli[serve]'"


@cli.command("serve")
@click.option("--checkpoint", required=True, type=click.Path(), help="Checkpoint directory or run directory (newest).")
@click.option("--host", default=ServeSettings.host, show_default=True,
              help="Address to bind; anything beyond localhost should also get --api-key.")
@click.option("--port", default=ServeSettings.port, show_default=True, type=click.IntRange(0, 65535), help="0: any free port.")
@click.option("--api-key", envvar="NMT_SERVE_API_KEY",
              help="Require Authorization: Bearer KEY (or $NMT_SERVE_API_KEY, which ps does not show).")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow browser pages from ORIGIN to call the API (repeatable); CORS is off without it.")
@click.option("--max-body-bytes", default=ServeSettings.max_body_bytes, show_default=True, type=click.IntRange(min=1),
              help="Largest request body; larger ones get 413.")
@click.option("--max-sentences", default=ServeSettings.max_sentences, show_default=True, type=click.IntRange(min=1),
              help="Sentences per request.")
@click.option("--max-chars", default=ServeSettings.max_chars, show_default=True, type=click.IntRange(min=1),
              help="Characters per sentence.")
@click.option("--max-beam", default=ServeSettings.max_beam, show_default=True, type=click.IntRange(min=1),
              help="Largest beam_size a request may ask for.")
@click.option("--max-terms", default=ServeSettings.max_terms, show_default=True, type=click.IntRange(min=1),
              help="Glossary entries per request; more get 413.")
@click.option("--max-constraints", default=ServeSettings.max_constraints, show_default=True, type=click.IntRange(min=1),
              help="Phrases one sentence may ask for or avoid (alternatives and glossary matches counted).")
@click.option("--max-term-chars", default=ServeSettings.max_term_chars, show_default=True, type=click.IntRange(min=1),
              help="Characters per term, constraint or phrase to avoid.")
@click.option("--queue-size", default=ServeSettings.queue_size, show_default=True, type=click.IntRange(min=1),
              help="Sentences waiting to be decoded; beyond it requests get 503 and Retry-After.")
@click.option("--max-connections", default=ServeSettings.max_connections, show_default=True, type=click.IntRange(min=1),
              help="Open connections; beyond it uvicorn answers 503.")
@click.option("--request-timeout", default=ServeSettings.request_timeout_s, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a request may wait for its translation before 503.")
@click.option("--batch-wait-ms", default=ServeSettings.batch_wait_ms, show_default=True, type=click.FloatRange(min=0),
              help="Longest a micro-batch is held open for more sentences once the decoder is free.")
@click.option("--batch-idle-ms", default=ServeSettings.batch_idle_ms, show_default=True, type=click.FloatRange(min=0),
              help="Close a micro-batch sooner when no sentence has arrived for this long.")
@click.option("--batch-tokens", type=click.IntRange(min=1),
              help=f"Source tokens per micro-batch [default: decode.max_tokens; where 0, {CPU_BATCH_TOKENS} on "
                   f"the CPU, {GPU_BATCH_TOKENS} on a GPU].")
@click.option("--batching/--no-batching", default=ServeSettings.batching, show_default=True,
              help="Decode sentences of concurrent requests together (off: one request per decode call).")
@decode_options
def serve(checkpoint, translator_options, **options) -> None:
    """Serve a checkpoint: POST /v1/translate, LibreTranslate's POST /translate, a web page at /."""
    try:
        from nmt_cli.serve.model import load_served_model
        from nmt_cli.serve.server import run_server
    except ImportError as exc:
        raise NmtError(f"{INSTALL_HINT} ({exc.name} is missing)") from None
    settings = ServeSettings(
        host=options["host"], port=options["port"], api_key=options["api_key"] or None,
        cors_origins=tuple(options["cors_origins"]), max_body_bytes=options["max_body_bytes"],
        max_sentences=options["max_sentences"], max_chars=options["max_chars"], max_beam=options["max_beam"],
        max_terms=options["max_terms"], max_constraints=options["max_constraints"],
        max_term_chars=options["max_term_chars"], queue_size=options["queue_size"], max_connections=options["max_connections"],
        request_timeout_s=options["request_timeout"], batching=options["batching"],
        batch_wait_ms=options["batch_wait_ms"], batch_idle_ms=options["batch_idle_ms"], batch_tokens=options["batch_tokens"])
    run_server(lambda: load_served_model(checkpoint, **translator_options), settings)
