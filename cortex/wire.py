"""The client of `cortex serve`'s one-line JSON protocol (`cortex.serve`), and what both sides check."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys

# What a server reads of one request line: a prompt hook's or `cortex recall`'s request is a few kilobytes.
MAX_REQUEST = 1 << 20
PROMPT_CHARS = 20_000  # of a prompt, what is sent and searched (the hook's own process reads no more of it)


def peer_uid(connection: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected unix socket (`SO_PEERCRED`), or None where the
    system does not say (then the private folder of `cortex.layout.private_dir` is what keeps others out)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    raw = connection.getsockopt(socket.SOL_SOCKET, option, 12)  # type: ignore[attr-defined]
    return int.from_bytes(raw[4:8], sys.byteorder)  # struct ucred: pid, uid, gid (native 32-bit integers)


def ask(path: str | None, request: dict[str, object], timeout: float = 0.5) -> dict[str, object] | None:
    """Send one request to the server listening on the unix socket `path` (`cortex.layout.socket_path`); None
    when there is none, it is too slow, it answers nonsense or it is not this user's (the socket file's owner
    and the peer's uid are checked: a process of another user never hears a request)."""
    if path is None:
        return None
    try:
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != os.getuid():
        return None
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    with client:
        try:
            client.settimeout(timeout)
            client.connect(path)
            uid = peer_uid(client)
            if uid is not None and uid != os.getuid():
                return None  # another user's process: it hears nothing
            client.sendall(json.dumps(request).encode() + b"\n")
            chunks: list[bytes] = []
            while not chunks or b"\n" not in chunks[-1]:
                chunk = client.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
            answer = json.loads(b"".join(chunks).partition(b"\n")[0])
        except (OSError, ValueError):  # no server, a timeout (an OSError), a broken answer
            return None
    return answer if isinstance(answer, dict) else None
