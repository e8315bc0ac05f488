"""Mistakes, faults and hostile files (issue 26): nothing lost, one clear line.

One test (or parametrized test) per numbered case of the issue, named ``test_caseNN_...``;
the property tests at the end feed the parsers of user text with generated input.
Read-only folders and full disks are real where the machine allows it (a read-only bind
mount or a small tmpfs in a private mount namespace, ``unshare``; ``RLIMIT_FSIZE``) and
injected at the operating-system call otherwise.
"""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nmt_cli.pharaoh import format_links, parse_links
from nmt_cli.checkpoint import checkpoint_dir_name, list_checkpoints, load_checkpoint, save_checkpoint
from nmt_cli.cli import cli
from nmt_cli.cli import align as _align_command  # noqa: F401  (registers the commands used below)
from nmt_cli.cli import evaluate as _evaluate_command  # noqa: F401
from nmt_cli.cli import prepare as _prepare_command  # noqa: F401
from nmt_cli.cli import train as _train_commands  # noqa: F401
from nmt_cli.cli import translate as _translate_command  # noqa: F401
from nmt_cli.config import Config, DataConfig, DecodeConfig, ModelConfig, load_config, parse_overrides
from nmt_cli.data.cleaning import PairCleaner
from nmt_cli.data.prepared import PreparedData
from nmt_cli.data.sources import JsonlCorpus, TsvCorpus
from nmt_cli.decoding import Translator, generate
from nmt_cli.errors import NmtError
from nmt_cli.models import build_model
from nmt_cli.training import train
from tests.test_translator import TINY_MODEL, build_checkpoint, tiny_tokenizer

REPO = Path(__file__).resolve().parents[1]
TINY = ["--set", "model.d_model=32", "--set", "model.heads=2", "--set", "model.ffn_dim=64",
        "--set", "model.encoder_layers=1", "--set", "model.decoder_layers=1", "--set", "train.num_threads=1",
        "--set", "train.valid_every=0", "--set", "train.early_stop_metric=loss", "--max-tokens", "300"]
TINY_SETTINGS = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
                 "model.decoder_layers": 1, "train.num_threads": 1, "train.valid_every": 0,
                 "train.early_stop_metric": "loss", "train.max_tokens": 300, "train.log_every": 100}
SYNTHETIC = ["--set", "data.source=synthetic", "--set", "data.synthetic_valid_size=30",
             "--set", "data.synthetic_test_size=10", "--set", "data.vocab_size=300"]


# ---- helpers ------------------------------------------------------------------------------------------


def invoke(*args: str, **kwargs):
    """``nmt ARGS`` in this process (exceptions other than exits are kept in ``result.exception``)."""
    return CliRunner().invoke(cli, [str(arg) for arg in args], **kwargs)


