"""The SessionStart fast path: answer from the cached briefing with nothing but `os` and `json`.

A hook is a fresh process on every event, and the budget for a cached
SessionStart is twice a bare `python -c pass`. Importing the store (pathlib,
dataclasses, …) alone would spend most of it, so the cache key — branch,
HEAD, and the stat of what the briefing depends on — is computed here with
`os.path`, and `cortex.briefing` uses these same functions to write the cache,
so the two cannot disagree.
"""

from __future__ import annotations

import json
import os
import sys

VERSION_FILE_KEYS = ("manifest", "changed", "config", "memories")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def find_store(cwd: str) -> str | None:
    """The project `.cortex` folder at or above `cwd` (never the global store); $CORTEX_DIR wins."""
    explicit = os.environ.get("CORTEX_DIR")
    if explicit:
        return os.path.abspath(explicit) if os.path.isdir(explicit) else None
    home = os.path.realpath(os.environ.get("CORTEX_HOME") or os.path.join(os.path.expanduser("~"), ".cortex"))
    folder = os.path.realpath(cwd)
    while True:
        candidate = os.path.join(folder, ".cortex")
        if os.path.isdir(candidate) and os.path.realpath(candidate) != home:
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def worktree_root(start: str) -> str | None:
    folder = os.path.realpath(start)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def git_dir(root: str) -> str | None:
    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    text = (_read(dot_git) or "").strip()
    if text.startswith("gitdir:"):
        target = text[len("gitdir:"):].strip()
        return target if os.path.isabs(target) else os.path.realpath(os.path.join(root, target))
    return None


def branch_and_head(root: str | None) -> tuple[str | None, str | None]:
    """(branch, HEAD sha) read from the ref files; (None, None) outside git. Packed refs are read too."""
    if root is None:
        return None, None
    directory = git_dir(root)
    if directory is None:
        return None, None
    head = (_read(os.path.join(directory, "HEAD")) or "").strip()
    if not head.startswith("ref: "):
        return None, head or None
    ref = head[5:].strip()
    branch = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else None
    common = directory
    pointer = _read(os.path.join(directory, "commondir"))
    if pointer:
        common = os.path.realpath(os.path.join(directory, pointer.strip()))
    for base in (directory, common):
        value = (_read(os.path.join(base, ref)) or "").strip()
        if len(value) == 40:
            return branch, value
    for line in (_read(os.path.join(common, "packed-refs")) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref:
            return branch, parts[0]
    return branch, None


def signature(store_root: str) -> str:
    """The stat of what a briefing depends on: manifest, cortex's own writes, config, the memory folders."""
    parts = []
    memories = os.path.join(store_root, "memories")
    for path in (os.path.join(store_root, "cache", "manifest.bin"), os.path.join(store_root, "state", "changed"),
                 os.path.join(store_root, "config.yaml"), memories):
        try:
            stat = os.stat(path)
            parts.append(f"{stat.st_mtime_ns}:{stat.st_size}")
        except OSError:
            parts.append("-")
    try:
        for name in sorted(os.listdir(memories)):
            folder = os.path.join(memories, name)
            if os.path.isdir(folder):
                parts.append(f"{name}:{os.stat(folder).st_mtime_ns}")
    except OSError:
        pass
    return "|".join(parts)


def briefing_key(store_root: str, version: str) -> str:
    root = worktree_root(os.path.dirname(store_root))
    branch, head = branch_and_head(root)
    return f"{version}|{branch}|{head}|{signature(store_root)}"


def session_start(raw: str) -> bool:
    """Print the cached briefing as SessionStart additionalContext; False when the slow path must run."""
    from cortex import __version__

    if os.environ.get("CORTEX_NESTED") == "1":
        return True  # nothing to do inside cortex's own claude -p
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return False
    cwd = payload.get("cwd") if isinstance(payload, dict) else None
    store_root = find_store(str(cwd or os.getcwd()))
    if store_root is None:
        return True  # not a cortex project: say nothing
    try:
        with open(os.path.join(store_root, "state", "briefing.json"), encoding="utf-8") as handle:
            cached = json.load(handle)
    except (OSError, ValueError):
        return False
    if not isinstance(cached, dict) or cached.get("key") != briefing_key(store_root, __version__):
        return False
    _ensure_server(store_root)
    queue = os.path.join(store_root, "state", "queue")
    if os.path.isdir(queue) and any(name.endswith(".json") for name in os.listdir(queue)):
        return False  # queued capture jobs: the full hook starts the worker
    sys.stdout.write(json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart",
                                                        "additionalContext": cached.get("text", "")}}))
    sys.stdout.flush()
    return True


def socket_path(store_root: str) -> str:
    """`state/serve.sock`, or a short path in the temp folder when that one is too long for AF_UNIX."""
    path = os.path.join(store_root, "state", "serve.sock")
    if len(path.encode()) < 100:
        return path
    import hashlib
    import tempfile

    digest = hashlib.sha1(os.path.realpath(store_root).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"cortex-{digest}.sock")


def lock_held(path: str) -> bool:
    """Whether another process holds an flock on `path` (a server or watcher that is alive)."""
    import fcntl

    if not os.path.exists(path):
        return False
    try:
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def server_running(store_root: str) -> bool:
    """Whether a `cortex serve` holds the store's serve.lock (it may still be loading its index)."""
    return lock_held(os.path.join(store_root, "state", "serve.lock"))


def _ensure_server(store_root: str) -> None:
    """Start the resident query process when none runs (it exits by itself when idle)."""
    if os.path.exists(socket_path(store_root)) or server_running(store_root):
        return
    try:
        from cortex import serve

        serve.start_detached(store_root)
    except OSError:
        pass


def prompt(raw: str) -> bool:
    """UserPromptSubmit through a running `cortex serve`; False when the in-process path must run."""
    from cortex import serve

    if os.environ.get("CORTEX_NESTED") == "1":
        return True
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return False
    if not isinstance(payload, dict):
        return False
    text = str(payload.get("prompt") or "").strip()
    store_root = find_store(str(payload.get("cwd") or os.getcwd()))
    if store_root is None or not text or text.startswith("/"):
        return True
    answer = serve.ask(store_root, {"op": "prompt", "prompt": text})
    if answer is None or "context" not in answer:
        return False
    if answer["context"]:
        sys.stdout.write(json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                            "additionalContext": answer["context"]}}))
        sys.stdout.flush()
    return True
