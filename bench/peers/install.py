"""Install the peer toolkits into their own virtualenvs under ``bench/.peers/``.

Every peer gets a venv of its own with pinned versions; a constraints file pins
``torch==2.13.0`` (the CPU wheel) for every pip call, through ``PIP_CONSTRAINT`` so that
it also reaches pip's isolated build environments (fairseq builds against torch).
Installing is idempotent: a peer whose ``installed.json`` exists is skipped. A failed
install is recorded in ``failed.json`` (with the tail of pip's output) and never stops
the others; the benchmark tables then say "not installed: <reason>".

The steps are the ones recorded in ``../shared/PEERS.md`` (from the repository root) as
working on Python 3.11: OpenNMT-py 3.5.1 needs ``--no-deps`` (it pins ``torch<2.3``) and its
other dependencies by hand; the official fairseq
0.12.2 does not import on Python 3.11, so the ``fairseq-fixed`` 0.12.3.1 build is used (a
long compile).

Usage: ``python bench/peers/install.py [--force] [PEER ...]`` (default: every peer).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PEERS_ROOT = Path(__file__).resolve().parent.parent / ".peers"
TORCH_PIN = "torch==2.13.0"


@dataclass(frozen=True)
class PeerSpec:
    """One peer: its venv, the pip steps that install it, the packages whose versions we report, and
    the commands of its venv that the bench runs (an install that lacks one is no install)."""

    name: str
    label: str
    steps: tuple[tuple[str, ...], ...]
    reported_packages: tuple[str, ...]
    commands: tuple[str, ...]
    needs_torch: bool = True


OPENNMT_DEPS = ("configargparse", "pyonmttok<2,>=1.37", "rapidfuzz", "pyahocorasick", "flask", "waitress",
                "spacy", "fasttext-wheel", "pyyaml", "sacrebleu", "six")

PEERS: dict[str, PeerSpec] = {
    spec.name: spec
    for spec in (
        PeerSpec(
            name="opennmt",
            label="OpenNMT-py 3.5.1",
            steps=(("--no-deps", "OpenNMT-py==3.5.1"), OPENNMT_DEPS),
            reported_packages=("OpenNMT-py", "torch"),
            commands=("onmt_train", "onmt_translate"),
        ),
        PeerSpec(
            name="fairseq",
            label="fairseq-fixed 0.12.3.1",
            steps=(("fairseq-fixed==0.12.3.1",),),
            reported_packages=("fairseq-fixed", "torch"),
            commands=("fairseq-preprocess", "fairseq-train", "fairseq-generate"),
        ),
        PeerSpec(
            name="eflomal",
            label="eflomal 2.0.0",
            steps=(("eflomal==2.0.0",),),
            reported_packages=("eflomal",),
            commands=("eflomal-align",),
            needs_torch=False,
        ),
    )
}


def venv_dir(peer: str) -> Path:
    """The virtualenv folder of ``peer``."""
    return PEERS_ROOT / peer


def venv_bin(peer: str, tool: str) -> Path:
    """Path of an executable (``python``, ``onmt_train``, ...) inside the peer's venv."""
    return venv_dir(peer) / "bin" / tool


def install_record(peer: str) -> dict | None:
    """The ``installed.json`` record of ``peer`` (versions, seconds), or None when not installed.

    A venv whose Python or one of whose commands is gone, or runs an interpreter that is gone (a
    venv moved from another checkout keeps its record, but not always its tools, and its scripts'
    ``#!`` lines name the old path), counts as not installed, so that ``install`` redoes it.
    """
    path = venv_dir(peer) / "installed.json"
    tools = [venv_bin(peer, tool) for tool in ("python", *PEERS[peer].commands)]
    if not path.is_file() or not all(_runnable(tool) for tool in tools):
        return None
    return json.loads(path.read_text())


def _runnable(tool: Path) -> bool:
    """Whether ``tool`` is an executable file whose ``#!`` interpreter, if it names one, is one too."""
    if not (tool.is_file() and os.access(tool, os.X_OK)):
        return False
    with tool.open("rb") as file:
        first_line = file.readline(4096)
    if not first_line.startswith(b"#!"):
        return True
    words = first_line[2:].split()
    interpreter = Path(os.fsdecode(words[0])) if words else None
    return interpreter is not None and interpreter.is_file() and os.access(interpreter, os.X_OK)


