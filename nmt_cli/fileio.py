"""Every named output the toolkit writes goes through here: one rule for all commands.

* A regular file is written under a temporary name next to it and renamed over it
  when the work succeeds, so it appears whole or not at all; a symbolic link keeps
  pointing where it did and its target is replaced the same way.
* Character devices, FIFOs, sockets and the aliases of open descriptors
  (``/dev/stdout``, ``/dev/fd/N``, ``/proc/...``) are written in place: renaming a file
  over ``/dev/null`` would destroy the device.
* A directory output (prepared data, a checkpoint) is built under a temporary name and
  swapped in whole. An existing directory is replaced only when everything in it is
  something the same command writes; a directory that holds anything else, or that
  holds the command's own inputs, is refused and nothing is deleted.
* One writer per output at a time: a second one fails at once, naming the first one's
  pid (an ``flock`` on ``.NAME.lock`` beside the output, removed afterwards).
  Temporaries carry their writer's pid; the next writer of the same output removes
  those whose writer is gone (killed part-way).
* Every file and directory gets the permissions a plain ``open``/``mkdir`` would give
  under the user's umask, whoever wrote the bytes.
* A write that fails in the operating system (disk full, read-only, permission denied,
  file too large) becomes one :class:`~nmt_cli.errors.NmtError` line naming the output
  and the reason; the previous output stays as it was and no temporary is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from nmt_cli.errors import NmtError

__all__ = [
    "atomic_open", "open_output", "atomic_write_text", "atomic_write_bytes", "atomic_write_json",
    "atomic_directory", "WriteError", "write_failure", "check_not_input", "output_lock", "writes_in_place",
]

PathLike = str | os.PathLike
#: aliases of open descriptors: written in place, whatever they point to
_DESCRIPTOR_ALIASES = ("/proc/", "/dev/fd/", "/dev/stdout", "/dev/stderr")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _default_mode(directory: bool) -> int:
    """Permissions a plain ``open``/``mkdir`` would give (mkstemp/mkdtemp use 0600/0700)."""
    return (0o777 if directory else 0o666) & ~_umask()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---- errors -------------------------------------------------------------------------------------


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc``: itself, or the one a library writer wrapped (torch.save
    raises a RuntimeError whose context is the file object's OSError)."""
    if isinstance(exc, OSError):
        return exc
    inner = exc.__cause__ or exc.__context__
    return inner if isinstance(exc, RuntimeError) and isinstance(inner, OSError) else None


class WriteError(NmtError):
    """An output could not be written: ``path`` and the operating system's ``reason``."""

    def __init__(self, path: PathLike, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path}: cannot write ({reason})")


def write_failure(path: PathLike, exc: OSError) -> WriteError:
    """One line for a failed write: the output and the operating system's reason."""
    return WriteError(path, exc.strerror or str(exc) or type(exc).__name__)


@contextlib.contextmanager
def _failures_named(path: Path, *work: Path) -> Iterator[None]:
    """An OSError while writing ``path`` (or its temporaries ``work``) -> :func:`write_failure`.

    A file inside a temporary directory ``work`` is named by its final place under
    ``path``. Errors about other files (an input that cannot be read, raised with its
    own name) pass through unchanged.
    """
    try:
        yield
    except WriteError as exc:
        failed = Path(os.path.abspath(exc.path))
        inside = [Path(os.path.abspath(folder)) for folder in work if Path(os.path.abspath(folder)) in failed.parents]
        if not inside:
            raise
        raise WriteError(path / failed.relative_to(inside[0]), exc.reason) from None
    except NmtError:
        raise
    except Exception as exc:
        error = _os_error(exc)
        if error is None or not _concerns(error, path, work):
            raise
        raise write_failure(path, error) from None


def _concerns(error: OSError, path: Path, work: tuple[Path, ...]) -> bool:
    """Whether ``error`` is about ``path``, a folder on the way to it, its lock or temporaries,
    or something inside one of the temporary directories ``work``."""
    if error.filename is None:
        return True  # a write through a handle
    named = Path(os.path.abspath(error.filename))
    for place in (path, *work):
        place = Path(os.path.abspath(place))
        if named == place or named in place.parents or place in named.parents:
            return True
        if named.parent == place.parent and named.name.startswith(f".{place.name}."):
            return True
    return False


# ---- where and how an output is written ------------------------------------------------------------


def writes_in_place(path: PathLike) -> bool:
    """Devices, FIFOs, sockets and descriptor aliases are written through, never replaced."""
    if os.path.abspath(path).startswith(_DESCRIPTOR_ALIASES):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _final_path(path: Path) -> Path:
    """Where the bytes go: the target of a symbolic link (so the link stays), else ``path``."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_not_input(output: PathLike, inputs: Iterable[PathLike]) -> None:
    """Refuse an output that is one of the command's inputs or a directory holding one."""
    target = Path(os.path.realpath(output))
    for item in inputs:
        if str(item) == "-":
            continue
        source = Path(os.path.realpath(item))
        if source == target or target in source.parents:
            what = "is" if source == target else "contains"
            raise NmtError(f"{output}: {what} the input {item}; choose another output")


