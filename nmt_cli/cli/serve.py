"""``nmt serve``: translate over HTTP (JSON API, LibreTranslate API, a web page) with a checkpoint."""

from __future__ import annotations

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import decode_options
from nmt_cli.config import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS
from nmt_cli.errors import NmtError

INSTALL_HINT = "nmt serve needs the serve extra: pip install 'nmt-cli[serve]'"


@cli.command("serve")
@click.option("--checkpoint", required=True, type=click.Path(), help="Checkpoint directory or run directory (newest).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything beyond localhost should also get --api-key.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="0: any free port.")
@click.option("--api-key", envvar="NMT_SERVE_API_KEY",
              help="Require Authorization: Bearer KEY (or $NMT_SERVE_API_KEY, which ps does not show).")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow browser pages from ORIGIN to call the API (repeatable); CORS is off without it.")
@click.option("--max-body-bytes", default=1_048_576, show_default=True, type=click.IntRange(min=1),
              help="Largest request body; larger ones get 413.")
@click.option("--max-sentences", default=64, show_default=True, type=click.IntRange(min=1),
              help="Sentences per request.")
@click.option("--max-chars", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Characters per sentence.")
@click.option("--max-beam", default=16, show_default=True, type=click.IntRange(min=1),
              help="Largest beam_size a request may ask for.")
@click.option("--max-terms", default=256, show_default=True, type=click.IntRange(min=1),
              help="Glossary entries per request; more get 413.")
@click.option("--max-constraints", default=32, show_default=True, type=click.IntRange(min=1),
              help="Phrases one sentence may ask for or avoid (alternatives and glossary matches counted).")
@click.option("--max-term-chars", default=200, show_default=True, type=click.IntRange(min=1),
              help="Characters per term, constraint or phrase to avoid.")
@click.option("--queue-size", default=256, show_default=True, type=click.IntRange(min=1),
              help="Sentences waiting to be decoded; beyond it requests get 503 and Retry-After.")
@click.option("--max-connections", default=1024, show_default=True, type=click.IntRange(min=1),
              help="Open connections; beyond it uvicorn answers 503.")
@click.option("--request-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a request may wait for its translation before 503.")
@click.option("--batch-wait-ms", default=30.0, show_default=True, type=click.FloatRange(min=0),
              help="Longest a micro-batch is held open for more sentences once the decoder is free.")
@click.option("--batch-idle-ms", default=2.0, show_default=True, type=click.FloatRange(min=0),
              help="Close a micro-batch sooner when no sentence has arrived for this long.")
@click.option("--batch-tokens", type=click.IntRange(min=1),
              help=f"Source tokens per micro-batch [default: decode.max_tokens; where 0, {CPU_BATCH_TOKENS} on "
                   f"the CPU, {GPU_BATCH_TOKENS} on a GPU].")
@click.option("--batching/--no-batching", default=True, show_default=True,
              help="Decode sentences of concurrent requests together (off: one request per decode call).")
@decode_options
def serve(checkpoint, translator_options, **options) -> None:
    """Serve a checkpoint: POST /v1/translate, LibreTranslate's POST /translate, a web page at /."""
    try:
        from nmt_cli.serve.model import load_served_model
        from nmt_cli.serve.server import run_server
        from nmt_cli.serve.settings import ServeSettings
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
