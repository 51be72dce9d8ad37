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
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing the store costs a hook ~20 ms; the client half of this module must not
    from cortex.store import Store


from cortex.hotpath import server_running as running  # noqa: E402  (os-level, shared with the hook fast path)
from cortex.hotpath import socket_path  # noqa: E402


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


def spawn(store: "Store") -> None:
    """Start `cortex serve` detached unless one answers already."""
    start_detached(str(store.root))


def start_detached(store_root: str) -> None:
    """Start `cortex serve` for a store in its own session, unless one runs already (os-level, for hot paths)."""
    import subprocess

    if running(store_root):
        return
    state = os.path.join(store_root, "state")
    os.makedirs(state, exist_ok=True)
    with open(os.path.join(state, "serve.log"), "a", encoding="utf-8") as log:
        idle = os.environ.get("CORTEX_SERVE_IDLE", "900")  # tests shorten it so no server outlives them
        subprocess.Popen([sys.executable, "-m", "cortex", "serve", "--dir", store_root, "--idle", idle],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True)


def serve(store: "Store", idle: float = 900.0, debounce: float = 0.3) -> str:
    """Serve until idle; returns why it stopped. Raises AlreadyServing when another server holds the store."""
    import fcntl

    from cortex.errors import CortexError
    from cortex.hooks import prompt_context
    from cortex.index import Index
    from cortex.watch import change_observer, stop_on_sigterm

    store.state_dir.mkdir(parents=True, exist_ok=True)
    lock = open(store.state_dir / "serve.lock", "a+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise CortexError(f"a `cortex serve` already runs for {store.root}") from None
    path = socket_path(str(store.root))
    if os.path.exists(path):
        os.unlink(path)  # a stale socket from a server that died; the lock says none runs
    changed = threading.Event()
    stop_on_sigterm()
    index = Index(store)
    index.sync(full=True, progress=False)
    store.memories_dir.mkdir(parents=True, exist_ok=True)
    observer = change_observer(store.memories_dir, changed)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    server.settimeout(0.25)
    last = time.monotonic()
    reason = "idle"
    try:
        while time.monotonic() - last < idle:
            if changed.is_set():
                time.sleep(debounce)
                changed.clear()
                index.sync(full=True, progress=False)
            try:
                connection, _ = server.accept()
            except socket.timeout:
                continue
            last = time.monotonic()
            with connection:
                connection.settimeout(2.0)
                try:
                    request = json.loads(_read_line(connection) or b"{}")
                    answer: dict[str, object]
                    if request.get("op") == "prompt":
                        answer = {"context": prompt_context(store, str(request.get("prompt", "")), index=index)}
                    else:
                        answer = {"ok": True, "pid": os.getpid()}
                except Exception as exc:  # one bad request never stops the server
                    store.log(f"serve: {exc!r}")
                    answer = {"error": str(exc)}
                try:
                    connection.sendall(json.dumps(answer).encode() + b"\n")
                except OSError:
                    pass
    except KeyboardInterrupt:
        reason = "stopped by a signal"
    finally:
        observer.stop()
        server.close()
        if os.path.exists(path):
            os.unlink(path)
        lock.close()
    return reason
