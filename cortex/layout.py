"""Where things live in a store folder, with the standard library alone: the hooks' fast paths use it too."""

from __future__ import annotations

import contextlib
import os

from cortex.gitfacts import branch_and_head, worktree_root

STORE_DIRNAME = ".cortex"


def global_root() -> str:
    """`$CORTEX_HOME`, default `~/.cortex` (not resolved)."""
    return os.path.expanduser(os.environ.get("CORTEX_HOME") or os.path.join(os.path.expanduser("~"), ".cortex"))


def linked_folder(store_root: str) -> str | None:
    """The store folder, one of its own folders (`memories/`, `cache/`, `state/`) or an entry directly in `cache/`
    or `state/` that is a symbolic link, or None. A repository can commit such a link to send cortex's reads,
    writes and `reset` elsewhere (`cache/commit` -> a file to overwrite); cortex never makes one, so a store
    holding one is not used (docs/security.md)."""
    for path in (store_root, *(os.path.join(store_root, name) for name in ("memories", "cache", "state"))):
        if os.path.islink(path):
            return path
    for name in ("cache", "state"):
        try:
            with os.scandir(os.path.join(store_root, name)) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        return entry.path
        except OSError:
            continue  # not made yet
    return None


def find_store(cwd: str) -> str | None:
    """The project `.cortex` folder at or above `cwd` (never the global store); $CORTEX_DIR wins. None also for a
    store with a linked folder (`linked_folder`): the full path says why."""
    explicit = os.environ.get("CORTEX_DIR")
    if explicit:
        return os.path.abspath(explicit) if os.path.isdir(explicit) and linked_folder(explicit) is None else None
    if "\x00" in cwd:
        return None  # not a path any folder can have (a garbled hook payload)
    home = os.path.realpath(global_root())
    folder = os.path.realpath(cwd)
    while True:
        candidate = os.path.join(folder, STORE_DIRNAME)
        if os.path.isdir(candidate) and os.path.realpath(candidate) != home:
            return candidate if linked_folder(candidate) is None else None
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


# A file system stamps a change with its clock's last tick (up to 10 ms old), so two changes that close together
# may leave the same times: a key taken between them would not tell them apart.
SETTLE_NS = 50_000_000


def signature(store_root: str) -> str:
    """The stat of what a briefing depends on: cache commit, cortex's own writes, config, memory folders."""
    return _signature(store_root)[0]


def _signature(store_root: str, files_only: bool = False) -> tuple[str, int]:
    """(`signature`, its newest time); `files_only`: the memory folders alone."""
    parts = []
    newest = 0
    memories = os.path.join(store_root, "memories")
    for path in ((memories,) if files_only else (os.path.join(store_root, "cache", "commit"),
                 os.path.join(store_root, "state", "changed"), os.path.join(store_root, "config.yaml"), memories)):
        try:
            stat = os.stat(path)
            parts.append(f"{stat.st_mtime_ns}:{stat.st_size}")
            newest = max(newest, stat.st_mtime_ns)
        except OSError:
            parts.append("-")
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(memories)):
            folder = os.path.join(memories, name)
            if os.path.isdir(folder):
                stamp = os.stat(folder).st_mtime_ns
                parts.append(f"{name}:{stamp}")
                newest = max(newest, stamp)
    return "|".join(parts), newest


def briefing_key(store_root: str, version: str, settled: bool = False) -> str:
    """What the cached briefing (`state/briefing.json`) is valid for: cortex's version, branch, HEAD, signature.
    `settled`: taken once the signature's newest time is SETTLE_NS old, so a change made after the key moves a time it
    holds."""
    root = worktree_root(os.path.dirname(store_root))
    branch, head = branch_and_head(root)
    made, newest = _signature(store_root)
    if settled:
        import time

        while 0 <= (wait := newest + SETTLE_NS - time.time_ns()) <= SETTLE_NS:
            time.sleep(wait / 1e9)
            made, newest = _signature(store_root)
    return f"{version}|{branch}|{head}|{made}|{_global_signature(store_root)}"


def _global_signature(store_root: str) -> str:
    """The global store's memory folders (its section of the briefing), as one part of a key (no `|`)."""
    home = global_root()
    if not os.path.isdir(os.path.join(home, "memories")) or os.path.realpath(home) == os.path.realpath(store_root):
        return ""
    return _signature(home, files_only=True)[0].replace("|", ";")


