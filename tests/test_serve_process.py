"""The real `nmt serve` process: it binds a port, answers HTTP, and exits 0 on SIGTERM/SIGINT after
finishing the request in flight."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="nmt serve needs the serve extra (pip install 'nmt-cli[serve]')")

pytestmark = pytest.mark.slow  # real servers in subprocesses: make test runs them, make test-fast does not

from nmt_cli.decoding import Translator  # noqa: E402
from tests.test_workers import live_children  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: how long a test waits for the server to do something before it fails: a bound for a hung server, not a
#: timing (a 2-core machine under load took minutes to start Python and torch)
PATIENCE = 300
SENTENCES = ["Eine traurige Tante besucht selten seine leeren Küchen .", "Haben Männer keinem Vater gedankt ?"]


class ServeProcess:
    """``python -m nmt_cli serve`` on a free port (``--port 0``), its stderr collected line by line.

    Tests wait on what the server says (its log lines) and on what it does (a port that refuses),
    never for a fixed time."""

    def __init__(self, checkpoint: Path, *options: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nmt_cli", "serve", "--checkpoint", str(checkpoint), "--port", "0", *options],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()  # notified at every line and at the end of stderr
        self._ended = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        match = self.wait_for_line(r"listening on (http://127\.0\.0\.1:\d+)")
        if match is None:
            self.process.kill()
            raise AssertionError("nmt serve did not start:\n" + "\n".join(self.lines))
        self.url = match.group(1)

    def _read(self) -> None:
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float = PATIENCE) -> re.Match | None:
        """The first stderr line matching ``pattern``, once the server writes it; None if it exits first."""
        def found() -> re.Match | None:
            return next((match for line in self.lines if (match := re.search(pattern, line))), None)

        with self._changed:
            self._changed.wait_for(lambda: found() is not None or self._ended, timeout)
            return found()

    def request(self, path: str, body: dict | None = None, timeout: float = PATIENCE) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def wait_ready(self) -> None:
        """Wait for the server's own word that the model is loaded, then check /health."""
        assert self.wait_for_line(r"model loaded: ") is not None, "never ready:\n" + "\n".join(self.lines)
        assert self.request("/health")[0] == 200

    def refuses_connections(self, timeout: float = PATIENCE) -> bool:
        """Whether the port refuses connections within ``timeout`` (an external process's state: polled)."""
        port = int(self.url.rsplit(":", 1)[1])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            except OSError:
                return True
            time.sleep(0.05)
        return False

    def queued_sentences(self) -> float:
        with urllib.request.urlopen(self.url + "/metrics", timeout=PATIENCE) as response:
            metrics = response.read().decode()
        return float(next(line for line in metrics.splitlines() if line.startswith("nmt_queue_sentences ")).split()[-1])

    def stop(self, sig: int) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(timeout=PATIENCE)
        self._reader.join(timeout=5)
        return code


def test_real_server_translates_and_finishes_the_request_in_flight_on_sigterm(tiny_trained_run):
    # every request waits 10 s for company, so the one queued is still in flight when the signal comes
    server = ServeProcess(tiny_trained_run, "--batch-wait-ms", "10000", "--batch-idle-ms", "10000")
    try:
        server.wait_ready()
        status, body = server.request("/v1/translate", {"text": SENTENCES})
        expected = [h.text for h in Translator.from_checkpoint(tiny_trained_run).translate(SENTENCES)]
        assert status == 200 and [t["text"] for t in body["translations"]] == expected
        in_flight: dict = {}
        thread = threading.Thread(target=lambda: in_flight.update(
            answer=server.request("/v1/translate", {"text": SENTENCES[1]})))
        thread.start()
        deadline = time.monotonic() + PATIENCE
        while server.queued_sentences() < 1:  # the server's own count: the request waits in its queue
            assert time.monotonic() < deadline and thread.is_alive(), "the request never reached the queue"
            time.sleep(0.02)
        assert not in_flight  # still unanswered, waiting for company, when the signal is sent
        server.process.send_signal(signal.SIGTERM)
        assert server.wait_for_line("SIGTERM received") is not None
        assert server.refuses_connections()  # no longer accepting
        thread.join(PATIENCE)
        status, alone = in_flight["answer"]
        assert status == 200 and alone["signature"] == body["signature"]
        # decoded alone rather than beside another sentence: same output, the score equal up to float rounding
        (translation,) = alone["translations"]
        assert translation["tokens"] == body["translations"][1]["tokens"]
        assert translation["score"] == pytest.approx(body["translations"][1]["score"], rel=1e-6)
        assert server.process.wait(timeout=PATIENCE) == 0
    finally:
        if server.process.poll() is None:
            server.process.kill()
    server._reader.join(timeout=5)
    log = "\n".join(server.lines)
    assert re.search(r"POST /v1/translate 200 2 sentences \d+\.\d ms", log), log
    assert "SIGTERM received" in log and "Traceback" not in log


def test_sigint_exits_0_and_a_missing_checkpoint_is_one_line_and_exit_1(tiny_trained_run, tmp_path):
    server = ServeProcess(tiny_trained_run)
    server.wait_ready()
    assert server.stop(signal.SIGINT) == 0
    missing = subprocess.run([sys.executable, "-m", "nmt_cli", "serve", "--checkpoint", str(tmp_path / "none"),
                              "--port", "0"], cwd=REPO, capture_output=True, text=True, timeout=PATIENCE)
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1] == f"error: the model could not be loaded: {tmp_path / 'none'}: " \
                                              "checkpoint not found"
    assert "Traceback" not in missing.stderr


def test_decoding_workers_are_forked_once_and_stopped_with_the_server(tiny_trained_run):
    server = ServeProcess(tiny_trained_run, "--workers", "2", "--set", "decode.max_sentences=1")
    try:
        server.wait_ready()
        status, first = server.request("/v1/translate", {"text": SENTENCES})
        workers = live_children(server.process.pid)
        assert status == 200 and len(workers) == 2
        status, second = server.request("/v1/translate", {"text": SENTENCES[::-1]})
        assert status == 200 and live_children(server.process.pid) == workers  # the same warm workers
        assert [t["text"] for t in second["translations"]] == [t["text"] for t in first["translations"]][::-1]
        assert server.stop(signal.SIGTERM) == 0
    finally:
        if server.process.poll() is None:
            server.process.kill()
    for pid in workers:  # reaped by the server before it exited, or gone with it
        assert not Path(f"/proc/{pid}").exists() or "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
