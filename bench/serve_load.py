"""Load test of `nmt serve`: concurrent clients, sentences/s and latency, micro-batching on and off.

Model: the tiny Transformer of ``translate_speed.py`` (2+2 layers, d 128, trained 800 steps on
Multi30k), reused when that script trained it already. The server is the real ``nmt serve``
process on 2 torch threads with the checkpoint's search settings (beam 5, alpha 0.6, at
most 1.2 x source + 10 output pieces), ``--queue-size 128`` and ``--max-sentences 1``;
once with micro-batching (``--batch-wait-ms 30 --batch-idle-ms 2``, ``--batch-tokens 2048``) and once with
``--no-batching`` (every request decoded on its own).

Clients: 1, 8, 32 and 128 keep-alive HTTP/1.1 connections from this process (asyncio), each
sending one Multi30k test2016 sentence per ``POST /v1/translate`` and the next when the
answer is in; together they send the first 500 sentences once a round (``--sentences
1000``: all). A warm-up round per server is not timed. A 503 is counted and the sentence
sent again after its Retry-After; an error or a lost connection is counted and the sentence
dropped. Latency is per request, from sending to the whole answer; sentences/s and output
pieces/s divide by the wall time of the round. Peak RSS is the server's resident memory,
sampled every 50 ms. The overload round runs twice as many clients as the batching server
holds (its queue plus one decode call of 2,048 source pieces): it must refuse the excess
with clean 503s (JSON error and Retry-After) while its memory stays flat. Every row's
outputs are scored with BLEU and compared with ``nmt translate``'s.

Full run: ``python bench/serve_load.py`` (plus about 3 minutes the first time, to train the
model); ``--clients 32 --sentences 300`` measures a part of it. ``--quick``: 6 training
steps on a Multi30k slice, 12 sentences, 1 and 4 clients, a queue of 4, micro-batches of
32 source pieces and outputs of at most 16 pieces, only to show that the script runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import (REPO, THREADS, Report, bench_arguments, fmt, fmt_ratio, machine_description, measured_at,
                    median, nmt_command, repeats_of, thread_env)
from peers import ours
from peers.arch import TINY_TRANSFORMER
from peers.corpus import prepare_multi30k
from translate_speed import FULL_TRAINING, QUICK_TRAINING, train_once

from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding.search import max_output_length

#: micro-batching settings of the batching server: ``nmt serve``'s defaults
BATCH_WAIT_MS, BATCH_IDLE_MS = 30, 2


@dataclass(frozen=True)
class Plan:
    """Client counts, the server's queue and micro-batch budget, sentences a round, and decode
    settings on top of the checkpoint's."""

    levels: tuple[int, ...]
    queue_size: int
    batch_tokens: int
    sentences: int  # the first N of test2016
    decode: tuple[tuple[str, str], ...] = ()

    def modes(self) -> dict[str, list[str]]:
        """``nmt serve`` options of the two servers compared."""
        return {"on": ["--batch-wait-ms", str(BATCH_WAIT_MS), "--batch-idle-ms", str(BATCH_IDLE_MS),
                       "--batch-tokens", str(self.batch_tokens)], "off": ["--no-batching"]}

    def capacity(self, mean_source_pieces: float) -> int:
        """Requests of one sentence the batching server holds at once: its queue and one decode call."""
        return self.queue_size + max(1, int(self.batch_tokens / mean_source_pieces))

    def decode_options(self) -> list[str]:
        return [option for key, value in self.decode for option in ("--set", f"decode.{key}={value}")]


FULL = Plan(levels=(1, 8, 32, 128), queue_size=128, batch_tokens=2048, sentences=500)
# a model trained 6 steps runs every sentence to the length limit: keep it short
QUICK = Plan(levels=(1, 4), queue_size=4, batch_tokens=32, sentences=12,
             decode=(("max_len_a", "0"), ("max_len_b", "16")))