def saved_briefing(store_root: str, name: str = "briefing.json") -> dict | None:
    """A briefing saved under `state/` (shown: `briefing.json`; built ahead: `briefing.next.json`), or None."""
    from json import loads

    try:
        with open(os.path.join(store_root, "state", name), encoding="utf-8") as handle:
            saved = loads(handle.read())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def start_briefing(store_root: str, version: str, stale_ok: bool = True) -> tuple[dict | None, dict | None]:
    """What a SessionStart shows from `state/`: `(briefing, None)` when a saved one matches the store (a match in
    `briefing.next.json`, built ahead, becomes `briefing.json`); with `stale_ok`, `(briefing, stale)` for the newest
    briefing of this cortex, branch and config when only memory files changed outside cortex or HEAD moved and every
    memory it shows is still there (`stale`: when and at which HEAD it was saved); `(None, None)` otherwise. The
    session's first prompt then brings what changed (`cortex.events.briefing_catch_up`): a hook cannot afford to build
    it again."""
    branch, head = branch_and_head(worktree_root(os.path.dirname(store_root)))
    version_branch = f"{version}|{branch}|"  # `briefing_key`'s form: then HEAD, then the store's signature
    signature = f"{_signature(store_root)[0]}|{_global_signature(store_root)}"
    key = f"{version_branch}{head}|{signature}"
    saved = {name: saved_briefing(store_root, name) for name in ("briefing.json", "briefing.next.json")}
    current, ahead = saved["briefing.json"], saved["briefing.next.json"]
    if current is not None and current.get("key") == key:
        return current, None
    if ahead is not None and ahead.get("key") == key:
        try:
            os.replace(os.path.join(store_root, "state", "briefing.next.json"),
                       os.path.join(store_root, "state", "briefing.json"))
        except OSError:
            return None, None
        return ahead, None
    if not stale_ok:
        return None, None
    parts = signature.split("|")
    found: tuple[dict | None, dict | None] = (None, None)
    for name, briefing in saved.items():
        old = (briefing or {}).get("key")
        if not isinstance(old, str) or not old.startswith(version_branch):
            continue
        then, _, old_signature = old[len(version_branch):].partition("|")
        old_parts = old_signature.split("|")
        if then == str(head) and old_parts[3:] == parts[3:]:
            continue  # no memory file added or removed, HEAD where it was: what changed is the cache's, built again
        # Not after a cortex write (the next briefing is being built ahead), an edited config, a change to the
        # global store (its section is rebuilt), nor once a memory it shows is gone (never shown once deleted).
        files = (briefing or {}).get("files")
        if old_parts[1:3] != parts[1:3] or old_parts[-1:] != parts[-1:] or not isinstance(files, list) \
                or not all(os.path.isfile(os.path.join(store_root, "memories", str(rel))) for rel in files):
            continue
        try:
            at = os.stat(os.path.join(store_root, "state", name)).st_mtime_ns
        except OSError:
            continue
        if found[1] is None or at > found[1]["since_ns"]:
            found = (briefing, {"since_ns": at, "head": then, "now": str(head)})
    return found


def catch_up_file(store_root: str, session: str) -> str:
    """`state/catch-up/<session>.json`: what a session shown an older briefing gets at its first prompt."""
    return os.path.join(store_root, "state", "catch-up", os.path.basename(injections_file(store_root, session))[:-1])


def private_dir(create: bool = False) -> str | None:
    """This user's folder for cortex's sockets: `$XDG_RUNTIME_DIR/cortex` when that folder is this uid's, else
    `cortex-<uid>` in the temp folder; None unless it is a real folder (not a link) owned by this uid that no
    one else may enter, so a socket in it can be neither squatted nor reached by another user. `create`: make
    it (0700) when missing (the server; a client only looks)."""
    import stat

    uid = os.getuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    try:
        found = os.lstat(runtime) if os.path.isabs(runtime) else None
        # Ours, and no one else may rename what is in it
        usable = found is not None and stat.S_ISDIR(found.st_mode) and found.st_uid == uid and not found.st_mode & 0o022
    except OSError:
        usable = False
    if usable:
        folder = os.path.join(runtime, "cortex")
    else:  # `tempfile.gettempdir`'s choice, without importing it in a hook
        temp = next((value for name in ("TMPDIR", "TEMP", "TMP")
                     if (value := os.environ.get(name)) and os.path.isdir(value)), "/tmp")
        folder = os.path.join(temp, f"cortex-{uid}")
    if create:
        with contextlib.suppress(OSError):  # there already (checked below), or not makeable (then no server)
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)  # whatever the umask left of it
    try:
        found = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != uid or found.st_mode & 0o077:
        return None  # a link, another user's folder (squatted), or one others may enter: no server
    return folder


def socket_path(store_root: str, create: bool = False) -> str | None:
    """The socket of the store's `cortex serve` in this user's private folder (`private_dir`), named after the
    store folder itself (its device and inode: the same for every path that leads to it, and no two store
    folders share them); None when there is no private folder to put it in (then no server is used)."""
    folder = private_dir(create)
    if folder is None:
        return None
    try:
        found = os.stat(store_root)
    except OSError:
        return None
    path = os.path.join(folder, f"{found.st_dev:x}-{found.st_ino:x}.sock")
    return path if len(path.encode()) < 100 else None  # AF_UNIX paths are ~107 bytes at most


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


def server_up(store_root: str) -> bool:
    """Whether a `cortex serve` holds the store's serve.lock (a socket alone may be a killed server's)."""
    return lock_held(os.path.join(store_root, "state", "serve.lock"))


def watcher_ready(store_root: str) -> bool:
    """Whether a `cortex watch` vouches for this store's cache (`state/watch.ready`, taken after its first sync)."""
    return lock_held(os.path.join(store_root, "state", "watch.ready"))


def injections_file(store_root: str, session: str) -> str:
    """`state/injections/<session>.jsonl`: the memories the hooks showed a session (`cortex.salience`)."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in session)[:100]
    return os.path.join(store_root, "state", "injections", name + ".jsonl")


def subagent_tasks_file(store_root: str, session: str) -> str:
    """`state/subagents/<session>.jsonl`: the tasks the session gave its sub-agents (`cortex.subagents`)."""
    return os.path.join(store_root, "state", "subagents", os.path.basename(injections_file(store_root, session)))


def queued_jobs(store_root: str) -> bool:
    """Whether LLM capture jobs wait in `state/queue/` (the session start retries them)."""
    queue = os.path.join(store_root, "state", "queue")
    try:
        return any(name.endswith(".json") for name in os.listdir(queue))
    except OSError:
        return False
