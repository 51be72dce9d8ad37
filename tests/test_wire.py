"""`cortex.wire`: the client of `cortex serve`'s one-line protocol."""

from __future__ import annotations

import json
import os
import socket
import threading

from cortex import wire

def test_ask_sends_one_line_and_reads_the_answer(tmp_path):
    path = str(tmp_path / "serve.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    context = "line one\n" + "é" * 200_000  # longer than one read
    received = []

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            request = b""
            while not request.endswith(b"\n"):
                request += connection.recv(4096)
            received.append(json.loads(request))
            connection.sendall(json.dumps({"context": context, "ids": ["a"]}).encode() + b"\n")

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        got = wire.ask(path, {"op": "prompt", "prompt": "redis", "wait": 1}, timeout=10)
    finally:
        thread.join(10)
        server.close()
    assert received == [{"op": "prompt", "prompt": "redis", "wait": 1}]
    assert got == {"context": context, "ids": ["a"]}
    assert wire.ask(None, {"op": "state"}) is None  # no private folder: no server


def test_ask_without_a_server_or_with_a_silent_one_is_none(tmp_path):
    assert wire.ask(str(tmp_path / "none.sock"), {"op": "state"}) is None
    path = str(tmp_path / "silent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    try:
        assert wire.ask(path, {"op": "state"}, timeout=0.2) is None  # accepted by the kernel, never answered
        (tmp_path / "stale.sock").touch()  # a file where a socket was: no server behind it
        assert wire.ask(str(tmp_path / "stale.sock"), {"op": "state"}) is None
    finally:
        server.close()
    assert not os.path.exists(str(tmp_path / "none.sock"))
