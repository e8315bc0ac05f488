"""Runs inside the CTranslate2 virtualenv (stdlib, torch and ctranslate2 only).

``convert CHECKPOINT OUT_DIR``: convert an OpenNMT-py checkpoint. OpenNMT-py's default
``self_attn_type: scaled-dot-flash`` is refused by the converter although it is the same
maths, so a copy of the checkpoint with ``scaled-dot`` is converted; the checkpoint holds
an ``argparse.Namespace``, hence ``unsafe_deserialization`` (our own file).

``translate MODEL_DIR SOURCE OUTPUT ...``: translate piece-tokenised lines and print
``{"seconds": ...}``, the time of ``translate_batch`` alone (model load excluded).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def convert(checkpoint: Path, out_dir: Path) -> None:
    import torch
    from ctranslate2.converters import OpenNMTPyConverter

    out_dir.mkdir(parents=True, exist_ok=True)
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    if getattr(state["opt"], "self_attn_type", "") == "scaled-dot-flash":
        state["opt"].self_attn_type = "scaled-dot"
    patched = out_dir / "checkpoint.scaled-dot.pt"
    torch.save(state, patched)
    OpenNMTPyConverter(str(patched), unsafe_deserialization=True).convert(str(out_dir / "model"), force=True)
    patched.unlink()


def translate(args: argparse.Namespace) -> None:
    import ctranslate2

    translator = ctranslate2.Translator(str(args.model_dir / "model"), device="cpu",
                                       compute_type=args.compute_type,
                                       inter_threads=args.inter_threads, intra_threads=args.intra_threads)
    batch = [line.split() for line in args.source.read_text(encoding="utf-8").splitlines()]
    started = time.perf_counter()
    results = translator.translate_batch(batch, beam_size=args.beam, max_batch_size=args.batch,
                                         batch_type="examples", max_decoding_length=args.max_length)
    seconds = time.perf_counter() - started
    args.output.write_text("".join(" ".join(result.hypotheses[0]) + "\n" for result in results),
                           encoding="utf-8")
    print(json.dumps({"seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    converting = commands.add_parser("convert")
    converting.add_argument("checkpoint", type=Path)
    converting.add_argument("out_dir", type=Path)
    translating = commands.add_parser("translate")
    translating.add_argument("model_dir", type=Path)
    translating.add_argument("source", type=Path)
    translating.add_argument("output", type=Path)
    translating.add_argument("--beam", type=int, required=True)
    translating.add_argument("--batch", type=int, required=True)
    translating.add_argument("--max-length", type=int, required=True)
    translating.add_argument("--compute-type", choices=("float32", "int8"), required=True)
    translating.add_argument("--inter-threads", type=int, required=True)
    translating.add_argument("--intra-threads", type=int, required=True)
    args = parser.parse_args()
    if args.command == "convert":
        convert(args.checkpoint, args.out_dir)
    else:
        translate(args)


if __name__ == "__main__":
    main()