@dataclass
class Round:
    """What the clients of one round saw."""

    clients: int
    sentences: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    outputs: dict[int, dict] = field(default_factory=dict)
    rejected: int = 0
    unclean_rejections: int = 0
    errors: int = 0
    peak_rss_mb: float = 0.0
    decode_calls: float = 0.0

    @property
    def dropped(self) -> int:
        return self.sentences - len(self.outputs)

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000 if ordered else 0.0


class Connection:
    """One keep-alive HTTP/1.1 connection that sends requests and reads whole answers."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        data = json.dumps(body).encode() if body is not None else b""
        self.writer.write(f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def run_client(connection: Connection, work: list[tuple[int, str]], result: Round) -> None:
    """Send each sentence, wait for its answer, go on; retry after a 503, drop after an error."""
    for index, text in work:
        while True:
            started = time.perf_counter()
            try:
                status, headers, payload = await connection.request("POST", "/v1/translate", {"text": text})
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                connection.close()
                result.errors += 1
                break
            if status == 200:
                result.latencies.append(time.perf_counter() - started)
                result.outputs[index] = json.loads(payload)["translations"][0]
                break
            if status == 503:
                result.rejected += 1
                clean = "retry-after" in headers and payload.startswith(b'{"error":')
                result.unclean_rejections += not clean
                await asyncio.sleep(float(headers.get("retry-after", "1")))
                continue
            result.errors += 1
            break
    connection.close()


class Server:
    """``nmt serve`` in a subprocess on a free port, its log in a file, its memory sampled."""

    def __init__(self, checkpoint: Path, options: list[str], plan: Plan, log: Path):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        self._log_handle = log.open("w")
        command = nmt_command("serve", "--checkpoint", checkpoint, "--port", 0, "--queue-size", plan.queue_size,
                              "--max-sentences", 1, *plan.decode_options(), *options)
        self.process = subprocess.Popen(command, cwd=REPO, env=thread_env(THREADS), stdout=subprocess.DEVNULL,
                                        stderr=self._log_handle)
        self.port = self._wait_for_port()

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.process.poll() is None:
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read_text(errors="replace"))
            if match and "model loaded" in self.log.read_text(errors="replace"):
                return int(match.group(1))
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"nmt serve did not start; log {self.log}:\n{self.log.read_text(errors='replace')}")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    async def decode_calls(self) -> float:
        """Decode calls so far, from the batch-size histogram of ``/metrics``."""
        connection = Connection("127.0.0.1", self.port)
        _, _, payload = await connection.request("GET", "/metrics")
        connection.close()
        return float(re.search(r"^nmt_batch_sentences_count (\S+)$", payload.decode(), re.M).group(1))

    def stop(self) -> int:
        self.process.terminate()
        code = self.process.wait(timeout=120)
        self._log_handle.close()
        return code


async def run_round(server: Server, sentences: list[str], clients: int) -> Round:
    """``clients`` connections share the sentences round-robin; the server's RSS is sampled meanwhile."""
    result = Round(clients, len(sentences))
    work = [[(i, sentences[i]) for i in range(k, len(sentences), clients)] for k in range(clients)]
    calls_before = await server.decode_calls()
    done = asyncio.Event()

    async def sample_memory() -> None:
        while not done.is_set():
            result.peak_rss_mb = max(result.peak_rss_mb, server.rss_mb())
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample_memory())
    started = time.perf_counter()
    await asyncio.gather(*(run_client(Connection("127.0.0.1", server.port), share, result) for share in work))
    result.seconds = time.perf_counter() - started
    done.set()
    await sampler
    result.decode_calls = await server.decode_calls() - calls_before
    return result


