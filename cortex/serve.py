"""`cortex serve`: a resident query process per store, so prompt-time recall costs a socket round trip.

It keeps one index per store (the project's and the global one), synced at its start and then by a watchdog
observer as `cortex watch` does (vouching for the files, so other processes skip their stat of every file),
keeps the next SessionStart briefing built, and exits after `--idle` seconds without a request. One per store
(`state/serve.lock`); the SessionStart hook starts it. Its protocol (one JSON line each way: `prompt`,
`recall`, `path`, `ping`, `state`; anything else gets `{"error"}` and runs nothing) is in docs/cache.md. Only
its owner reaches it: a private folder, a 0600 socket and the peer's uid checked (docs/security.md).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from cortex import ONE_THREAD, wire
from cortex.layout import socket_path
from cortex.wire import MAX_REQUEST, PROMPT_CHARS, peer_uid

if TYPE_CHECKING:
    from cortex.store import Store

REQUEST_TIME = 2.0  # seconds a client has to send its whole request line
QUIET = 1.0  # seconds without a request before the next briefing is built (commands after a write come first)
BRIEFING_CHECK = 2.0  # seconds between looks at whether the saved briefing still matches branch, HEAD and store
COMMAND_WAIT = 5.0  # seconds a recall waits for a sync in progress before the command searches itself
MAX_WAIT = 5.0  # seconds a prompt may ask the server to wait until it is ready
DEBOUNCE = 0.3  # seconds a burst of file changes has to end before one sync


class RequestRefused(Exception):
    """A request this server does not answer (the client is told why, and nothing runs)."""


def ask(store_root: str, request: dict[str, object], timeout: float = 0.5) -> dict[str, object] | None:
    """Send one request to the store's running server; None when there is none or it is too slow."""
    return wire.ask(socket_path(store_root), request, timeout)


def serve(store: Store, idle: float = 900.0) -> str:
    """Serve until idle and say why it stopped; CortexError when another server holds the store."""
    for name in ONE_THREAD:  # one BLAS thread: a matrix-vector product per query spins, not speeds up, on 2 cores
        os.environ.setdefault(name, "1")
    from cortex.errors import CortexError
    from cortex.files import hold_lock
    from cortex.watch import stop_on_sigterm

    lock = hold_lock(store.state_dir / "serve.lock")
    if lock is None:
        raise CortexError(f"a `cortex serve` already runs for {store.root}")
    path = socket_path(str(store.root), create=True)
    if path is None:
        lock.close()
        raise CortexError("no private folder for the server's socket (`$XDG_RUNTIME_DIR/cortex` or `cortex-<uid>` "
                          "in the temp folder, this user's, mode 0700): prompts are answered in the hook's process")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a stale socket from a server that died (`kill -9`); the lock says none runs
    stop_on_sigterm()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)  # whatever the umask: the owner's alone (its folder already keeps others out)
    server.listen(8)
    server.settimeout(0.25)
    warm = _Warm(store)
    warm.start()
    try:
        return _loop(store, server, warm, idle)
    except KeyboardInterrupt:
        return "stopped by a signal"
    finally:
        warm.stop()
        server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        lock.close()


