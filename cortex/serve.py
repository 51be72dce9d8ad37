"""`cortex serve`: a resident query process per store, so prompt-time recall costs a socket round trip.

A fresh hook process pays numpy, Whoosh, the manifest and a stat of every
file before it can search (~0.7 s at 10,000 memories). `cortex serve` keeps
an Index warm, follows the files with a watchdog observer (debounced sync, as
`cortex watch` does, and like it vouches for the files so other processes
skip their stat of every file), keeps the SessionStart briefing built, runs
numpy with one BLAS thread, and answers requests on a unix socket in the
user's private folder (no network port). One per store (`state/serve.lock`); it
exits by itself after `--idle` seconds without a request. The SessionStart
hook starts it detached; the prompt hook asks it with a short timeout and
falls back to recall in its own process when it is absent or slow.

Protocol: one JSON line in, one JSON line out. `{"op": "prompt", "prompt": "…", "session": …, "wait": s}`
gets `{"context": "…" | null, "ids": [the memories it names]}`, or `{"warming": true}` while the indexes are
still loading `wait` seconds later (the hook then recalls in its own process); `{"op": "ping"}`
is answered once the server is warm, `{"op": "state"}` at once (`ready`
says whether it answers; `current`, whether the walk of the files made at its
start is in: until then it answers from the committed cache, and a prompt whose
session has a catch-up to be told waits for it; `settled`, whether the work
of its start beside the requests is done and the next briefing built).
`{"op": "recall", "query": …, "limit": …, …}` runs
`cortex recall`'s search on the warm indexes (`cortex.cli.recall` asks it
first) and answers `{"hits": [...], "notes": [...]}`. Nothing else is answered:
an unknown op or field, a field of the wrong type or range, or a request line
over `wire.MAX_REQUEST` gets `{"error": …}` and runs nothing.

Only its owner reaches it: the socket is in the user's private folder
(`cortex.layout.private_dir`, 0700, checked before each use), mode 0600, and
each side checks the other's uid (`SO_PEERCRED`) before a byte of request or
answer is sent.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
TYPE_CHECKING = False
if TYPE_CHECKING:  # importing the store costs a hook ~20 ms, `typing` ~4 ms; the client half of this module must not
    from typing import Any

    from cortex.index import Indexes
    from cortex.store import Store


from cortex import ONE_THREAD  # noqa: E402
from cortex.layout import socket_path  # noqa: E402  (os-level, shared with the hook fast path)
from cortex.wire import MAX_REQUEST, peer_uid  # noqa: E402


class RequestRefused(Exception):
    """A request this server does not answer (the client is told why, and nothing runs)."""


def _read_line(connection: socket.socket, limit: int) -> bytes:
    """One newline-terminated message (the whole protocol is one JSON line each way), of at most `limit` bytes:
    past it, reading stops and the request is refused (what is read stays bounded whatever a client sends)."""
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


def ask(store_root: str, request: dict[str, object], timeout: float = 0.5) -> dict[str, object] | None:
    """Send one request to the store's running server (`cortex.wire.ask`); None when there is none or it is
    too slow."""
    from cortex.wire import ask as ask_at

    return ask_at(socket_path(store_root), request, timeout)


REQUEST_TIME = 2.0  # seconds a client has to send its whole request line


BRIEFING_CHECK = 2.0  # seconds between looks at whether the cached briefing still matches branch, HEAD and store
QUIET = 1.0  # seconds without a request before the server builds the next briefing
COLLECT_EVERY = 30.0  # seconds between collections of the young generations, while requests pause
COLLECT_ALL_EVERY = 600.0  # ... and of every generation
# How long a command waits for the server to finish a sync before running on its own: a sync after a write takes
# ~1 s at 100,000 memories, running the command in its own process several.
COMMAND_WAIT = 5.0
# What the prompts of a server with nothing searchable yet wait for its build, in all (`_current_for`): the
# example store's build takes well under a second; at 10,000 memories it takes ~6 s, and each prompt of those
# seconds would wait its 2 s for nothing. Each waits at most its `wait` less `ANSWER_ROOM`: the hook gives up
# half a second after its `wait`, and then recalls in its own process (which would build the whole index).
UNBUILT_WAIT = 1.5
ANSWER_ROOM = 0.5


def serve(store: "Store", idle: float = 900.0, debounce: float = 0.3) -> str:
    """Serve until idle; returns why it stopped. Raises CortexError when another server holds the store.

    The socket answers at once; the indexes warm in a background thread (a prompt that comes first gets
    `{"warming": true}` and the hook recalls in its own process). Once warm, the server vouches for the
    store's files as `cortex watch` does (`state/watch.ready`), so other cortex processes skip their stat of
    every file, and it keeps the SessionStart briefing built: after each sync, and when branch or HEAD moved.
    """
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
        raise CortexError("no private folder for the server's socket (`$XDG_RUNTIME_DIR/cortex` or "
                          "`cortex-<uid>` in the temp folder must be this user's, mode 0700): prompts are "
                          "answered in the hook's own process")
    if os.path.lexists(path):
        os.unlink(path)  # a stale socket from a server that died (`kill -9`); the lock says none runs
    stop_on_sigterm()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)  # whatever the umask: the owner's alone (its folder already keeps others out)
    server.listen(8)
    server.settimeout(0.25)
    warm = _Warm(store, debounce)
    warm.start()
    try:
        return _loop(store, server, warm, idle)
    except KeyboardInterrupt:
        return "stopped by a signal"
    finally:
        warm.stop()
        server.close()
        if os.path.lexists(path):
            os.unlink(path)
        lock.close()


class _Warm(threading.Thread):
    """The server's indexes, warmed and kept in step in the background; every use holds `busy`."""

    def __init__(self, store: "Store", debounce: float) -> None:
        super().__init__(daemon=True, name="cortex-serve-warm")
        from cortex.index import Indexes

        self.store, self.debounce = store, debounce
        self.indexes = Indexes()
        self.busy = threading.Lock()
        self.ready = threading.Event()  # answering (from the committed cache while the walks go on)
        self.walked = threading.Event()  # the walks of the files made at the start are in (`_catch_up`)
        self.current = threading.Event()  # and what they found is in the answering indexes
        self.settled = threading.Event()  # the start-up's work beside the requests is done, the briefing built
        self.next: dict[str, Any] = {}  # store root -> its next index, walked and not yet answering (under `busy`)
        self.stopping = threading.Event()
        self.watched: list[tuple["Store", threading.Event, Any]] = []  # (store, changed event, observer)
        self.changes: dict[str, Any] = {}  # store root -> the files its observer saw change (`watch.Changes`)
        self.vouches: list[Any] = []  # the `watch.ready` locks this server holds
        self.written: dict[str, int] = {}
        self.asked = 0.0  # monotonic time of the last request (`_loop`)
        # A store whose committed cache has nothing searchable yet (a fresh clone: the SessionStart that built its
        # first briefing read the files' metadata only), so a prompt waits for the walk's build (`_current_for`).
        self.unbuilt = False
        self.unbuilt_wait = UNBUILT_WAIT  # what is left of the time prompts may wait for that build

    def run(self) -> None:
        from cortex.files import hold_lock
        from cortex.store import iter_stores
        from cortex.watch import Changes, change_observer, written_stamp

        try:
            with self.busy:
                for each in iter_stores(self.store):
                    each.memories_dir.mkdir(parents=True, exist_ok=True)
                    changed = threading.Event()
                    self.changes[str(each.root)] = Changes()
                    self.watched.append((each, changed, change_observer(each.memories_dir, changed,
                                                                        self.changes[str(each.root)])))
                    self.written[str(each.root)] = written_stamp(each)
                    self.indexes.get(each).trust_watcher = False  # this server is the watcher
                    self.indexes.get(each).keeps_views = False  # its views stay in memory; files are for one-shots
                    self.indexes.get(each).older_centralities_ok = True  # newer ones once requests pause
                    # The sync (a stat of every file: ~0.45 s at 100,000 memories) is made by a forked child while
                    # this thread warms from the committed cache on the other core (`Index.confirm`). Its
                    # watchers started first, so nothing written from now on is missed; they take no lock a sync
                    # needs, so the fork beside their threads is safe.
                    index = self.indexes.synced(each, full=True, ahead=True, resident=True)
                    index.query_encoder(), index.searcher()  # loaded now, not by the first prompt
                    self.unbuilt = self.unbuilt or index.unbuilt()
            self._warm_contextual()
            # Serve what is ready: prompts and commands are answered from here on, from the committed cache while
            # the children's walks go on, and while the next SessionStart's briefing is built on its own index
            # (at 100,000 memories it took seconds, and until then every prompt fell back to a recall in the
            # hook's own process, ~2.5 s there).
            self.ready.set()
            self._catch_up()
            for each, _changed, _observer in self.watched:
                vouch = hold_lock(each.state_dir / "watch.ready")  # None: a `cortex watch` vouches already
                if vouch is not None:
                    self.vouches.append(vouch)
            self.current.set()
            self._decode_columns()
            self._finish_views()  # before the briefing's build, which this thread waits for (seconds at 100,000)
        except Exception as exc:  # the server answers "warming" and hooks recall in their own process
            self.store.log(f"serve: warming failed: {exc!r}")
            self.unbuilt = False  # no build to wait for: a prompt is answered with what there is
            self._release()
            return
        finally:
            from cortex.spawn import resident

            # Warmed with the collector off (as fast as a command), and it stays off: at 100,000 memories its
            # passes over what each command makes (columns of 100,000 rows, their tuples) made a served
            # `remember` 1.55 s instead of 0.74 s and `status` 237 instead of 146 ms. The server collects when
            # requests pause (`_collect`).
            resident(collect=False)
        try:
            self._briefing()
        except Exception as exc:  # the loop below tries again
            self.store.log(f"serve: briefing not built: {exc!r}")
        self.settled.set()
        last_look = time.monotonic()
        due = False  # a sync happened since the briefing was last looked at
        cold = False  # a sync happened since a recall last made the per-sync views (`_warm_views`)
        collected = full = time.monotonic()  # when garbage was last collected, young and all
        while not self.stopping.wait(0.25):
            try:
                if self.debounce and self.pending():
                    time.sleep(self.debounce)  # a burst of changes becomes one sync; not holding `busy` meanwhile
                with self.busy:
                    synced = self.follow(0.0)
                due, cold = synced or due, synced or cold
                if cold and time.monotonic() - self.asked > QUIET:  # once requests pause, as the briefing below
                    with self.busy:
                        self._warm_views()
                    self._decode_columns()
                    cold = False
                if time.monotonic() - self.asked > QUIET:
                    self._finish_views()
            except Exception as exc:  # a sync that failed: no longer vouch for files this server may miss
                self.store.log(f"serve: sync failed: {exc!r}")
                self._release()
                continue
            # The next SessionStart's briefing is built once requests pause (QUIET seconds): built after every
            # write it took ~0.5 s of CPU at 10,000 memories from the commands that came next (`remember` x3).
            if (due or time.monotonic() - last_look > BRIEFING_CHECK) and time.monotonic() - self.asked > QUIET:
                self._briefing()
                last_look, due = time.monotonic(), False
            if time.monotonic() - self.asked > QUIET and time.monotonic() - collected > COLLECT_EVERY:
                collected, full = self._collect(time.monotonic() - full > COLLECT_ALL_EVERY, full)

    def _catch_up(self) -> None:
        """Wait for each store's walk (`Index.ensure(ahead=True)`). Where it found files changed while no server
        watched, the next index (`Index.successor`, the walk's commit) is warmed here while the current one
        answers, then put in its place: at 100,000 memories forgetting the views and warming them again under
        `busy` kept every prompt waiting ~0.6 s. Once the walks are in (`walked`), a session's catch-up is read
        from the next indexes (`catch_up_indexes`), before they are warm. A store synced meanwhile (a write
        served in between) keeps its index, which read the walk's commit then."""
        from cortex import recall as recall_module

        pending = []
        for each, _changed, _observer in self.watched:
            index = self.indexes.get(each)
            seen = index._version  # noqa: SLF001 - what it was synced to, to see whether a write came in between
            found = index.await_ahead()
            if found is not None:
                fresh = index.successor(*found)
                pending.append((each, index, seen, found, fresh))
                if fresh is not None:
                    self.next[str(each.root)] = fresh
        self.walked.set()
        for each, index, seen, found, fresh in pending:
            if fresh is not None:
                try:
                    recall_module.warm_views(each, fresh)
                except Exception as exc:  # the prompts make what they need
                    self.store.log(f"serve: warming the synced index failed: {exc!r}")
            with self.busy:
                self.next.pop(str(each.root), None)
                if self.indexes.get(each) is not index or index._version != seen:  # noqa: SLF001
                    if fresh is not None:
                        fresh.close_searcher()
                    index.stale()  # its next use syncs again: whatever that write read, the walk's commit is in
                    continue
                if fresh is not None:
                    self.indexes.put(each, fresh)
                    index.close_searcher()
                else:  # the walk failed, or its commit was replaced since: sync here, as `confirm` does
                    index.adopt(found)
                    index.searcher()
                    self._warm_views()

    def _finish_views(self) -> None:
        """Make, beside the requests, what the warm-up leaves out of each answering index, and put it in while the
        index is still at the manifest it was made from: the centralities where it answers with an earlier
        manifest's (`Index.older_centralities_ok`), and the link map a `recall` follows (prompts follow none;
        ~0.3 s at 100,000 memories, which the warm-up under `busy` made every prompt wait for)."""
        from cortex.recall import STRONG_LINK

        for each, _changed, _observer in self.watched:
            index = self.indexes.get(each)
            version = index._version  # noqa: SLF001 - what the views are made from
            if index.manifest is None or (not index.centralities_older and index.memoized(("hops", STRONG_LINK))):
                continue
            try:
                central = index.newer_centralities() if index.centralities_older else None
                hops = None if index.memoized(("hops", STRONG_LINK)) else index.hops_made(STRONG_LINK)
            except Exception as exc:  # a sync replaced what they were read from: the next pause tries again
                self.store.log(f"serve: views not made beside the requests: {exc!r}")
                continue
            with self.busy:
                if self.indexes.get(each) is not index or index._version != version:  # noqa: SLF001
                    continue
                if central is not None:
                    index.take_centralities(central)
                if hops is not None:
                    index.memo(("hops", STRONG_LINK), lambda: hops)

    def building(self) -> bool:
        """Whether the answering index has nothing searchable and the walk's build of it is not in yet."""
        return self.unbuilt and not self.current.is_set()

    def catch_up_indexes(self) -> "Indexes":
        """What a session's catch-up is read from (the caller holds `busy`): the answering indexes, with the
        next index in the place of each store whose walk found changes that are not in yet."""
        from cortex.index import Indexes

        if not self.next:
            return self.indexes
        mixed = Indexes()
        mixed._by_root = {**self.indexes._by_root, **self.next}  # noqa: SLF001
        return mixed

    def _warm_contextual(self) -> None:
        """Load the contextual model for re-ranking (`cortex.recall.use_contextual`): its vectors of memories
        that have none are computed in a background thread, and recall uses what there is meanwhile."""
        from cortex import recall as recall_module

        recall_module.use_contextual("background", worker=True)
        with self.busy:
            self._warm_views()

    def _collect(self, everything: bool, full: float) -> tuple[float, float]:
        """Collect cyclic garbage while requests pause (the collector is off in this process): the young
        generations every `COLLECT_EVERY` seconds, all of them every `COLLECT_ALL_EVERY`. Returns when it
        collected, and when it last collected everything."""
        import gc

        started = time.monotonic()
        found = gc.collect() if everything else gc.collect(1)  # not under `busy`: a prompt waits, never fails
        now = time.monotonic()
        if now - started > 0.2:
            self.store.log(f"serve: collecting garbage took {now - started:.2f} s ({found} objects)")
        return now, now if everything else full

    def _warm_views(self) -> None:
        """After a sync, make what a recall reads once per sync (the records, the filters, the rows of the
        vectors, the link map): at 100,000 memories the first prompt after a change paid ~0.5 s for them (the
        caller holds `busy`)."""
        from cortex import recall as recall_module
        from cortex.store import iter_stores

        try:
            stores = list(iter_stores(self.store))
            # No links: prompts follow none, and the map `recall` follows is made beside the requests
            # (`_finish_views`).
            recall_module.recall(stores, "warm up", limit=1, indexes=self.indexes, links=False)
        except Exception as exc:
            self.store.log(f"serve: warming after a sync failed: {exc!r}")

    def _decode_columns(self) -> None:
        """Decode what ranking reads of each candidate (`meta`) and `Index.read` (`hash`) for every memory and, up
        to 20,000 memories, build every memory's `Memory`, once ready
        and without `busy` (~130 ms at 100,000 memories; ~50 and ~110 ms at 10,000: the first prompts paid them
        a few at a time; at 100,000 the two would take ~2 s of a core after every sync, beside the next command);
        a sync meanwhile leaves them with the old manifest and searcher)."""
        try:
            for each, _changed, _observer in self.watched:
                index = self.indexes.get(each)
                if index.manifest is not None:
                    index.manifest.files.decode("meta", "hash")
                if index.manifest is not None:
                    index.memories_ahead()  # each candidate's `Memory`, built for all at once
        except Exception as exc:  # a convenience: the prompts decode what they read themselves
            self.store.log(f"serve: columns not decoded: {exc!r}")

    def pending(self) -> bool:
        """Whether a store changed since its last sync (its watcher saw a file change, or cortex wrote to it)."""
        from cortex.watch import written_stamp

        return any(changed.is_set() or written_stamp(each) != self.written.get(str(each.root))
                   for each, changed, _observer in self.watched)

    def follow(self, debounce: float) -> bool:
        """Sync a store whose watcher saw a change (after `debounce`, so a burst of changes is one sync) or that
        cortex itself wrote to since the last sync (the caller holds `busy`); True when one was synced."""
        from cortex.watch import account, fence, written_stamp

        synced = False
        if not self.current.is_set():
            return synced  # the walks are not done (`_catch_up`): what the watchers saw waits for them
        for each, changed, _observer in self.watched:
            stamp = written_stamp(each)
            if changed.is_set() or stamp != self.written[str(each.root)]:
                if changed.is_set() and debounce:
                    time.sleep(debounce)
                changed.clear()
                wrote = stamp != self.written[str(each.root)]
                # After a cortex write (this server's command, the upkeep, a hook), the files the observer named
                # once a fence came back, not a walk of every file (~0.5 s at 100,000 memories, which the next
                # command waited behind).
                fenced = fence(each, self.changes[str(each.root)]) if wrote else None
                if not account(each, self.indexes.get(each), self.changes[str(each.root)], wrote, fenced):
                    continue
                index = self.indexes.synced(each, full=True)
                # After the sync: one that failed is tried again, and so is one whose walk began too soon after
                # cortex's write for readers to trust it (`Manifest.refresh`: its time is its start, less a slack).
                if index.manifest is None or index.manifest.synced_ns > stamp:
                    self.written[str(each.root)] = stamp
                synced = True
        return synced

    def _briefing(self) -> None:
        """Build the next SessionStart's briefing now when the cached one no longer matches (a Stop or a write
        changed the store, a commit moved HEAD), so the next session start is a file read
        (`cortex.briefing.build_next`).

        It is built in a process of its own: in this one it shared the interpreter lock with the commands that
        came meanwhile, and at 100,000 memories (~2.5 s of work) a `remember` sent during it took 1.3 s instead
        of 0.7 s. This thread waits for it; the other core does the work."""
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
            # Niced as the one a write without a server starts: the walk of the server's start (`nice 5`), which a
            # session's first prompt may wait for, comes first.
            done = subprocess.run([sys.executable, "-c", "import os, sys; os.nice(10); from cortex.briefing import "
                                   "build_next; build_next(sys.argv[1]); sys.stdout.flush(); sys.stderr.flush(); "
                                   "os._exit(0)", root],
                                  stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600, check=False)
            if done.returncode != 0:
                self.store.log(f"serve: briefing not rebuilt: {done.stderr.decode(errors='replace')[-500:]!r}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.store.log(f"serve: briefing not rebuilt: {exc!r}")

    def _release(self) -> None:
        """Stop vouching for the files: other processes walk them again."""
        for vouch in self.vouches:
            vouch.close()
        self.vouches = []

    def stop(self) -> None:
        self.stopping.set()
        for _each, _changed, observer in self.watched:
            observer.stop()
        self._release()


# The fields each request may carry, and what each must be (`_checked`): a request names nothing beyond its
# query and their options (no store, path, file or command), and these are all the ops there are.
_NUMBER = (int, float)
FIELDS: dict[str, dict[str, Any]] = {
    "state": {}, "ping": {},
    "prompt": {"prompt": str, "session": str, "wait": _NUMBER},
    "recall": {"query": str, "limit": int, "types": list, "branch": (str, type(None)), "include_all": bool,
               "keyword": bool, "global": bool},
}
MAX_WAIT = 5.0  # seconds a prompt may ask the server to wait for its warm-up


def _checked(request: object) -> dict[str, Any]:
    """The request when it is one this server answers, with every field of the right type and range (a prompt
    cut to `wire.PROMPT_CHARS`); RequestRefused naming what is wrong otherwise."""
    from cortex.memory import TYPES
    from cortex.wire import PROMPT_CHARS

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
    return checked


def _recall(store: "Store", warm: _Warm, request: dict[str, Any]) -> dict[str, object]:
    """`cortex recall`'s search, run on this server's warm indexes, of this server's stores (the project's, and
    the global one unless `"global": false`): the hits with their memories (bodies included, for the command
    to render), or `{"warming": true}` (the command then recalls itself): also while the index a server with
    nothing searchable builds is not in (`_Warm.unbuilt`)."""
    if not warm.ready.is_set() or warm.building() or not warm.busy.acquire(timeout=COMMAND_WAIT):
        return {"warming": True}
    from cortex.errors import QueryRefused
    from cortex.recall import recall
    from cortex.store import iter_stores

    try:
        warm.follow(0.0)
        stores = list(iter_stores(store, include_global=request.get("global", True) and store.label == "project"))
        try:
            result = recall(stores, request.get("query", ""), limit=request.get("limit", 10),
                            types=tuple(request.get("types", ())), branch=request.get("branch"),
                            include_all=request.get("include_all", False), keyword_only=request.get("keyword", False),
                            indexes=warm.indexes)
        except QueryRefused as exc:
            return {"refused": str(exc)}
        return {"notes": result.notes, "hits": [hit.to_dict() | {"memory": hit.memory.to_dict(), "root": hit.root}
                                                for hit in result.hits]}
    finally:
        warm.busy.release()


def _current_for(store: "Store", warm: _Warm, request: dict[str, Any]) -> bool:
    """Whether a prompt may be answered now: at once, unless its session still has to be told what changed since
    its briefing (`events.take_catch_up`) and the walks that find those changes are not in yet; then it waits for
    them within the request's `wait`. A server whose committed cache had nothing searchable (`_Warm.unbuilt`)
    waits, within that `wait` less `ANSWER_ROOM` and `UNBUILT_WAIT` over all its prompts, for the index its
    walk builds, then answers with what it has: an answer from the bare cache was always empty, and the hook's
    own process would build the whole index itself."""
    from cortex.layout import catch_up_file

    if warm.building() and warm.unbuilt_wait > 0:
        started = time.monotonic()
        warm.current.wait(max(0.0, min(float(request.get("wait") or 0) - ANSWER_ROOM, warm.unbuilt_wait)))
        warm.unbuilt_wait -= time.monotonic() - started
    session = str(request.get("session") or "")
    if warm.walked.is_set() or not session or not os.path.exists(catch_up_file(str(store.root), session)):
        return True
    return warm.walked.wait(min(float(request.get("wait") or 0), 5.0))


def _send(connection: socket.socket, answer: dict[str, object]) -> None:
    """One JSON line."""
    connection.sendall(json.dumps(answer).encode() + b"\n")


def _loop(store: "Store", server: socket.socket, warm: _Warm, idle: float) -> str:
    """Answer requests until `idle` seconds pass without one."""
    from cortex.events import prompt_context, take_catch_up
    from cortex.text import injected_ids
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
            answer: dict[str, object]
            try:
                request = _checked(json.loads(_read_line(connection, MAX_REQUEST) or b"{}"))
                if request.get("op") == "state":  # answered at once: the server is up, warm or not
                    answer = {"ok": True, "pid": os.getpid(), "ready": warm.ready.is_set(),
                              "current": warm.current.is_set(), "settled": warm.settled.is_set()}
                elif request.get("op") == "recall":  # `cortex recall` asks here first: warm indexes and model
                    answer = _recall(store, warm, request)
                elif request.get("op") != "prompt":  # ping: answered once warm (a client waiting for it waits)
                    if not warm.ready.is_set():
                        continue
                    answer = {"ok": True, "pid": os.getpid(), "ready": True}
                elif not warm.ready.wait(request.get("wait", 0)) \
                        or not _current_for(store, warm, request) or not warm.busy.acquire(timeout=0.3):
                    answer = {"warming": True}  # no "context": the hook recalls in its own process
                else:
                    try:
                        warm.follow(0.0)  # what was written since the last look, before answering
                        context = prompt_context(store, request.get("prompt", ""), warm.indexes,
                                                 take_catch_up(store, request.get("session", "")),
                                                 warm.catch_up_indexes())
                        answer = {"context": context, "ids": injected_ids(context or "")}
                    finally:
                        warm.busy.release()
            except (RequestRefused, ValueError) as exc:  # a request it does not answer: said, nothing run
                answer = {"error": str(exc)[:500]}
            except Exception as exc:  # one bad request never stops the server
                store.log(f"serve: {exc!r}")
                answer = {"error": str(exc)}
            try:
                _send(connection, answer)
            except OSError:
                pass
        try:
            flush_access()  # what the answer read, counted once the client has it (`defer_access`)
        except Exception as exc:  # bookkeeping never stops the server
            store.log(f"serve: access counts not written: {exc!r}")
    return "idle"