@dataclass
class Quality:
    """What every row is checked against: references, ``nmt translate``'s pieces, the length limits."""

    references: list[str]
    translate_pieces: list[list[str]]
    length_limits: list[int]
    search: str
    mean_source_pieces: float

    def bleu(self, result: Round) -> float:
        import sacrebleu

        hypotheses = [result.outputs.get(i, {}).get("text", "") for i in range(result.sentences)]
        return sacrebleu.corpus_bleu(hypotheses, [self.references[: result.sentences]]).score

    def at_limit(self, result: Round) -> float:
        hits = sum(len(out["tokens"]) >= self.length_limits[i] for i, out in result.outputs.items())
        return 100 * hits / max(len(result.outputs), 1)

    def same_as_translate(self, result: Round) -> int:
        return sum(out["tokens"] == self.translate_pieces[i] for i, out in result.outputs.items())


def reference_quality(checkpoint: Path, prepared: Path, sentences: list[str], plan: Plan) -> Quality:
    """``nmt translate``'s output for the same sentences (its Translator, same settings) and each length limit."""
    import torch

    from nmt_cli.decoding import Translator

    torch.set_num_threads(THREADS)
    overrides = {f"decode.{key}": value for key, value in plan.decode}
    translator = Translator.from_checkpoint(checkpoint, overrides=overrides)
    tokenizer, decode = translator.tokenizer, translator.decode
    pieces = [tokenizer.tgt_pieces(h.tokens) for h in translator.translate(sentences)]
    source_pieces = [len(tokenizer.encode_src(text)) for text in sentences]
    limits = [max_output_length(length, decode.max_len_a, decode.max_len_b) for length in source_pieces]
    references = PreparedData(prepared).text_path("test", "tgt").read_text(encoding="utf-8").splitlines()
    search = (f"beam {decode.beam_size}, alpha {decode.alpha:g}, at most {decode.max_len_a:g} x source + "
              f"{decode.max_len_b} pieces")
    return Quality(references[: len(sentences)], pieces, limits, search, sum(source_pieces) / len(source_pieces))


COLUMNS = ["system", "clients", "sent/s", "out tok/s", "p50 ms", "p95 ms", "p99 ms", "sent/decode call",
           "503s", "errors", "dropped", "server peak RSS MB", "BLEU", "at length limit", "= nmt translate",
           "on / off"]


def row(mode: str, rounds: list[Round], quality: Quality, off_rate: float | None) -> list[str]:
    """One table row: medians over the repeats; counts summed; peak memory the largest seen."""
    first = rounds[0]
    rate = median([r.sentences / r.seconds for r in rounds])
    tokens = median([sum(len(o["tokens"]) for o in r.outputs.values()) / r.seconds for r in rounds])
    latencies = [fmt(median([r.percentile(share) for r in rounds])) for share in (0.50, 0.95, 0.99)]
    per_call = sum(len(r.outputs) for r in rounds) / max(sum(r.decode_calls for r in rounds), 1)
    counts = [fmt(sum(r.rejected for r in rounds)), fmt(sum(r.errors for r in rounds)),
              fmt(sum(r.dropped for r in rounds))]
    same = min(quality.same_as_translate(r) for r in rounds)
    return [mode, str(first.clients), fmt(rate, 1), fmt(tokens), *latencies, fmt(per_call, 1), *counts,
            fmt(max(r.peak_rss_mb for r in rounds)), fmt(quality.bleu(first), 1), f"{quality.at_limit(first):.1f}%",
            f"{same}/{first.sentences}", fmt_ratio(rate, off_rate) if off_rate else "-"]


