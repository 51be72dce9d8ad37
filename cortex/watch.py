"""`cortex watch`: keep a store's cache in step with its files while running.

A watchdog observer on `memories/`; events are debounced (a burst of changes — a `git checkout`, a capture writing
five files — becomes one sync). One watcher per store: `state/watch.lock` refuses a second one.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from cortex.errors import CortexError
from cortex.store import Store


class AlreadyWatching(CortexError):
    """Another `cortex watch` holds this store."""


def stop_on_sigterm() -> None:
    """`kill` stops a long-running command as cleanly as Ctrl-C (its `finally` blocks run)."""
    import signal

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)


_LISTENING: Any = None  # the `Changes` to tell when the kernel dropped events (`_listen_for_overflow`)


def _listen_for_overflow(changes: Changes) -> None:
    """Have every `Changes` ask for a walk when the kernel's event queue overflowed: watchdog only logs it."""
    global _LISTENING
    import logging
    import weakref

    if _LISTENING is None:
        _LISTENING = weakref.WeakSet()

        class Overflow(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "overflow" in record.getMessage().lower():
                    for each in list(_LISTENING):
                        each.lost()

        logging.getLogger("watchdog.observers").addHandler(Overflow(logging.WARNING))
    _LISTENING.add(changes)


class Changes:
    """The memory files a watcher saw change since they were last taken, or "everything" when it cannot say which
    (a folder came or went, more than `MOST` files, events lost). The observer's thread adds, the server's takes."""

    MOST = 256

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paths: set[str] = set()
        self.everything = False
        self.wake: threading.Event | None = None  # set when events were lost (`lost`), so a sync follows
        self.fence: str | None = None  # the fence file's path as the observer names it (`fence`)
        self.fenced = threading.Event()  # set when the observer reported the fence file
        self.folder: str | None = None  # the folder the observer watches, as it names it (`change_observer`)
        self.unwatched = False  # that folder itself was deleted, and the observer's watch with it (`rewatch`)

    def add(self, event: Any) -> None:
        with self.lock:
            if getattr(event, "is_directory", True):
                if getattr(event, "event_type", "") == "deleted" and self.folder is not None \
                        and os.fsdecode(getattr(event, "src_path", "")) == self.folder:
                    self.unwatched = True  # git removes a folder a checkout emptied: the observer stopped with it
                if getattr(event, "event_type", "") not in ("modified", "closed"):  # a folder's own listing changed
                    self.everything = True  # (its files' events say which): not that, but a folder came or went
                return
            for path in (getattr(event, "src_path", None), getattr(event, "dest_path", None)):
                if path and os.fsdecode(path) == self.fence:
                    self.fenced.set()
                elif path:
                    self.paths.add(os.fsdecode(path))
            if len(self.paths) > self.MOST:
                self.everything = True

    def lost(self) -> None:
        """Events were dropped: the next take asks for a walk."""
        with self.lock:
            self.everything = True
        if self.wake is not None:
            self.wake.set()

    def take(self) -> tuple[list[str] | None, int]:
        """(the paths seen, or None for "walk everything"; the time they were taken, in ns): what was seen up
        to that time. Resets."""
        with self.lock:
            paths = None if self.everything else sorted(self.paths)
            self.paths, self.everything = set(), False
            return paths, time.time_ns()


FENCE_DIR = ".fence"  # under memories/: hidden, so never read as a memory; a `.gitignore` of `*` keeps it out of git
FENCE_WAIT = 1.0  # seconds to wait for the observer to report the fence before walking instead


def fence(store: Store, changes: Changes) -> int | None:
    """Write the fence file and wait until the observer reports it: events arrive in order, so every change made
    before it has reached `changes`. Returns the time just before it was written; None after `FENCE_WAIT`."""
    folder = os.path.join(str(store.memories_dir), FENCE_DIR)
    path = os.path.join(folder, "mark")
    try:
        if not os.path.isdir(folder):
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, ".gitignore"), "w", encoding="utf-8") as handle:
                handle.write("*\n")  # ignores itself too: nothing of the fence shows in `git status`
        with changes.lock:
            changes.fence = path
            changes.fenced.clear()
        before = time.time_ns()
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(str(before))
    except OSError:
        return None
    return before if changes.fenced.wait(FENCE_WAIT) else None


def written_stamp(store: Store) -> int:
    """The mtime of `state/changed`, which every cortex write touches (one stat: no waiting for the observer)."""
    try:
        return os.stat(os.path.join(store.state_dir, "changed")).st_mtime_ns
    except OSError:
        return 0


