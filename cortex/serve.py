"""`cortex serve`: a resident query process per store, so prompt-time recall costs a socket round trip.

A fresh hook process pays numpy, Whoosh, the manifest and a stat of every
file before it can search (~0.7 s at 10,000 memories). `cortex serve` keeps
an Index warm, follows the files with a watchdog observer (debounced sync, as
`cortex watch` does), and answers requests on a unix socket under
`.cortex/state/` (no network port). One per store (`state/serve.lock`); it
exits by itself after `--idle` seconds without a request. The SessionStart
hook starts it detached; the prompt hook asks it with a short timeout and
falls back to recall in its own process when it is absent or slow.

Protocol: one JSON line in (`{"op": "prompt", "prompt": "…"}`), one JSON line
out (`{"context": "…" | null}`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing the store costs a hook ~20 ms; the client half of this module must not
    from cortex.index import Indexes
    from cortex.store import Store


from cortex.layout import server_up, socket_path  # noqa: E402  (os-level, shared with the hook fast path)


def _read_line(connection: socket.socket) -> bytes:
    """One newline-terminated message (the whole protocol is one JSON line each way)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def ask(store_root: str, request: dict[str, object], timeout: float = 0.5) -> dict[str, object] | None:
    """Send one request to a running server; None when there is none or it is too slow."""
    path = socket_path(store_root)
    if not os.path.exists(path):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(timeout)
            client.connect(path)
            client.sendall(json.dumps(request).encode() + b"\n")
            data = _read_line(client)
        answer = json.loads(data)
        return answer if isinstance(answer, dict) else None
    except (OSError, ValueError):
        return None


def start_detached(store_root: str) -> None:
    """Start `cortex serve` for a store in its own session, unless one runs already (os-level, for hot paths)."""
    if server_up(store_root):
        return
    from cortex.spawn import detached

    idle = os.environ.get("CORTEX_SERVE_IDLE", "900")  # tests shorten it so no server outlives them
    try:
        detached(["serve", "--dir", store_root, "--idle", idle], os.path.join(store_root, "state"), "serve.log")
    except OSError:
        pass  # a read-only store: the prompt hook recalls in its own process


def serve(store: "Store", idle: float = 900.0, debounce: float = 0.3) -> str:
    """Serve until idle; returns why it stopped. Raises CortexError when another server holds the store."""
    from cortex.errors import CortexError
    from cortex.files import hold_lock
    from cortex.index import Indexes
    from cortex.store import iter_stores
    from cortex.watch import change_observer, stop_on_sigterm

    lock = hold_lock(store.state_dir / "serve.lock")
    if lock is None:
        raise CortexError(f"a `cortex serve` already runs for {store.root}")
    path = socket_path(str(store.root))
    if os.path.exists(path):
        os.unlink(path)  # a stale socket from a server that died; the lock says none runs
    stop_on_sigterm()
    indexes = Indexes()
    watched = []  # (store, changed event, observer): the project store and the global one
    for each in iter_stores(store):
        indexes.synced(each, full=True)
        each.memories_dir.mkdir(parents=True, exist_ok=True)
        changed = threading.Event()
        watched.append((each, changed, change_observer(each.memories_dir, changed)))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    server.settimeout(0.25)
    try:
        return _loop(store, server, indexes, watched, idle, debounce)
    except KeyboardInterrupt:
        return "stopped by a signal"
    finally:
        for _each, _changed, observer in watched:
            observer.stop()
        server.close()
        if os.path.exists(path):
            os.unlink(path)
        lock.close()


def _written_stamp(store: "Store") -> int:
    """The mtime of `state/changed`, which every cortex write touches (one stat: no waiting for the watcher)."""
    try:
        return os.stat(os.path.join(store.state_dir, "changed")).st_mtime_ns
    except OSError:
        return 0


def _follow(indexes: "Indexes", watched: "list[tuple[Store, threading.Event, Any]]", written: dict[str, int],
            debounce: float) -> None:
    """Mark a store stale and sync it when its watcher saw a change (after `debounce`, so a burst of changes is
    one sync) or cortex itself wrote to it since the last sync."""
    for each, changed, _observer in watched:
        stamp = _written_stamp(each)
        if changed.is_set() or stamp != written[str(each.root)]:
            if changed.is_set() and debounce:
                time.sleep(debounce)
            changed.clear()
            written[str(each.root)] = stamp
            indexes.stale(each)
            indexes.synced(each, full=True)


def _loop(store: "Store", server: socket.socket, indexes: "Indexes",
          watched: "list[tuple[Store, threading.Event, Any]]", idle: float, debounce: float) -> str:
    """Answer requests until `idle` seconds pass without one; a store whose files changed is synced again."""
    from cortex.events import prompt_context

    last = time.monotonic()
    written = {str(each.root): _written_stamp(each) for each, _changed, _observer in watched}
    while time.monotonic() - last < idle:
        _follow(indexes, watched, written, debounce)
        try:
            connection, _ = server.accept()
        except socket.timeout:
            continue
        _follow(indexes, watched, written, 0.0)  # what was written since the last look, before answering
        last = time.monotonic()
        with connection:
            connection.settimeout(2.0)
            try:
                request = json.loads(_read_line(connection) or b"{}")
                answer: dict[str, object]
                if request.get("op") == "prompt":
                    answer = {"context": prompt_context(store, str(request.get("prompt", "")), indexes)}
                else:
                    answer = {"ok": True, "pid": os.getpid()}
            except Exception as exc:  # one bad request never stops the server
                store.log(f"serve: {exc!r}")
                answer = {"error": str(exc)}
            try:
                connection.sendall(json.dumps(answer).encode() + b"\n")
            except OSError:
                pass
    return "idle"