class _Warm(threading.Thread):
    """The server's indexes, synced at the start and after each change its observers see; each use holds `busy`."""

    def __init__(self, store: Store) -> None:
        super().__init__(daemon=True, name="cortex-serve-warm")
        from cortex.index import Indexes

        self.store = store
        self.indexes = Indexes()
        self.busy = threading.Lock()
        self.ready = threading.Event()  # synced and loaded: answering
        self.settled = threading.Event()  # and the next briefing built
        self.stopping = threading.Event()
        # (store, the event its observer sets, the files it saw change (`watch.Changes`), the observer)
        self.watched: list[tuple[Store, threading.Event, Any, Any]] = []
        self.written: dict[str, int] = {}  # store root -> cortex's write stamp when last synced
        self.vouches: list[Any] = []  # the `watch.ready` locks this server holds
        self.asked = 0.0  # monotonic time of the last request (`_loop`)

    def run(self) -> None:
        from cortex.files import hold_lock
        from cortex.recall import recall, use_contextual
        from cortex.spawn import resident
        from cortex.store import iter_stores
        from cortex.watch import Changes, change_observer, written_stamp

        try:
            with self.busy:
                stores = list(iter_stores(self.store))
                for each in stores:
                    each.memories_dir.mkdir(parents=True, exist_ok=True)
                    changed, changes = threading.Event(), Changes()
                    # The observer starts before the sync: nothing written from now on is missed.
                    self.watched.append((each, changed, changes, change_observer(each.memories_dir, changed, changes)))
                    self.written[str(each.root)] = written_stamp(each)
                    self.indexes.get(each).trust_watcher = False  # this server is the watcher
                    self.indexes.synced(each, full=True)
                use_contextual("background")
                recall(stores, "warm up", limit=1, indexes=self.indexes, links=False)  # models and searchers loaded
            vouches = [hold_lock(each.state_dir / "watch.ready") for each in stores]  # None: `cortex watch` vouches
            self.vouches = [vouch for vouch in vouches if vouch is not None]
            self.ready.set()
        except Exception as exc:  # the hook recalls in its own process
            self.store.log(f"serve: warming failed: {exc!r}")
            self._release()
            return
        finally:
            resident()
        self._briefing()
        self.settled.set()
        last_look, due = time.monotonic(), False
        while not self.stopping.wait(0.25):
            try:
                if any(watched[1].is_set() for watched in self.watched):
                    time.sleep(DEBOUNCE)  # a burst of changes becomes one sync; not holding `busy` meanwhile
                with self.busy:
                    due = self.follow() or due
            except Exception as exc:  # a sync that failed: no longer vouch for files this server may miss
                self.store.log(f"serve: sync failed: {exc!r}")
                self._release()
                continue
            if (due or time.monotonic() - last_look > BRIEFING_CHECK) and time.monotonic() - self.asked > QUIET:
                self._briefing()
                last_look, due = time.monotonic(), False

    def follow(self) -> bool:
        """Sync each store its observer or a cortex write changed, as `cortex watch` does (under `busy`)."""
        from cortex.watch import account, fence, rewatch, written_stamp

        synced = False
        for n, (each, changed, changes, observer) in enumerate(self.watched):
            root = str(each.root)
            stamp = written_stamp(each)
            if not changed.is_set() and stamp == self.written[root]:
                continue
            changed.clear()
            self.watched[n] = (each, changed, changes, rewatch(each.memories_dir, observer, changed, changes))
            wrote = stamp != self.written[root]
            # After a cortex write (perhaps another process), the files the observer named once a fence came back.
            fenced = fence(each, changes) if wrote else None
            if account(each, self.indexes.get(each), changes, wrote, fenced):
                self.indexes.synced(each, full=True)
                synced = True
            self.written[root] = stamp
        return synced

    def _briefing(self) -> None:
        """Build the next SessionStart's briefing when the saved one no longer matches (a write, a commit that
        moved HEAD), in a process of its own (`cortex.briefing.build_next`), niced so requests come first."""
        import subprocess
        import sys

        from cortex import __version__
        from cortex.layout import briefing_key, saved_briefing

        root = str(self.store.root)
        key = briefing_key(root, __version__)
        if self.store.label != "project" or any((saved_briefing(root, name) or {}).get("key") == key
                                                for name in ("briefing.json", "briefing.next.json")):
            return
        try:
            done = subprocess.run([sys.executable, "-c", "import os, sys; os.nice(10); from cortex.briefing import "
                                   "build_next; build_next(sys.argv[1])", root], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600, check=False)
            if done.returncode != 0:
                self.store.log(f"serve: briefing not rebuilt: {done.stderr.decode(errors='replace')[-500:]!r}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.store.log(f"serve: briefing not rebuilt: {exc!r}")

    def _release(self) -> None:  # no longer vouch for the files: other processes walk them again
        while self.vouches:
            self.vouches.pop().close()

    def stop(self) -> None:
        self.stopping.set()
        for *_watched, observer in self.watched:
            observer.stop()
        self._release()


# Every op and the fields each may carry (`_checked`): a query and its options; never a store or a command.
FIELDS: dict[str, dict[str, Any]] = {
    "state": {}, "ping": {}, "prompt": {"prompt": str, "session": str, "wait": (int, float)},
    "recall": {"query": str, "limit": int, "types": list, "branch": (str, type(None)), "include_all": bool,
               "keyword": bool, "global": bool, "proposed": bool},
    "path": {"paths": list, "exclude": list, "wait": (int, float)},
}
MAX_PATHS, MAX_EXCLUDED = 20, 10_000  # of a `path` request: the files looked up, the ids left out


def _checked(request: object) -> dict[str, Any]:
    """The request with every field checked (a prompt cut to `wire.PROMPT_CHARS`), else RequestRefused."""
    from cortex.memory import TYPES

    if not isinstance(request, dict):
        raise RequestRefused("a request is one JSON object")
    op = request.get("op")
    if not isinstance(op, str) or op not in FIELDS:
        raise RequestRefused(f"unknown op {op!r}: this server answers {', '.join(sorted(FIELDS))}")
    allowed = FIELDS[op]
    for name, value in request.items():
        if name == "op":
            continue
        if name not in allowed:
            raise RequestRefused(f"unknown field {name!r} in a {op} request")
        if isinstance(value, bool) and allowed[name] is not bool or not isinstance(value, allowed[name]):
            raise RequestRefused(f"field {name!r} of a {op} request has the wrong type")
    checked = dict(request)
    if "wait" in checked and not 0 <= checked["wait"] <= MAX_WAIT:
        raise RequestRefused(f"field 'wait' must be between 0 and {MAX_WAIT:g} seconds")
    if len(checked.get("session", "")) > 200:
        raise RequestRefused("field 'session' is over 200 characters")
    if "prompt" in checked:
        checked["prompt"] = checked["prompt"][:PROMPT_CHARS]
    if len(checked.get("query", "")) > PROMPT_CHARS:
        raise RequestRefused(f"field 'query' is over {PROMPT_CHARS} characters")
    if "limit" in checked and not 1 <= checked["limit"] <= 1000:
        raise RequestRefused("field 'limit' must be between 1 and 1000")
    if any(kind not in TYPES for kind in checked.get("types", ())):
        raise RequestRefused(f"field 'types' may hold only {', '.join(TYPES)}")
    if len(checked.get("branch") or "") > 1000:
        raise RequestRefused("field 'branch' is over 1000 characters")
    for name, most in (("paths", MAX_PATHS), ("exclude", MAX_EXCLUDED)):
        values = checked.get(name, ())
        if len(values) > most or not all(isinstance(value, str) and len(value) <= 4096 for value in values):
            raise RequestRefused(f"field {name!r} holds at most {most} strings of at most 4096 characters")
    return checked


def _read_line(connection: socket.socket, limit: int) -> bytes:
    """One newline-terminated message of at most `limit` bytes (past it the request is refused, read no further)."""
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + REQUEST_TIME
    while not chunks or not chunks[-1].endswith(b"\n"):
        connection.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = connection.recv(65536)
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise RequestRefused(f"request over {limit} bytes")
        chunks.append(chunk)
    connection.settimeout(REQUEST_TIME)  # for the answer, as long as for the request
    return b"".join(chunks)


def _answer(store: Store, warm: _Warm, request: dict[str, Any]) -> dict[str, object] | None:
    """What the server says to one checked request; None: nothing (a ping before the server is ready)."""
    op = request["op"]
    if op == "state":
        return {"ok": True, "pid": os.getpid(), "ready": warm.ready.is_set(), "current": warm.ready.is_set(),
                "settled": warm.settled.is_set()}
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "ready": True} if warm.ready.is_set() else None
    # A prompt waits for the warm-up within its `wait` (a recall does not), then for a sync in progress.
    waits = op in ("prompt", "path")
    deadline = time.monotonic() + float(request.get("wait", 0) if waits else 0)
    if not warm.ready.wait(max(0.0, deadline - time.monotonic())) or not warm.busy.acquire(
            timeout=max(0.3, deadline - time.monotonic()) if waits else COMMAND_WAIT):
        return {"warming": True}  # the client searches in its own process
    from cortex.errors import QueryRefused
    from cortex.events import prompt_context, take_catch_up
    from cortex.recall import recall
    from cortex.store import iter_stores
    from cortex.text import injected_ids

    try:
        warm.follow()  # what was written since the last look, before answering
        if op == "prompt":
            context = prompt_context(store, request.get("prompt", ""), warm.indexes,
                                     take_catch_up(store, request.get("session", "")))
            return {"context": context, "ids": injected_ids(context or "")}
        if op == "path":  # the edit hook: the memories bound to the files a tool call changes (`cortex.bypath`)
            from cortex.bypath import answer

            return answer(warm.indexes.synced(store), request.get("paths", []), request.get("exclude", []))
        # `cortex recall`'s search, of the project's store and the global one unless `"global": false`
        stores = list(iter_stores(store, include_global=request.get("global", True) and store.label == "project"))
        found = recall(stores, request.get("query", ""), limit=request.get("limit", 10),
                       types=tuple(request.get("types", ())), branch=request.get("branch"),
                       include_all=request.get("include_all", False), keyword_only=request.get("keyword", False),
                       indexes=warm.indexes, proposed=bool(request.get("proposed", False)))
        return {"notes": found.notes, "hits": [hit.to_dict() | {"memory": hit.memory.to_dict(), "root": hit.root}
                                               for hit in found.hits]}
    except QueryRefused as exc:
        return {"refused": str(exc)}
    finally:
        warm.busy.release()


