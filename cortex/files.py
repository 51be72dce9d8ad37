"""Safe writes: a temp file in the same folder + `os.replace`, under a lock."""

from __future__ import annotations

import _thread
import contextlib
import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook fast paths import this module: not even `typing` (3 ms) at import time
    from pathlib import Path
    from typing import IO, Iterator


def atomic_write(path: Path, data: str | bytes, durable: bool = True) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one, never half.

    `durable=False` skips the fsync: for caches, where a file lost in a power cut is simply rebuilt.
    """
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_held: dict[int, set[str]] = {}  # thread id -> lock files it holds: a nested `file_lock` on one is a no-op


def _held_paths() -> set[str]:
    return _held.setdefault(_thread.get_ident(), set())


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock (flock) held for the `with` block; re-entrant within a thread.

    Used by every writer of a store, so two hooks writing at once queue up
    instead of interleaving. Readers never take it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(path)
    held = _held_paths()
    if key in held:
        yield
        return
    handle = open(path, "a+b")
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no flock; writes stay atomic
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()


@contextlib.contextmanager
def try_lock(path: Path, wait: bool = False) -> Iterator[bool]:
    """Yield True holding an exclusive lock on `path`, or False at once if another process has it.

    With `wait` it waits for the lock instead (and always yields True).
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")
    try:
        if not _flock(handle.fileno(), wait):
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()


def _flock(fd: int, wait: bool = False) -> bool:
    """Take an exclusive flock on `fd`; without `wait`, False at once when another process holds it."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True



def hold_lock(path: Path, wait: bool = False) -> IO[str] | None:
    """Take an exclusive lock on `path` and keep it until the returned handle is closed.

    Without `wait`, None when another process holds it: how one `cortex serve` or `cortex watch` per store
    is kept.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    if not _flock(handle.fileno(), wait):
        handle.close()
        return None
    return handle


def lock_held(path: str) -> bool:
    """Whether another process holds an flock on `path` (a server or watcher that is alive). Stdlib only."""
    import fcntl

    if not os.path.exists(path):
        return False
    try:
        with open(path, "a+") as handle:
            if not _flock(handle.fileno()):
                return True
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return False
    except OSError:
        return False
