"""JSON and the resident server's socket for the hot paths, on CPython's C halves alone.

A hook is a fresh process, and on this class of machine `import json` costs
~7 ms (it pulls in `re`, `enum`, `functools` and `collections`) and `import
socket` ~7 ms more (`enum`, `selectors`), against ~10 ms for a bare `python
-c pass`. The C parts under them (`_json`, `_socket`) import in well under a
millisecond and do all of the work: `loads` and `dumps` here give the same
results as `json.loads` / `json.dumps` (the C scanner and encoder are what
`json` itself runs), and `ask` is the client of `cortex serve`'s one-line
protocol (`cortex.serve`). On an interpreter without those C parts, the
standard modules are used.
"""

from __future__ import annotations

import os
import sys

try:
    import _json
    import _socket
except ImportError:  # another interpreter: the standard modules (slower to import, same results)
    _json = _socket = None  # type: ignore[assignment]

_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}
_WHITESPACE = " \t\n\r"


class _Context:
    """What `_json.make_scanner` reads off a decoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict[str, str] = {}


_scan = _json.make_scanner(_Context()) if _json is not None else None
_encode = _json.make_encoder(None, None, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True) \
    if _json is not None else None


def loads(text: str | bytes) -> object:
    """`json.loads`: raises ValueError on anything that is not one JSON document."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if _scan is None:
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"not JSON (at character {exc.value})") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"not JSON: extra data at character {end}")
    return value


def dumps(value: object) -> str:
    """`json.dumps(value)` for what the hot paths send (dicts, lists, strings, numbers, booleans, None)."""
    if _encode is None or not isinstance(value, (dict, list)):
        import json

        return json.dumps(value)
    return "".join(_encode(value, 0))


# What a server reads of one request line: a prompt hook's or `cortex recall`'s request is a few kilobytes.
MAX_REQUEST = 1 << 20
PROMPT_CHARS = 20_000  # of a prompt, what is sent and searched (the hook's own process reads no more of it)


def peer_uid(connection: object) -> int | None:
    """The uid of the process at the other end of a connected unix socket (`SO_PEERCRED`), or None where the
    system does not say (then the private folder of `cortex.layout.private_dir` is what keeps others out)."""
    module = _socket
    if module is None:
        import socket as module  # type: ignore[no-redef]
    option = getattr(module, "SO_PEERCRED", None)
    if option is None:
        return None
    raw = connection.getsockopt(module.SOL_SOCKET, option, 12)  # type: ignore[attr-defined]
    return int.from_bytes(raw[4:8], sys.byteorder)  # struct ucred: pid, uid, gid (native 32-bit integers)


def ask(path: str | None, request: dict[str, object], timeout: float = 0.5) -> dict[str, object] | None:
    """Send one request to the server listening on the unix socket `path` (`cortex.layout.socket_path`); None
    when there is none, it is too slow, it answers nonsense or it is not this user's (the socket file's owner
    and the peer's uid are checked: a process of another user never hears a request)."""
    import stat

    if path is None:
        return None
    try:
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != os.getuid():
        return None
    module = _socket
    if module is None:
        import socket as module  # type: ignore[no-redef]
    try:
        client = module.socket(module.AF_UNIX, module.SOCK_STREAM)
    except OSError:
        return None
    try:
        client.settimeout(timeout)
        client.connect(path)
        uid = peer_uid(client)
        if uid is not None and uid != os.getuid():
            return None  # another user's process: it hears nothing
        client.sendall(dumps(request).encode() + b"\n")
        chunks: list[bytes] = []
        while not chunks or b"\n" not in chunks[-1]:
            chunk = client.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        answer = loads(b"".join(chunks).partition(b"\n")[0])
        return answer if isinstance(answer, dict) else None
    except (OSError, ValueError):  # no server, a timeout (an OSError), a broken answer
        return None
    finally:
        client.close()
