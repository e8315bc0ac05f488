"""CTranslate2 4.8.5: converts an OpenNMT-py checkpoint, then translates it in float32 or int8.

Threads (see PEERS.md): on a 2-core machine CTranslate2 scales with ``inter_threads=2,
intra_threads=1`` (two batches in parallel); two intra threads gain little in float32 and
slow int8 down 2-15x, so the settings measured are 2x1 inter and 1 thread.
The work happens in ``ctranslate2_worker.py``, run by the CTranslate2 venv's Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from common import run_measured, thread_env
from peers.arch import DecodeSpec
from peers.install import venv_bin
from peers.results import TranslateResult, check, count_output

NAME = "CTranslate2"
PEER = "ctranslate2"
WORKER = Path(__file__).resolve().parent / "ctranslate2_worker.py"
# -P: do not put the worker's folder on sys.path, where this module would shadow ``ctranslate2``
WORKER_PYTHON = (str(venv_bin(PEER, "python")), "-P", str(WORKER))


@dataclass(frozen=True)
class Threads:
    """A thread layout: ``inter`` batches in parallel, each on ``intra`` threads."""

    inter: int
    intra: int

    def describe(self) -> str:
        return f"{self.inter} inter x {self.intra} intra"


THREAD_LAYOUTS = (Threads(inter=2, intra=1), Threads(inter=1, intra=1))
COMPUTE_TYPES = ("float32", "int8")


def convert(opennmt_checkpoint: Path, out_dir: Path) -> Path:
    """Convert an OpenNMT-py checkpoint (once) and return the converted model folder."""
    if not (out_dir / "model" / "model.bin").is_file():
        check(NAME, run_measured([*WORKER_PYTHON, "convert", opennmt_checkpoint, out_dir],
                                 out_dir.parent / f"{out_dir.name}.convert.log", env=thread_env(1)))
    return out_dir


def translate(model_dir: Path, source: Path, decode: DecodeSpec, out_dir: Path,
              compute_type: str, threads: Threads) -> TranslateResult:
    """Translate ``source`` pieces; time covers ``translate_batch`` only."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{compute_type}.{threads.inter}x{threads.intra}.beam{decode.beam}"
    hypotheses = out_dir / f"hyp.{tag}.txt"
    timing = out_dir / f"timing.{tag}.json"
    command = [*WORKER_PYTHON, "translate", model_dir, source, hypotheses,
               "--beam", decode.beam, "--batch", decode.batch_sentences, "--max-length", decode.max_length,
               "--compute-type", compute_type, "--inter-threads", threads.inter,
               "--intra-threads", threads.intra]
    measured = check(NAME, run_measured(command, out_dir / f"translate.{tag}.log",
                                        env=thread_env(threads.inter * threads.intra), stdout=timing))
    seconds = json.loads(timing.read_text().splitlines()[-1])["seconds"]
    sentences, tokens = count_output(hypotheses)
    return TranslateResult(f"{NAME} {compute_type}", sentences, tokens, seconds, hypotheses, measured)