def measure(checkpoint: Path, sentences: list[str], plan: Plan, overload_clients: int, repeats: int,
            out: Path) -> tuple[dict, Round, dict]:
    """Every level with batching on and off, and the overload round; also each server's exit status."""
    rounds: dict[tuple[str, int], list[Round]] = {}
    exits = {}
    overload = None
    for mode, options in plan.modes().items():
        server = Server(checkpoint, options, plan, out / f"server-{mode}.log")
        try:
            asyncio.run(run_round(server, sentences, max(plan.levels)))  # warm-up, not reported
            for clients in plan.levels:
                rounds[mode, clients] = [asyncio.run(run_round(server, sentences, clients)) for _ in range(repeats)]
                print(f"batching {mode}, {clients} clients: "
                      f"{median([r.sentences / r.seconds for r in rounds[mode, clients]]):.1f} sentences/s", flush=True)
            if mode == "on":
                overload = asyncio.run(run_round(server, sentences, overload_clients))
        finally:
            exits[mode] = server.stop()
    return rounds, overload, exits


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--clients", help="comma list of client counts (default: 1,8,32,128; --quick: 1,4)")
    parser.add_argument("--sentences", type=int, help="the first N test sentences a round (default: 500; --quick: 12)")
    args = parser.parse_args()
    repeats = repeats_of(args)
    plan, training = (QUICK, QUICK_TRAINING) if args.quick else (FULL, FULL_TRAINING)
    if args.clients:
        plan = dataclasses.replace(plan, levels=tuple(int(count) for count in args.clients.split(",")))
    if args.sentences:
        plan = dataclasses.replace(plan, sentences=args.sentences)
    prepared = prepare_multi30k(args.work, args.quick)
    models = args.work / ("translate_speed-quick" if args.quick else "translate_speed") / "models"
    checkpoint = train_once(models / "nmt-cli-transformer",
                            lambda out: ours.train(prepared, TINY_TRANSFORMER, training, out, THREADS))
    sentences = PreparedData(prepared).text_path("test", "src").read_text(encoding="utf-8").splitlines()
    sentences = sentences[: plan.sentences]
    quality = reference_quality(checkpoint, prepared, sentences, plan)
    capacity = plan.capacity(quality.mean_source_pieces)
    rounds, overload, exits = measure(checkpoint, sentences, plan, 2 * capacity, repeats, args.work / "serve_load")

    report = Report("serve_load", f"nmt serve under load (Multi30k test2016, {len(sentences):,} sentences a round)",
                    COLUMNS, quick=args.quick)
    for mode in ("on", "off"):
        for clients in plan.levels:
            off_rate = median([r.sentences / r.seconds for r in rounds["off", clients]]) if mode == "on" else None
            report.add_row(*row(f"batching {mode}", rounds[mode, clients], quality, off_rate))
    report.add_row(*row("batching on, 2x capacity", [overload], quality, None))
    machine, commit = machine_description(), measured_at()["commit"]
    clean = overload.rejected - overload.unclean_rejections
    report.notes = [
        f"commit {commit}; {machine['cpu']} ({machine['vector extensions']}), {machine['cores']} cores; "
        f"server on {THREADS} torch threads, the clients in the bench process on the same cores",
        f"search: {quality.search}; model: {TINY_TRANSFORMER.describe()}, trained {training.steps} steps",
        f"batching on: --batch-wait-ms {BATCH_WAIT_MS} --batch-idle-ms {BATCH_IDLE_MS} (the defaults: once the "
        f"decoder is free a micro-batch stays open until as many sentences came as it last answered and then "
        f"none for {BATCH_IDLE_MS} ms, at most {BATCH_WAIT_MS} ms), --batch-tokens "
        f"{plan.batch_tokens}; off: --no-batching, one request per decode call; both --queue-size "
        f"{plan.queue_size}, requests of one sentence; each figure the median of {repeats} round(s) after a "
        "warm-up round",
        f"2x capacity: {2 * capacity} clients, twice the {capacity} requests the server holds ({plan.queue_size} "
        f"queued, about {capacity - plan.queue_size} in a decode call of {plan.batch_tokens} source pieces): "
        f"{overload.rejected:,} 503s, {clean:,} of them clean (JSON error and Retry-After); each refused "
        "sentence is sent again after Retry-After",
        "= nmt translate: outputs whose pieces equal Translator.translate over the whole file with the same "
        "settings; at length limit: outputs as long as the search allows",
        f"server exit status after SIGTERM: batching on {exits['on']}, off {exits['off']}",
    ]
    print(f"commit {commit} | {machine['cpu']} | {machine['vector extensions']} | {machine['cores']} cores")
    report.emit(args.json)


if __name__ == "__main__":
    main()