def failure_record(peer: str) -> dict | None:
    """The ``failed.json`` record of the last failed install of ``peer``, or None."""
    path = PEERS_ROOT / f"{peer}.failed.json"
    return json.loads(path.read_text()) if path.is_file() else None


def availability(peer: str) -> tuple[bool, str]:
    """(usable, text for a table): the installed version, or why the peer is missing."""
    record = install_record(peer)
    if record is not None:
        return True, PEERS[peer].label
    failure = failure_record(peer)
    if failure is not None:
        return False, f"not installed: install failed ({failure['error']})"
    return False, "not installed (run `python bench/peers/install.py`)"


def _write_json(path: Path, data: dict) -> None:
    """Atomic JSON write (temporary file + rename); the installer must not import the project."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.replace(handle.name, path)


def _pip(peer: str, args: tuple[str, ...], log) -> None:
    """Run ``pip install`` in the peer's venv with the torch constraint; raise on failure."""
    env = dict(os.environ, PIP_CONSTRAINT=str(PEERS_ROOT / "constraints.txt"))
    command = [str(venv_bin(peer, "python")), "-m", "pip", "install", "--quiet", *args]
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(args)} exited with {done.returncode}")


def _installed_versions(peer: str) -> dict[str, str]:
    """``pip freeze`` of the peer's venv as {package: version}."""
    frozen = subprocess.run([str(venv_bin(peer, "python")), "-m", "pip", "freeze"],
                            capture_output=True, text=True, check=True).stdout
    versions = {}
    for line in frozen.splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            versions[name.lower()] = version
    return versions


def _last_error_line(log_path: Path) -> str:
    """The last line of pip's output that names an error, for the one-line failure record."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1][:300]


def install(peer: str, force: bool = False) -> dict:
    """Install one peer (skipped when already installed unless ``force``); return its record.

    Failure is recorded in ``<peer>.failed.json`` and returned as ``{"error": ...}``, never raised.
    """
    spec = PEERS[peer]
    record = install_record(peer)
    if record is not None and not force:
        return record
    PEERS_ROOT.mkdir(parents=True, exist_ok=True)
    (PEERS_ROOT / "constraints.txt").write_text(TORCH_PIN + "\n")
    log_path = PEERS_ROOT / f"{peer}.install.log"
    started = time.perf_counter()
    with log_path.open("w") as log:
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv_dir(peer))],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
            if spec.needs_torch:
                _pip(peer, (TORCH_PIN,), log)
            for step in spec.steps:
                _pip(peer, step, log)
        except (RuntimeError, subprocess.CalledProcessError) as error:
            failure = {"peer": peer, "error": f"{error}: {_last_error_line(log_path)}",
                       "seconds": round(time.perf_counter() - started, 1), "log": str(log_path)}
            _write_json(PEERS_ROOT / f"{peer}.failed.json", failure)
            return failure
    versions = _installed_versions(peer)
    record = {"peer": peer, "label": spec.label,
              "seconds": round(time.perf_counter() - started, 1),
              "versions": {name: versions.get(name.lower(), "?") for name in spec.reported_packages},
              "python": sys.version.split()[0], "freeze": versions}
    _write_json(venv_dir(peer) / "installed.json", record)
    (PEERS_ROOT / f"{peer}.failed.json").unlink(missing_ok=True)
    return record


def main(argv: list[str] | None = None) -> int:
    """Install the named peers (default all) and print one line per peer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peers", nargs="*", help=f"peers to install (default: all of {', '.join(PEERS)})")
    parser.add_argument("--force", action="store_true", help="reinstall even when installed")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    for peer in args.peers or list(PEERS):
        record = install(peer, force=args.force)
        status = f"failed: {record['error']}" if "error" in record else f"ok {record['versions']}"
        print(f"{peer}: {status} ({record['seconds']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