def nmt_process(*args: str, preexec=None, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    """``python -m nmt_cli ARGS`` as a child process (stdout and stderr piped, text); ``env`` adds
    to or replaces variables of the test's environment."""
    return subprocess.Popen([sys.executable, "-m", "nmt_cli", *map(str, args)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec,
                            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, **kwargs)


def run_nmt(*args: str, preexec=None, timeout: float = 240) -> subprocess.CompletedProcess:
    process = nmt_process(*args, preexec=preexec)
    stdout, stderr = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def error_line(stderr: str, *needles: str) -> str:
    """The one ``error:`` line of a failed command (no traceback), which must contain ``needles``."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    for needle in needles:
        assert needle in errors[0], stderr
    return errors[0]


def hidden_entries(folder: Path) -> list[str]:
    """Temporaries, locks and other dot-files left in ``folder``."""
    return sorted(entry.name for entry in folder.iterdir() if entry.name.startswith("."))


def tree_snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def wait_for(condition, timeout: float = 120.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended first: {process.communicate()}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def run_dir(tiny_prepared, tmp_path_factory) -> Path:
    """A tiny run with checkpoints at steps 2 and 4 (copy it before changing it)."""
    run = tmp_path_factory.mktemp("faults") / "run"
    config = Config().with_overrides({**TINY_SETTINGS, "train.max_steps": 4, "train.save_every": 2,
                                      "train.keep_last": 5})
    train(config, tiny_prepared, run, stream=open(os.devnull, "w"))
    return run


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("faults-ckpt"))


def _can_mount() -> str | None:
    """None when this process may mount inside a private namespace, else why not."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /mnt && touch /mnt/x"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot mount in a private namespace: {probe.stderr.strip()}"


MOUNT_PROBLEM = _can_mount()
needs_mount = pytest.mark.skipif(MOUNT_PROBLEM is not None, reason=str(MOUNT_PROBLEM))


def in_namespace(script: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run a shell ``script`` in a private mount namespace ($NMT runs the nmt command)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NMT": f"{sys.executable} -m nmt_cli"}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=timeout)


# ---- 1. nmt average never deletes what it did not write -------------------------------------------------


@pytest.mark.parametrize("out", ["other-files", "the-run", "an-input-checkpoint"])
def test_case01_average_refuses_an_out_holding_other_files_or_its_inputs(run_dir, tmp_path, out):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    inputs = [run]
    if out == "other-files":
        target = tmp_path / "mine"
        target.mkdir()
        (target / "precious.txt").write_text("keep me\n")
    elif out == "the-run":
        target = run
    else:
        inputs = list_checkpoints(run)
        target = inputs[-1]
    before = tree_snapshot(tmp_path)
    result = invoke("average", *inputs, "--out", target)
    assert result.exit_code == 1
    error_line(result.stderr, str(target))
    assert tree_snapshot(tmp_path) == before  # nothing deleted, nothing changed
    assert not hidden_entries(target.parent)


def test_case01_average_replaces_its_own_earlier_output(run_dir, tmp_path):
    out = tmp_path / "averaged"
    assert invoke("average", run_dir, "--out", out, "--last", "1").exit_code == 0
    assert load_checkpoint(out).state["averaged"] == [str(list_checkpoints(run_dir)[-1])]
    result = invoke("average", run_dir, "--out", out)
    assert result.exit_code == 0, result.stderr
    assert len(load_checkpoint(out).state["averaged"]) == 2
    assert hidden_entries(tmp_path) == []


# ---- 2. devices, FIFOs and symlinks are written through --------------------------------------------------


@pytest.mark.parametrize("kind", ["character-device", "fifo", "symlink"])
def test_case02_translate_writes_through_devices_fifos_and_symlinks(checkpoint, tmp_path, kind):
    source = tmp_path / "in.txt"
    source.write_text("der mann sieht die katze\nfrau\n", encoding="utf-8")
    expected = Translator.from_checkpoint(checkpoint).translate(["der mann sieht die katze", "frau"])
    output = tmp_path / "out"
    received: list[bytes] = []
    reader = None
    if kind == "character-device":
        try:
            os.mknod(output, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a private /dev/null
        except PermissionError:
            pytest.skip("creating a device node needs root (CAP_MKNOD)")
    elif kind == "fifo":
        os.mkfifo(output)
        reader = threading.Thread(target=lambda: received.append(output.read_bytes()), daemon=True)
        reader.start()
    else:
        (tmp_path / "real.txt").write_text("old\n")
        output.symlink_to("real.txt")
    result = invoke("translate", "--checkpoint", checkpoint, "--input", source, "--output", output)
    assert result.exit_code == 0, result.stderr
    text = "".join(h.text + "\n" for h in expected)
    if kind == "character-device":
        assert stat.S_ISCHR(os.lstat(output).st_mode)
        assert not (tmp_path / "out.signature").exists()  # nothing created beside a device
    elif kind == "fifo":
        reader.join(timeout=30)
        assert stat.S_ISFIFO(os.lstat(output).st_mode)
        assert received == [text.encode("utf-8")]
    else:
        assert output.is_symlink() and os.readlink(output) == "real.txt"
        assert (tmp_path / "real.txt").read_text(encoding="utf-8") == text
    assert hidden_entries(tmp_path) == []


@pytest.mark.slow  # nmt in subprocesses
def test_case02_translate_appends_through_a_descriptor_alias(checkpoint, tmp_path):
    """``-o /dev/fd/1`` with standard output appended to a file (``>> out.txt``) adds to it."""
    source = tmp_path / "in.txt"
    source.write_text("der mann sieht die katze\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    out.write_text("first line\n")
    with open(out, "ab") as appended:
        done = subprocess.run([sys.executable, "-m", "nmt_cli", "translate", "--checkpoint", str(checkpoint),
                               "--input", str(source), "--output", "/dev/fd/1"], cwd=REPO, stdout=appended,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    [expected] = Translator.from_checkpoint(checkpoint).translate(["der mann sieht die katze"])
    assert out.read_text(encoding="utf-8") == f"first line\n{expected.text}\n"


def test_case02_plot_writes_through_a_device(run_dir, tmp_path):
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")
    result = invoke("plot", run_dir, "--out", device)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISCHR(os.lstat(device).st_mode)


# ---- 3. nmt train --out never takes over prepared data or a checkpoint ---------------------------------------


@pytest.mark.parametrize("out", ["prepared-data", "a-checkpoint"])
def test_case03_train_refuses_an_out_that_is_not_a_run(tiny_prepared, run_dir, tmp_path, out):
    if out == "prepared-data":
        target = tmp_path / "data"
        shutil.copytree(tiny_prepared, target)
        needle = "manifest.json"
    else:
        target = tmp_path / "step"
        shutil.copytree(list_checkpoints(run_dir)[-1], target)
        needle = "checkpoint"
    before = tree_snapshot(target)
    result = invoke("train", "--data", tiny_prepared, "--out", target, *TINY, "--set", "train.max_steps=1")
    assert result.exit_code == 1
    error_line(result.stderr, str(target), needle)
    assert tree_snapshot(target) == before


# ---- 4. one writer per output; what a killed writer left is removed ----------------------------------------


def _prepare_args(out: Path, pairs: int) -> list[str]:
    return ["prepare", *SYNTHETIC, "--set", f"data.synthetic_train_size={pairs}", "--out", str(out), "--quiet"]


@pytest.mark.slow  # nmt in subprocesses
def test_case04_a_second_prepare_into_the_same_output_fails_at_once(tmp_path):
    out = tmp_path / "data"
    first = nmt_process(*_prepare_args(out, 30000))
    try:
        wait_for(lambda: any(name.startswith(".data.") for name in hidden_entries(tmp_path)), process=first)
        second = run_nmt(*_prepare_args(out, 30000), "--force", timeout=60)
        assert second.returncode == 1
        error_line(second.stderr, str(out), f"in use by pid {first.pid}")
    finally:
        stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    data = PreparedData(out)
    data.verify()  # whole and consistent
    assert len(data.split("train")) == data.manifest["splits"]["train"]["kept"]
    assert hidden_entries(tmp_path) == []


@pytest.mark.slow  # nmt in subprocesses
def test_case04_a_second_train_into_the_same_run_fails_at_once(tiny_prepared, tmp_path):
    run = tmp_path / "run"
    first = nmt_process("train", "--data", tiny_prepared, "--out", run, *TINY, "--set", "train.max_steps=100000")
    try:
        wait_for(lambda: (run / "train.log").exists(), process=first)
        second = invoke("train", "--data", tiny_prepared, "--out", run, *TINY, "--set", "train.max_steps=1")
        assert second.exit_code == 1
        error_line(second.stderr, str(run), f"in use by pid {first.pid}")
    finally:
        first.send_signal(signal.SIGINT)  # the first one saves its step and stops
        first.communicate(timeout=120)
    assert first.returncode == 130 and hidden_entries(tmp_path) == []  # its lock went with it


@pytest.mark.slow  # nmt in subprocesses
def test_case04_the_next_prepare_removes_what_a_killed_one_left(tmp_path):
    out = tmp_path / "data"
    killed = nmt_process(*_prepare_args(out, 30000))
    wait_for(lambda: any(name.startswith(".data.") and name.endswith(".tmp") for name in hidden_entries(tmp_path)),
             process=killed)
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    assert any(name.endswith(".tmp") for name in hidden_entries(tmp_path))  # left behind by the kill
    result = run_nmt(*_prepare_args(out, 500))
    assert result.returncode == 0, result.stderr
    assert hidden_entries(tmp_path) == []
    PreparedData(out).verify()


# ---- 5. read-only output folders: one line, for every command that writes ------------------------------------


READ_ONLY_COMMANDS = {
    "prepare": lambda ro, data, run, ckpt: ["prepare", *SYNTHETIC, "--set", "data.synthetic_train_size=200",
                                             "--out", f"{ro}/data", "--quiet"],
    "train": lambda ro, data, run, ckpt: ["train", "--data", data, "--out", f"{ro}/run", *TINY,
                                           "--set", "train.max_steps=1"],
    "translate": lambda ro, data, run, ckpt: ["translate", "--checkpoint", ckpt, "--input", f"{data}/test.de",
                                               "--output", f"{ro}/test.hyp"],
    "align": lambda ro, data, run, ckpt: ["align", "--checkpoint", ckpt, "--src", f"{data}/test.de",
                                           "--tgt", f"{data}/test.en", "--out", f"{ro}/align"],
    "average": lambda ro, data, run, ckpt: ["average", run, "--out", f"{ro}/averaged"],
    "plot": lambda ro, data, run, ckpt: ["plot", f"{ro}/run"],
}


@pytest.mark.slow  # nmt in subprocesses
@needs_mount
@pytest.mark.parametrize("command", sorted(READ_ONLY_COMMANDS))
def test_case05_read_only_output_folder_gives_one_line(tiny_prepared, run_dir, checkpoint, tmp_path, command):
    """A real read-only file system: the folder is bind-mounted read-only in a private namespace."""
    read_only = tmp_path / "ro"
    read_only.mkdir()
    shutil.copytree(run_dir, read_only / "run")  # plot redraws into the run directory
    args = READ_ONLY_COMMANDS[command](read_only, tiny_prepared, run_dir, checkpoint)
    quoted = " ".join(f"'{arg}'" for arg in args)
    done = in_namespace(f"mount --bind '{read_only}' '{read_only}' && mount -o remount,bind,ro '{read_only}' "
                        f"&& exec $NMT {quoted}")
    assert done.returncode == 1, done.stderr
    error_line(done.stderr, str(read_only), "Read-only file system")


@pytest.mark.parametrize("command", ["prepare", "translate", "average"])
def test_case05_permission_denied_gives_one_line(tiny_prepared, run_dir, checkpoint, tmp_path, monkeypatch, command):
    """Injected: creating any file under the folder fails with EACCES (root ignores chmod)."""
    denied = tmp_path / "denied"
    denied.mkdir()
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if str(path).startswith(str(denied)) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    args = READ_ONLY_COMMANDS[command](denied, tiny_prepared, run_dir, checkpoint)
    result = invoke(*args)
    assert result.exit_code == 1, result.stderr
    error_line(result.stderr, str(denied), "Permission denied")
    assert list(denied.iterdir()) == []


# ---- 6. full disks: one line, the previous output intact, no temporaries -----------------------------------------


def _file_size_limit(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.slow  # nmt in subprocesses
@pytest.mark.parametrize("command", ["prepare", "translate"])
def test_case06_file_too_large_keeps_the_previous_output(tiny_prepared, checkpoint, tmp_path, command):
    """RLIMIT_FSIZE: writing past 40 kB (10 kB) fails with EFBIG, as a full disk fails with ENOSPC."""
    if command == "prepare":
        out = tmp_path / "data"
        assert run_nmt(*_prepare_args(out, 100)).returncode == 0
        args = _prepare_args(out, 3000)
    else:
        out = tmp_path / "out.txt"
        out.write_text("previous\n")
        source = tmp_path / "in.txt"
        source.write_text("der mann sieht die katze im park\n" * 3000, encoding="utf-8")
        args = ["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(out),
                "--beam", "1", "--chunk-size", "50"]
    before = tree_snapshot(tmp_path)
    done = run_nmt(*args, preexec=_file_size_limit(40_000 if command == "prepare" else 10_000))
    assert done.returncode == 1, done.stderr
    error_line(done.stderr, str(out), "File too large")
    assert tree_snapshot(tmp_path) == before
    assert hidden_entries(tmp_path) == []


@pytest.mark.slow  # nmt in subprocesses
@needs_mount
def test_case06_disk_full_during_translate_keeps_the_previous_output(checkpoint, tmp_path):
    """A real ENOSPC: the output folder is a 16 kB tmpfs in a private namespace."""
    source = tmp_path / "in.txt"
    source.write_text("der mann sieht die katze im park\n" * 3000, encoding="utf-8")
    small = tmp_path / "small"
    small.mkdir()
    done = in_namespace(
        f"mount -t tmpfs -o size=16k tmpfs '{small}' && echo previous > '{small}/out.txt' && "
        f"$NMT translate --checkpoint '{checkpoint}' --input '{source}' --output '{small}/out.txt' --beam 1 --chunk-size 50; "
        f"echo \"rc=$?\"; ls -A '{small}'; cat '{small}/out.txt'")
    error_line(done.stderr, f"{small}/out.txt", "No space left on device")
    assert done.stdout.splitlines() == ["rc=1", "out.txt", "previous"], done.stdout


def test_case06_failed_checkpoint_write_leaves_the_run_resumable(tiny_prepared, tmp_path, monkeypatch):
    """Injected at the write: the second checkpoint's optimizer.pt hits ENOSPC after 1000 bytes
    (inside torch.save, which wraps the OSError in a RuntimeError)."""
    run = tmp_path / "run"
    saves = []
    real_save = torch.save

    class FillingDisk(io.RawIOBase):
        def __init__(self, handle):
            self.handle, self.written = handle, 0

        def writable(self) -> bool:
            return True

        def write(self, data) -> int:
            self.written += len(data)
            if self.written > 1000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.handle.write(data)

    def filling_save(obj, handle, *args, **kwargs):
        saves.append(handle)
        return real_save(obj, FillingDisk(handle) if len(saves) == 2 else handle, *args, **kwargs)

    monkeypatch.setattr(torch, "save", filling_save)
    args = ["train", "--data", tiny_prepared, "--out", run, *TINY, "--set", "train.max_steps=3",
            "--set", "train.save_every=1", "--set", "train.log_every=1"]
    result = invoke(*args)
    assert result.exit_code == 1, result.stderr
    error_line(result.stderr, str(run / "checkpoints" / checkpoint_dir_name(2)), "No space left on device")
    assert [path.name for path in list_checkpoints(run)] == [checkpoint_dir_name(1)]
    assert hidden_entries(run / "checkpoints") == []
    assert load_checkpoint(run).step == 1
    monkeypatch.setattr(torch, "save", real_save)
    resumed = invoke(*args)
    assert resumed.exit_code == 0, resumed.stderr
    assert "resuming from step-00000001" in (run / "train.log").read_text()
    assert load_checkpoint(run).step == 3


# ---- 7. damaged prepared data is found when it is opened -------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "changed"])
def test_case07_damaged_token_array_is_named_before_training(tiny_prepared, tmp_path, damage):
    data = tmp_path / "data"
    shutil.copytree(tiny_prepared, data)
    array = data / "train.src.00000.bin"
    content = bytearray(array.read_bytes())
    if damage == "truncated":
        array.write_bytes(content[: len(content) - 100])
    else:
        content[len(content) // 2] ^= 0xFF  # same size, one token id changed
        array.write_bytes(bytes(content))
    run = tmp_path / "run"
    result = invoke("train", "--data", data, "--out", run, *TINY, "--set", "train.max_steps=2")
    assert result.exit_code == 1, result.stderr
    error_line(result.stderr, str(array))
    assert not (run / "train.log").exists()  # refused before training started


# ---- 8. hostile or broken checkpoint files -----------------------------------------------------------------------


class _RunsCode:
    """Pickles to a call of os.system: loading it must never run it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("broken", ["hostile-optimizer.pt", "truncated-optimizer.pt", "state.json",
                                    "model.safetensors", "spm.model"])
def test_case08_bad_checkpoint_file_is_named_in_one_line(tiny_prepared, run_dir, tmp_path, broken):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    newest = list_checkpoints(run)[-1]
    marker = tmp_path / "code-ran"
    name = broken.split("-")[-1]
    if broken == "hostile-optimizer.pt":
        torch.save({"optimizer": {"state": {}, "param_groups": []}, "payload": _RunsCode(marker)}, newest / name)
    elif broken == "truncated-optimizer.pt":
        (newest / name).write_bytes((newest / name).read_bytes()[:500])
    elif broken == "state.json":
        (newest / name).write_text('{"format": 2, "step": 4}\n')  # valid JSON, no config
    else:
        (newest / name).write_bytes(b"not a model at all" * 10)
    if name == "optimizer.pt":  # read when training resumes
        result = invoke("train", "--data", tiny_prepared, "--out", run, *TINY, "--set", "train.max_steps=6",
                        "--set", "train.save_every=2", "--set", "train.keep_last=5")
    else:
        result = invoke("translate", "--checkpoint", run, input="der mann\n")
    assert result.exit_code == 1, result.stderr
    error_line(result.stderr, str(newest / name), "not a valid checkpoint")
    assert not marker.exists()


# ---- 9. every output gets the umask's permissions ----------------------------------------------------------------


@pytest.mark.slow  # nmt in subprocesses
def test_case09_every_output_gets_the_umask_permissions(tmp_path):
    umask = 0o002
    work = tmp_path / "work"
    data, run, out = work / "data", work / "run", work / "out"
    steps = [
        _prepare_args(data, 200),
        ["train", "--data", data, "--out", run, *TINY, "--set", "train.max_steps=2", "--set", "train.save_every=1"],
        ["average", run, "--out", out / "averaged"],
        ["translate", "--checkpoint", run, "--input", data / "test.de", "--output", out / "test.hyp"],
        ["align", "--checkpoint", run, "--src", data / "test.de", "--tgt", data / "test.en", "--out", out / "align",
         "--heatmaps", "1"],
        ["plot", run, "--out", out / "curve.png"],
    ]
    for args in steps:
        done = run_nmt(*args, preexec=lambda: os.umask(umask))
        assert done.returncode == 0, (args, done.stderr)
    wrong = {str(path.relative_to(work)): oct(stat.S_IMODE(path.stat().st_mode))
             for path in work.rglob("*")
             if stat.S_IMODE(path.stat().st_mode) != (0o777 if path.is_dir() else 0o666) & ~umask}
    assert wrong == {}


# ---- 10. inputs longer than the model takes ---------------------------------------------------------------------


@pytest.mark.parametrize("model", [["--set", "model.positions=learned", "--set", "model.max_positions=8"],
                                   ["--set", "model.arch=rnn_luong", "--set", "model.attention=location",
                                    "--set", "model.embed_dim=16", "--set", "model.hidden_size=16",
                                    "--set", "model.max_positions=8"]],
                         ids=["learned-positions", "location-attention"])
def test_case10_training_checks_the_longest_pair_at_start_up(tiny_prepared, tmp_path, model):
    run = tmp_path / "run"
    result = invoke("train", "--data", tiny_prepared, "--out", run, *TINY, *model, "--set", "train.max_steps=50")
    assert result.exit_code == 1, result.stderr
    line = error_line(result.stderr, f"{tiny_prepared}/train.", "model.max_positions")
    number = int(line.split(":")[2])
    data = PreparedData(tiny_prepared)
    lengths = data.split("train").src.lengths if line.split(":")[1].endswith(".de") else data.split("train").tgt.lengths
    assert lengths[number - 1] == lengths.max() > 7
    assert not (run / "train.log").exists()


@pytest.fixture(scope="module")
def short_model(tmp_path_factory) -> Path:
    """Learned positions for at most 6 tokens."""
    tokenizer = tiny_tokenizer()
    config = Config(model=ModelConfig(arch="transformer", positions="learned", max_positions=6, **TINY_MODEL),
                    decode=DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=50))
    torch.manual_seed(0)
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    path = tmp_path_factory.mktemp("short") / checkpoint_dir_name(1)
    return save_checkpoint(path, model.state_dict(), config, tokenizer, {"step": 1})


LONG = "der mann sieht die katze im park und der hund läuft schnell"


@pytest.mark.parametrize("choice", [None, "error", "truncate", "skip"])
def test_case10_translate_names_the_long_line_and_offers_a_choice(short_model, tmp_path, choice):
    source = tmp_path / "in.txt"
    source.write_text(f"frau\n{LONG}\nhund\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    extra = ["--on-long-line", choice] if choice else []
    result = invoke("translate", "--checkpoint", short_model, "--input", source, "--output", output, *extra)
    if choice in (None, "error"):
        assert result.exit_code == 1
        error_line(result.stderr, f"{source}:2:", "--on-long-line")
        assert not output.exists() and hidden_entries(tmp_path) == []
        return
    assert result.exit_code == 0, result.stderr
    lines = output.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 4 and lines[3] == ""
    assert f"warning: {source}:2:" in result.stderr
    translator = Translator.from_checkpoint(short_model, overrides={"decode.on_long_line": choice})
    expected = translator.translate(["frau", LONG, "hund"])
    assert lines[:3] == [h.text for h in expected]
    assert expected[1].long_input == {"truncate": "truncated", "skip": "skipped"}[choice]
    if choice == "truncate":  # the first six tokens, translated
        [first_six] = generate(translator.model, [translator.tokenizer.encode_src(LONG)[:6]], translator.decode)
        assert lines[1] == translator.tokenizer.decode_tgt(first_six.tokens)
    else:
        assert lines[1] == ""


# ---- 11. empty inputs and unreadable gold files ------------------------------------------------------------------


def test_case11_evaluate_with_empty_files_is_an_error(tmp_path):
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("")
    ref.write_text("")
    result = invoke("evaluate", "--hyp", hyp, "--ref", ref)
    assert result.exit_code == 1
    error_line(result.stderr, str(hyp), "empty")


@pytest.mark.parametrize("gold", ["", "\n\n", "0-0 1-1\n\xff\xfe 2-2\n", "0-0 " + "9" * 5000 + "-1\n"],
                         ids=["empty", "no-links", "invalid-utf8", "huge-index"])
def test_case11_align_score_rejects_empty_and_unreadable_gold(tmp_path, gold):
    gold_path, hyp_path = tmp_path / "gold", tmp_path / "hyp"
    gold_path.write_bytes(gold.encode("latin-1") if "\xff" in gold else gold.encode())
    hyp_path.write_text("0-0\n" * gold.count("\n"))
    result = invoke("align", "score", "--gold", gold_path, "--hyp", hyp_path)
    assert result.exit_code == 1, result.stdout
    error_line(result.stderr, str(gold_path))


# ---- 12. a smaller vocabulary than asked for is reported --------------------------------------------------------


def test_case12_prepare_reports_a_smaller_vocabulary(tmp_path):
    out = tmp_path / "data"
    result = invoke(*_prepare_args(out, 200)[:-1], "--set", "data.vocab_size=5000")
    assert result.exit_code == 0, result.stderr
    tokenizer = json.loads((out / "manifest.json").read_text())["tokenizer"]
    assert tokenizer["vocab_size_requested"] == 5000 and tokenizer["src_vocab_size"] < 5000
    assert f"fewer pieces (joint {tokenizer['src_vocab_size']}) than data.vocab_size=5000" in result.stdout


# ---- 13. Ctrl-C and SIGTERM: exit 130, the output absent or whole -----------------------------------------------


@pytest.mark.slow  # nmt in subprocesses
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_case13_interrupted_translate_exits_130_without_a_partial_output(checkpoint, tmp_path, signum):
    source = tmp_path / "in.txt"
    source.write_text("der mann sieht die katze im park\n" * 20000, encoding="utf-8")
    output = tmp_path / "out.txt"
    process = nmt_process("translate", "--checkpoint", checkpoint, "--input", source, "--output", output,
                          "--chunk-size", "100")

    def partial_output_written() -> bool:
        return any(entry.name.endswith(".tmp") and entry.stat().st_size > 0
                   for entry in tmp_path.iterdir() if entry.name.startswith(".out.txt."))

    wait_for(partial_output_written, process=process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Aborted!" not in stderr and "Traceback" not in stderr
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["in.txt"]


def test_case13_keyboard_interrupt_in_any_command_exits_130():
    @cli.command("fault-interrupt", hidden=True)
    def interrupted() -> None:
        raise KeyboardInterrupt

    try:
        result = invoke("fault-interrupt")
    finally:
        cli.commands.pop("fault-interrupt")
    assert result.exit_code == 130
    assert result.stderr.strip() == "interrupted"


INTERRUPTED_IN_STRING_EXEC = """
from nmt_cli.cli import cli

@cli.command("fault-interrupt-in-exec", hidden=True)
def interrupted() -> None:
    exec("raise KeyboardInterrupt", {})  # as a Ctrl-C landing while a namedtuple's methods are built
"""


@pytest.mark.slow  # nmt in subprocesses
def test_case13_python_m_exits_130_after_an_interrupt_inside_string_exec(tmp_path):
    """CI saw ``python -m nmt_cli train`` die by SIGINT (-2) instead of exiting 130: CPython's
    ``-m`` runner re-raises SIGINT at exit when string-exec'd code ever ended in a caught
    KeyboardInterrupt; nmt_cli/__main__.py clears that."""
    (tmp_path / "sitecustomize.py").write_text(INTERRUPTED_IN_STRING_EXEC, encoding="utf-8")
    process = nmt_process("fault-interrupt-in-exec", env={"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])})
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.strip() == "interrupted"


# ---- 14. the gloo process group is gone before a torchrun worker exits ---------------------------------------

WORKER = """
import io, os, sys
from nmt_cli.config import load_config
from nmt_cli.training import train
train(load_config(sys.argv[1]), sys.argv[2], sys.argv[3] + os.environ["RANK"], device="cpu", stream=io.StringIO())
threads = [open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")]
left = sorted(name for name in threads if "gloo" in name)
with open(sys.argv[3] + ".report" + os.environ["RANK"], "w") as report:  # one file a rank: printed lines interleave
    report.write(f"rank {os.environ['RANK']} gloo threads left: {left}")
"""


@pytest.mark.slow
def test_case14_training_under_torchrun_leaves_no_gloo_threads_running_into_exit(tiny_prepared, tmp_path):
    """After train() the process group is really destroyed: no gloo thread is left to race
    the interpreter's shutdown (tests/test_distributed.py failed now and then at exit)."""
    config = tmp_path / "ddp.yaml"
    config.write_text(Config().with_overrides({**TINY_SETTINGS, "train.max_steps": 2}).to_yaml())
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(worker), str(config), str(tiny_prepared), str(tmp_path / "run")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [(tmp_path / f"run.report{rank}").read_text() for rank in (0, 1)]
    assert reports == ["rank 0 gloo threads left: []", "rank 1 gloo threads left: []"]


# ---- beyond the list: unexpected errors and --debug ------------------------------------------------------------------


@pytest.fixture
def failing_command():
    @cli.command("fault-bug", hidden=True)
    def bug() -> None:
        raise RuntimeError("something inside broke\nsecond line")

    yield
    cli.commands.pop("fault-bug")


def test_an_unexpected_error_is_one_line_with_a_hint(failing_command):
    result = invoke("fault-bug")
    assert result.exit_code == 1
    error_line(result.stderr, "RuntimeError: something inside broke", "--debug")


@pytest.mark.parametrize("switch", [["--debug"], "NMT_DEBUG"])
def test_debug_shows_the_traceback(failing_command, tmp_path, switch):
    args, env = (["--debug"], {}) if switch != "NMT_DEBUG" else ([], {"NMT_DEBUG": "1"})
    result = invoke(*args, "fault-bug", env=env)
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr and "error: unexpected RuntimeError" in result.stderr
    user_error = invoke(*args, "evaluate", "--hyp", tmp_path / "missing", "--ref", tmp_path / "missing", env=env)
    assert "Traceback" in user_error.stderr and "error: " in user_error.stderr


# ---- beyond the list: parsers of user text raise NmtError or succeed -------------------------------------------------

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
LINK_TEXT = st.text(alphabet=st.sampled_from("0123456789-p?x \t\u00a0\u0663\ufeff"), max_size=40) | st.text(max_size=40)


@PROPERTY
@given(LINK_TEXT)
@example("0-0 " + "9" * 5000 + "-1")
def test_pharaoh_lines_parse_or_raise_nmt_error(text):
    try:
        links = parse_links(text, "gold.txt", 3)
    except NmtError as exc:
        assert str(exc).startswith("gold.txt:3: ") and "\n" not in str(exc)
        return
    assert parse_links(format_links(links.sure, links.possible)) == links


@PROPERTY
@given(st.lists(st.text(max_size=30) | st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
    ["train.max_steps", "model.arch", "data.vocab_size", "decode.beam_size", "train.adam_betas", "x", "train."]),
    st.text(max_size=20)), max_size=4))
@example(["train.max_steps=[[[[1]]]]"])
@example(["train.max_steps=" + "[" * 5000])
@example(["train.adam_betas={a: 1}"])
@example(["train.max_steps=7", "decode.alpha=1", "train.adam_betas=[0.5, 0.9]", "model.arch=rnn_luong"])
def test_set_overrides_parse_or_raise_nmt_error(items):
    try:
        overrides = parse_overrides(items)
        config = Config().with_overrides(overrides)
    except NmtError as exc:
        problems = str(exc).splitlines()
        assert problems and all(line.startswith(("bad --set", "bad override key", "unknown config key",
                                                 "config key")) for line in problems)
        return
    assert_holds_the_given_values(config, overrides)


def assert_holds_the_given_values(config: Config, given: dict) -> None:
    """``config`` keeps every given ``section.key`` value (as its field's type reads it: a YAML
    int for a float key, a list for a tuple key, None for an empty string) and rebuilds to
    itself from its own dict."""
    settings = config.to_dict()
    for dotted, value in given.items():
        section, _, key = dotted.partition(".")
        held = settings[section][key]
        if isinstance(held, list):
            assert held == list(value)
        elif isinstance(held, str):
            assert held == ("" if value is None else str(value))
        else:
            assert held == value and isinstance(value, bool) == isinstance(held, bool)
    assert Config.from_dict(settings) == config


@PROPERTY
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8) | st.integers(), children,
                                                                       max_size=3),
    max_leaves=12).map(lambda value: yaml.safe_dump(value).encode()))
@example(b"1: 2\ntrain: {}\n")
@example(b"train:\n  max_steps: 7\n  lr: 1\nmodel:\n  arch: rnn_luong\ndata:\n  path:\n")
@example(b"1: 2\nfoo: 3\n")
@example(b"train:\n  max_steps: \xff\n")
@example(b"[" * 5000)
def test_config_files_load_or_raise_nmt_error(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_bytes(content)
    try:
        config = load_config(path)
    except NmtError as exc:
        problems = str(exc).splitlines()
        assert problems and all(line.startswith(str(path)) for line in problems)
        return
    raw = yaml.safe_load(content) or {}
    assert_holds_the_given_values(config, {f"{section}.{key}": value for section, values in raw.items()
                                           for key, value in (values or {}).items()})


@PROPERTY
@given(st.lists(st.binary(max_size=40) | st.text(max_size=40).map(str.encode), max_size=6),
       st.sampled_from(["tsv", "jsonl"]), st.sampled_from(["error", "skip"]))
@example([b"[" * 100000], "jsonl", "skip")
@example([b'{"de": 1' + b"0" * 5000 + b', "en": "x"}'], "jsonl", "skip")
@example([b"de\ten", b"a\tb\tc", b"\xff\tx"], "tsv", "skip")
def test_tsv_and_jsonl_sources_read_or_raise_nmt_error(tmp_path_factory, lines, kind, on_invalid):
    folder = tmp_path_factory.mktemp("source")
    (folder / f"train.{kind}").write_bytes(b"\n".join(lines) + b"\n")
    data = DataConfig(source=kind, path=str(folder), on_invalid=on_invalid)
    corpus = (TsvCorpus if kind == "tsv" else JsonlCorpus)(data)
    try:
        pairs = list(PairCleaner(data, training=True).clean(corpus.pairs("train")))
    except NmtError as exc:
        assert "\n" not in str(exc)
        return
    assert all(isinstance(pair.source, str) and isinstance(pair.target, str) for pair in pairs)