def memory_files(store: Store, paths: list[str] | None) -> list[Any] | None:
    """The memory files among the paths an observer reported (what the walk would read), or None when they need a
    walk after all: no list, or a link or something else that the walk reports as a problem."""
    if paths is None:
        return None
    from pathlib import Path

    root = os.path.realpath(store.memories_dir)
    out = []
    for raw in paths:
        path = os.path.realpath(os.path.dirname(raw))
        if path != root and not path.startswith(root + os.sep):
            continue
        rel = os.path.relpath(os.path.join(path, os.path.basename(raw)), root)
        if any(part.startswith(".") for part in rel.split(os.sep)):
            continue  # hidden: never read by the walk either
        if os.path.islink(raw) or (os.path.lexists(raw) and not os.path.isfile(raw)):
            return None  # a link (to a file or a folder) or something else: the walk says what is wrong with it
        if rel.endswith(".md"):
            out.append(Path(store.memories_dir) / rel)
    return out


def account(store: Store, index: Any, changes: Changes, wrote: bool, fenced_ns: int | None = None) -> bool:
    """Make ready the sync that follows what a store's observer saw; False when no memory changed. The files the
    observer named suffice for a change by hand, and after a cortex write behind a fence; otherwise a walk."""
    paths, seen_ns = changes.take()
    files = memory_files(store, paths)
    if files == [] and not wrote:
        return False
    if files is None or (wrote and fenced_ns is None):
        index.stale()
    else:
        index.watched(files, seen_ns if fenced_ns is None else fenced_ns)
    return True


def rewatch(folder: Any, observer: Any, changed: threading.Event, changes: Changes) -> Any:
    """`observer`, or a new one on `folder` (made again) when the folder it watched was deleted (a checkout that
    empties `memories/`); the next sync walks."""
    if not changes.unwatched:
        return observer
    observer.stop()
    folder.mkdir(parents=True, exist_ok=True)
    with changes.lock:
        changes.unwatched = False
        changes.everything = True
    return change_observer(folder, changed, changes)


def change_observer(folder: Any, changed: threading.Event, changes: Changes | None = None) -> Any:
    """A started watchdog observer on `folder` that sets `changed` when a file there changes (not when read),
    and notes in `changes` which."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: object) -> None:
            # Reads raise inotify events too (opened, closed_no_write): only changes count.
            if getattr(event, "event_type", "") in ("created", "deleted", "modified", "moved", "closed"):
                if changes is not None:
                    changes.add(event)
                changed.set()

    if changes is not None:
        changes.wake = changed
        _listen_for_overflow(changes)

    observer = Observer()
    observer.daemon = True  # never keeps the process alive after Ctrl-C
    watch = observer.schedule(Handler(), str(folder), recursive=True)
    if changes is not None:
        changes.folder = os.fsdecode(watch.path)
    observer.start()
    return observer


def watch(store: Store, debounce: float = 0.3, echo: Callable[[str], None] = print,
          stop: threading.Event | None = None) -> None:
    from cortex.files import hold_lock
    from cortex.index import Index

    lock = hold_lock(store.state_dir / "watch.lock")
    if lock is None:
        raise AlreadyWatching(f"another `cortex watch` is already running for {store.root}")
    stop = stop or threading.Event()
    changed = threading.Event()
    observer = None
    ready = None
    stop_on_sigterm()
    try:
        store.memories_dir.mkdir(parents=True, exist_ok=True)
        changes = Changes()
        observer = change_observer(store.memories_dir, changed, changes)  # before the first sync: nothing is missed
        index = Index(store)
        index.trust_watcher = False
        written = written_stamp(store)
        index.sync(full=True)
        ready = hold_lock(store.state_dir / "watch.ready", wait=True)  # from here on, readers trust this watcher
        echo(f"watching {store.memories_dir} ({len(index.manifest.files) if index.manifest else 0} files); Ctrl-C stops")
        while not stop.is_set():
            if not changed.wait(timeout=0.5):
                continue
            # Debounce: wait until no event arrived for `debounce` seconds.
            while changed.is_set():
                changed.clear()
                time.sleep(debounce)
            try:
                observer = rewatch(store.memories_dir, observer, changed, changes)
                stamp = written_stamp(store)
                fenced = fence(store, changes) if stamp != written else None  # as `cortex serve` does
                if not account(store, index, changes, stamp != written, fenced):
                    continue
                report = index.sync(full=True, progress=False)
                written = stamp
            except Exception as exc:  # keep watching; say what went wrong
                store.log(f"watch: sync failed: {exc!r}")
                echo(f"sync failed: {exc}")
                index = Index(store)  # start again from the committed cache
                index.trust_watcher = False
                continue
            if report.changed or report.removed or report.embedded:
                echo(f"synced: {report.changed} changed, {report.removed} removed, {report.embedded} embedded "
                     f"({report.seconds * 1000:.0f} ms)")
    except KeyboardInterrupt:
        pass
    finally:
        if observer is not None:
            observer.stop()
            if observer.is_alive():
                observer.join(timeout=5)
        if ready is not None:
            ready.close()
        lock.close()
        echo("stopped")
