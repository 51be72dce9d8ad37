"""Safe writes: a temp file in the same folder + `os.replace`, under a lock."""

from __future__ import annotations

import _thread
import contextlib
import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook fast paths import this module: not even `typing` at import time
    from pathlib import Path
    from typing import IO, Any, Iterable, Iterator


def atomic_write(path: Path, data: str | bytes | Iterable[bytes], durable: bool = True) -> None:
    """Write `data` (text, bytes or byte chunks) so a reader sees the old file or the new one, never half."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [data.encode("utf-8")] if isinstance(data, str) else [data] if isinstance(data, bytes) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            for part in parts:
                handle.write(part)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise


def read_json(path: Path, default: Any = None) -> Any:
    """What a state or cache file holds, or `default` when it is missing or not JSON (it is rebuilt or started over)."""
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def is_temp_name(name: str) -> bool:
    """Whether a file name is an unfinished `atomic_write` (`.<name>.<random>.tmp`): never a memory, never staged."""
    return name.startswith(".") and name.endswith(".tmp")


def _naming(exc: OSError, path: Path) -> OSError:
    """The same error (same errno, same subclass) about `path`: what a person can act on."""
    if exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror, str(path))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_held: dict[int, set[str]] = {}  # thread id -> lock files it holds: a nested `file_lock` on one is a no-op


# A folder a lock file cannot be made in: a read-only store (a CI checkout, a mounted volume) or one owned by
# someone else. Readers then read without the lock; a writer fails at its first write, naming the file.
CANNOT_WRITE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


LOCK_WAIT = 10.0  # seconds a command waits for a store's write lock before it names the holder and fails
HOOK_LOCK_WAIT = 5.0  # seconds a hook waits (its budget is 30 s at most): then it logs, and the next event retries
_lock_wait = [LOCK_WAIT]


def lock_wait() -> float:
    """Seconds this process waits for a store's write lock; `CORTEX_LOCK_WAIT` sets it (docs/store.md)."""
    chosen = os.environ.get("CORTEX_LOCK_WAIT", "")
    try:
        return float(chosen) if chosen else _lock_wait[0]
    except ValueError:
        return _lock_wait[0]


def set_lock_wait(seconds: float) -> None:
    """Wait `seconds` for those locks from now on: hooks wait less than commands (`HOOK_LOCK_WAIT`)."""
    _lock_wait[0] = seconds


@contextlib.contextmanager
def file_lock(path: Path, timeout: float | None = None) -> Iterator[None]:
    """An exclusive advisory lock (flock) held for the `with` block, re-entrant within a thread: every writer of a
    store takes it, readers never. In a read-only store it is taken on a stand-in (`stand_in_lock`), so a writer fails
    at its write, naming the file. With `timeout`, a lock held that long by another process raises `LockBusy`, naming
    the lock and its holder."""
    key = os.path.realpath(path)
    held = _held.setdefault(_thread.get_ident(), set())
    if key in held:
        yield
        return
    handle = _open_lock(path)
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no flock; writes stay atomic
            yield
            return
        if timeout is None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        elif not _flock_within(handle.fileno(), timeout):
            from cortex.errors import LockBusy

            raise LockBusy(path, lock_holder(handle.fileno()))
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()


def _open_lock(path: Path) -> IO[bytes]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a+b")
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE:
            raise
        try:
            return open(stand_in_lock(path), "a+b")
        except OSError:
            raise exc from None


def stand_in_lock(path: Path | str) -> str:
    """The lock file used for `path` when its folder is read-only, keyed by its real path (docs/store.md)."""
    import hashlib

    digest = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:32]
    return os.path.join(private_folder("locks"), f"{digest}.lock")


def private_folder(name: str) -> str:
    """`<temp>/cortex-<uid>/<name>`, this user's alone: what a read-only store cannot hold; OSError if unsafe."""
    import stat
    import tempfile

    top = os.path.join(tempfile.gettempdir(), f"cortex-{os.getuid()}")
    for folder in (top, os.path.join(top, name)):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            raise PermissionError(errno.EACCES, "not a private folder", folder)  # someone else's: never use it
    return os.path.join(top, name)


@contextlib.contextmanager
def try_lock(path: Path, wait: bool = False) -> Iterator[bool]:
    """Yield True holding an exclusive lock on `path`, or False at once if another process has it. With `wait` it
    waits instead, unless the lock cannot be made (a read-only or full folder): then False, and the caller works from
    what is on disk."""
    try:
        handle = hold_lock(path, wait)
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE | NO_SPACE:
            raise
        handle = None
    try:
        yield handle is not None
    finally:
        if handle is not None:
            handle.close()  # the flock goes with it


def _flock(fd: int, wait: bool = False) -> bool:
    """Take an exclusive flock on `fd`; without `wait`, False at once when another process holds it."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _flock_within(fd: int, seconds: float) -> bool:
    """Take an exclusive flock on `fd`, trying again until `seconds` have passed; False if it is still held."""
    import time

    deadline = time.monotonic() + seconds
    pause = 0.005
    while not _flock(fd):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.1)  # a short hold is caught quickly; a long one costs ten tries a second
    return True


def lock_holder(fd: int) -> str | None:
    """Who holds the flock on `fd`, for a person ("another cortex process (pid 7, `cortex maintain`)"), or None."""
    try:
        info = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            table = handle.read()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and fields[4].isdigit():
            return _process(int(fields[4]))
    return None


def _process(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [part.decode("utf-8", "replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return f"another process (pid {pid})"
    for n, arg in enumerate(argv):  # `cortex maintain`, `python /venv/bin/cortex maintain`, `python -m cortex maintain`
        if os.path.basename(arg) == "cortex":
            words = argv[n + 1:n + 3] if argv[n + 1:n + 2] == ["hook"] else argv[n + 1:n + 2]  # never its text
            return f"another cortex process (pid {pid}, `{' '.join(['cortex', *words])}`)"
    name = os.path.basename(argv[0]) if argv else "?"
    return f"another process (pid {pid}, {name})"


def hold_lock(path: Path, wait: bool = False) -> IO[str] | None:
    """Hold an exclusive lock on `path` until the handle is closed; without `wait`, None when it is taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    if not _flock(handle.fileno(), wait):
        handle.close()
        return None
    return handle


def write_problem(exc: OSError) -> str | None:
    """One line for a person on why the machine refused a file operation (a read-only store, no permission,
    a full disk), naming the file when the error does; None for any other error (a bug, better shown whole)."""
    where = f"{exc.filename}: " if exc.filename is not None else ""
    if exc.errno == errno.EROFS:
        if exc.filename is None:
            return "the file system is read-only; this command writes to the store (commands that only read it work)"
        return f"{exc.filename} is read-only; this command writes to the store (commands that only read it work)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{where}permission denied"
    if exc.errno in NO_SPACE:
        changed = "files being written were left as they were" if exc.filename is None else "that file was not changed"
        return f"{where}no space left on the device; {changed}: free some space and run it again"
    if exc.errno in (errno.EIO, errno.EFBIG, errno.EMFILE, errno.ENFILE):
        return f"{where}{exc.strerror}"
    return None