# ---- one writer at a time, and what dead writers left -------------------------------------------------


@contextlib.contextmanager
def output_lock(path: PathLike) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``path`` (its folder made if need be) while writing it; a
    second writer fails at once, naming the first one's pid.

    The holder removes the lock file before releasing it; a writer that locked a file
    removed meanwhile opens the new one and tries again.
    """
    path = Path(path)
    with _failures_named(path):
        fd = _locked_file(path)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(_lock_path(path))
        os.close(fd)


def _lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _locked_file(path: Path) -> int:
    """A descriptor of ``path``'s lock file, locked by this process."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = _lock_path(path)
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, _default_mode(directory=False))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise NmtError(f"{path}: in use by pid {owner} (another command is writing it); "
                           "wait until it finishes") from None
        try:
            current = os.stat(lock_path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            return fd
        os.close(fd)


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_dead_temporaries(path: Path) -> None:
    """Temporaries of ``path`` whose writer is no longer running (``.NAME.<pid>.<random>.tmp|old``)."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(\d+)\.[A-Za-z0-9_]+\.(?:tmp|old)$")
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()


# ---- files ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", encoding: str | None = "utf-8",
                inputs: Iterable[PathLike] = ()) -> Iterator[IO[Any]]:
    """Open ``path`` for writing; a regular file appears only if the block succeeds.

    ``inputs``: files the command reads; an output that is one of them is refused.
    """
    path = Path(path)
    if "b" in mode:
        encoding = None
    check_not_input(path, inputs)
    if writes_in_place(path):  # appending never truncates what a shell's >> redirect holds
        with _failures_named(path), open(path, mode.replace("w", "a"), encoding=encoding) as handle:
            yield handle
        return
    if path.is_dir():
        raise NmtError(f"{path}: is a directory; name a file")
    target = _final_path(path)
    with _failures_named(path, target):
        with output_lock(target):
            _remove_dead_temporaries(target)
            fd, tmp_name = tempfile.mkstemp(prefix=_temporary_prefix(target), suffix=".tmp", dir=target.parent)
            try:
                os.chmod(tmp_name, _default_mode(directory=False))
                with os.fdopen(fd, mode, encoding=encoding) as handle:
                    yield handle
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp_name, target)
                _fsync_dir(target.parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_name)
                raise


@contextlib.contextmanager
def open_output(path: PathLike, inputs: Iterable[PathLike] = ()) -> Iterator[IO[bytes]]:
    """Binary standard output for ``-``, else :func:`atomic_open`."""
    if str(path) == "-":
        yield sys.stdout.buffer
    else:
        with atomic_open(path, "wb", inputs=inputs) as handle:
            yield handle


def atomic_write_text(path: PathLike, text: str, inputs: Iterable[PathLike] = ()) -> None:
    with atomic_open(path, "w", inputs=inputs) as handle:
        handle.write(text)


def atomic_write_bytes(path: PathLike, data: bytes, inputs: Iterable[PathLike] = ()) -> None:
    with atomic_open(path, "wb", inputs=inputs) as handle:
        handle.write(data)


def atomic_write_json(path: PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


# ---- directories ----------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_directory(path: PathLike, owned: Callable[[str], bool] = lambda name: False,
                     inputs: Iterable[PathLike] = ()) -> Iterator[Path]:
    """Build a directory under a temporary name; swap it in at ``path`` when the block succeeds.

    An existing directory at ``path`` is replaced only if it is empty or every entry
    name in it satisfies ``owned`` (what this kind of output holds); otherwise, or if it
    contains one of ``inputs``, nothing happens and an :class:`NmtError` says why. A
    symbolic link keeps pointing where it did; the directory it points to is replaced.
    """
    given = Path(path)
    check_not_input(given, inputs)
    path = _final_path(given)
    with _failures_named(given, path):
        with output_lock(path):
            _remove_dead_temporaries(path)
            _check_replaceable(given, path, owned)
            tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=path.parent))
            with _failures_named(given, tmp):
                try:
                    os.chmod(tmp, _default_mode(directory=True))
                    yield tmp
                    _fsync_dir(tmp)
                    _publish_directory(tmp, path)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise


def _check_replaceable(given: Path, path: Path, owned: Callable[[str], bool]) -> None:
    """``path`` (where ``given`` leads) is absent, or a directory holding only ``owned`` names."""
    if path.exists() and not path.is_dir():
        raise NmtError(f"{given}: exists and is not a directory; choose another output")
    if not path.exists():
        return
    foreign = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in path.iterdir()
                     if not owned(entry.name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise NmtError(f"{given}: holds {shown}, which this command did not write; refusing to replace it "
                       "(choose another output or remove them)")


def _publish_directory(tmp: Path, path: Path) -> None:
    """Move ``tmp`` to ``path``; an existing ``path`` is swapped out in one step and deleted."""
    if not path.exists():
        os.replace(tmp, path)
    elif _exchange(tmp, path):
        shutil.rmtree(tmp, ignore_errors=True)  # now the previous directory
    else:
        old = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path), suffix=".old", dir=path.parent))
        os.replace(path, old)  # onto the empty directory just made
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(path.parent)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(second))