def _loop(store: Store, server: socket.socket, warm: _Warm, idle: float) -> str:
    """Answer requests, one at a time, until `idle` seconds pass without one."""
    from cortex.store import defer_access, flush_access

    defer_access()
    last = time.monotonic()
    while time.monotonic() - last < idle:
        try:
            connection, _ = server.accept()
        except socket.timeout:
            continue
        with connection:
            try:
                uid = peer_uid(connection)
            except OSError:
                continue
            if uid is not None and uid != os.getuid():
                store.log(f"serve: a client of uid {uid} refused")
                continue  # another user's process: closed unanswered
            last = warm.asked = time.monotonic()
            answer: dict[str, object] | None
            try:
                answer = _answer(store, warm, _checked(json.loads(_read_line(connection, MAX_REQUEST) or b"{}")))
            except (RequestRefused, ValueError) as exc:  # a request it does not answer: said, nothing run
                answer = {"error": str(exc)[:500]}
            except Exception as exc:  # one bad request never stops the server
                store.log(f"serve: {exc!r}")
                answer = {"error": str(exc)}
            if answer is not None:
                try:
                    connection.sendall(json.dumps(answer).encode() + b"\n")
                except OSError:
                    pass
        try:
            flush_access()  # what the answer read, counted once the client has it (`defer_access`)
        except Exception as exc:  # bookkeeping never stops the server
            store.log(f"serve: access counts not written: {exc!r}")
    return "idle"
