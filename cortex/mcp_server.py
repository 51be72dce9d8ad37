"""`cortex mcp`: the store over the Model Context Protocol (stdio), for Claude Code and any MCP client.

Tools (all prefixed `cortex_`): `search`, `search_decisions`, `get_memory`,
`get_plan`, `get_recent`, `get_status`, `get_briefing` (read-only) and
`remember`, `forget` (writes, through the same `Store` code as the CLI, the
secret guard included). Resources: `cortex://status`, `cortex://decisions`,
`cortex://plan`, `cortex://memory/{id}`.

Long-lived, like `cortex serve`: one warm Index per store (project, global)
and a watchdog observer per memories folder. A change on disk marks the
store dirty and the next call re-syncs it (a stat of every file, re-reading
only what changed) before answering; a write made through this server marks
it dirty at once, so a `remember` is found by the very next `search`.

Which store: `--dir`/`--global`, else `$CORTEX_DIR`, else
`$CLAUDE_PROJECT_DIR` (Claude Code sets it for the servers it starts; it does
not expand it inside a project's `.mcp.json`), else the working folder. The
store is looked up on each call until found, so a server started before
`cortex init` works once the store exists.

Errors: arguments that fail a tool's input schema, and an unknown tool, are
JSON-RPC errors (-32602, invalid params) naming the field; a cortex error
inside a tool (an unknown id, a secret in `remember`) is a tool result with
`isError` and the one-line message. The server never writes anything but
protocol to stdout (the SDK points fd 1 at stderr while serving); problems go
to `.cortex/state/cortex.log`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from cortex import __version__
from cortex.errors import CortexError, MemoryNotFound
from cortex.memory import TYPES, Memory
from cortex.store import Store, iter_stores

MemoryType = Literal["architecture", "decision", "pattern", "gotcha", "context", "progress", "plan", "code_description",
                     "code"]
assert set(MemoryType.__args__) == set(TYPES)  # type: ignore[attr-defined]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
BODY_CHARS = 2000  # a search hit's text is cut here even when the budget would allow more
INSTRUCTIONS = """\
cortex is this repository's memory: decisions (with rejected alternatives), gotchas, patterns, \
architecture notes and the branch's plan, kept as markdown files in .cortex/ and committed with the code.
Before deciding something that may already be decided, call cortex_search (or cortex_search_decisions); \
cortex_get_memory reads one memory in full, with the code it describes. Save what a teammate should know \
next week with cortex_remember (say why; name rejected alternatives; never secrets). \
cortex_forget archives a memory that is wrong or replaced (replaced_by links the new one)."""


class Backend:
    """The store(s) this server answers for, with warm indexes kept in step with the files."""

    def __init__(self, directory: Path | None = None, use_global: bool = False, start: Path | None = None) -> None:
        self.directory = directory
        self.use_global = use_global
        self.start = start
        self.lock = threading.RLock()  # tools run on worker threads; one call at a time touches an index
        self._project: Store | None = None
        self._indexes: dict[Path, Any] = {}
        self._dirty: dict[Path, threading.Event] = {}
        self._folders: dict[Path, tuple[int, int] | None] = {}  # identity of each memories/ folder watched
        self._configs: dict[Path, tuple[int, int] | None] = {}
        self._observers: dict[threading.Event, Any] = {}

    # ------------------------------------------------------------ stores

    def store(self) -> Store:
        """The store to serve (raises NotInitialised until there is one)."""
        if self._project is None or not self._project.root.is_dir():
            start = self.start
            if start is None and self.directory is None and not os.environ.get("CORTEX_DIR"):
                start = Path(os.environ["CLAUDE_PROJECT_DIR"]) if os.environ.get("CLAUDE_PROJECT_DIR") else None
            self._project = Store.locate(start, use_global=self.use_global, directory=self.directory)
        return self._project

    def stores(self, scope: str = "all") -> list[Store]:
        """The stores a search covers: project first, then the global one when it exists."""
        if scope == "global":
            return [Store.locate(use_global=True)]
        store = self.store()
        return list(iter_stores(store, include_global=scope == "all" and store.label == "project"))

    def global_store(self) -> Store:
        return Store.locate(use_global=True)

    # ------------------------------------------------------------ warm indexes

    def index(self, store: Store) -> Any:
        """The store's warm Index, synced if anything changed since the last call.

        A watchdog observer on `memories/` marks it changed. The folder itself can be replaced (a `git
        checkout` of a branch without it and back): its identity is checked on every call and a new observer
        is started when it differs. A sync locked out by another cortex process leaves the index marked, so
        the next call tries again. A config file that changed is read again.
        """
        from cortex.index import Index

        key = store.root.resolve()
        folder = _identity(store.memories_dir)
        index = self._indexes.get(key)
        if index is None or self._folders.get(key) != folder or not self._watching(key):
            if index is not None:
                self._stop_observer(key)
            store.memories_dir.mkdir(parents=True, exist_ok=True)
            dirty = self._watch(store)  # before the sync: no change between the two is missed
            try:
                index = Index(store)
                report = index.sync(full=True, progress=False)
            except BaseException:
                self._stop_observer_of(dirty)
                raise
            self._indexes[key], self._dirty[key], self._folders[key] = index, dirty, _identity(store.memories_dir)
            if report.locked_out:
                dirty.set()
        else:
            config = _identity(store.config_path)
            if self._configs.setdefault(key, config) != config:
                self._configs[key] = config
                store._config = None
                index.store._config = None
                self._dirty[key].set()
            if self._dirty[key].is_set():
                self._dirty[key].clear()
                if index.sync(full=True, progress=False).locked_out:
                    self._dirty[key].set()  # another process holds the cache: try again next call
        return index

    def _watching(self, key: Path) -> bool:
        """The observer of this store is still alive (its watch dies with a deleted folder, and a folder made
        again may get the same inode back)."""
        dirty = self._dirty.get(key)
        observer = self._observers.get(dirty) if dirty is not None else None
        if observer is None:
            return True  # no observer: an _AlwaysSet store syncs on every call anyway
        emitters = list(getattr(observer, "emitters", ()))
        return observer.is_alive() and all(emitter.is_alive() for emitter in emitters)

    def _watch(self, store: Store) -> threading.Event:
        from cortex.watch import change_observer

        dirty: threading.Event = threading.Event()
        try:
            self._observers[dirty] = change_observer(store.memories_dir, dirty)
        except Exception as exc:  # no inotify (e.g. too many watches): sync on every call instead
            store.log(f"mcp: cannot watch {store.memories_dir} ({exc!r}); syncing on every call")
            dirty = _AlwaysSet()
        return dirty

    def _stop_observer_of(self, dirty: threading.Event) -> None:
        observer = self._observers.pop(dirty, None)
        if observer is not None:
            try:
                observer.stop()
            except Exception:
                pass

    def _stop_observer(self, key: Path) -> None:
        dirty = self._dirty.pop(key, None)
        self._indexes.pop(key, None)
        if dirty is not None:
            self._stop_observer_of(dirty)

    def indexes(self, stores: list[Store]) -> dict[str, Any]:
        return {store.label: self.index(store) for store in stores}

    def changed(self, store: Store) -> None:
        """This server wrote to the store: the next call re-syncs without waiting for the observer."""
        event = self._dirty.get(store.root.resolve())
        if event is not None:
            event.set()

    def warm(self) -> None:
        """Sync the indexes and load the query encoder before the first call needs them (runs in a thread)."""
        from cortex.recall import recall

        try:
            with self.lock:
                stores = self.stores()
                recall(stores, "warm up", limit=1, indexes=self.indexes(stores), restore=False)
        except CortexError:
            pass  # no store yet: the first call says so
        except Exception as exc:
            try:
                self.store().log(f"mcp: warm-up failed: {exc!r}")
            except CortexError:
                pass

    def close(self) -> None:
        for observer in list(self._observers.values()):
            observer.stop()
        self._observers.clear()


def _identity(path: Path) -> tuple[int, int] | None:
    """(inode, mtime) of a file or folder: a folder deleted and made again has another inode."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_dev) if path.is_dir() else (stat.st_ino, stat.st_mtime_ns)


class _AlwaysSet(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.set()

    def clear(self) -> None:
        pass


# ---------------------------------------------------------------- results


def _result(data: dict[str, Any], text: str | None = None) -> CallToolResult:
    """Structured content for programs; the text (JSON unless given) is what a model reads."""
    body = text if text is not None else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=body)], structured_content=data)


def _hit_rows(hits: list[Any], budget_tokens: int) -> tuple[list[dict[str, Any]], int, int]:
    """Hits as rows within a token budget: first every hit that fits with its snippet (best first), then
    the best ones upgraded to their full text while the budget allows. Returns (rows, tokens, hits left out)."""
    from cortex.briefing import estimate_tokens

    def cost(row: dict[str, Any]) -> int:
        return estimate_tokens(json.dumps(row, ensure_ascii=False, separators=(",", ":")))

    rows: list[dict[str, Any]] = []
    used = 0
    for hit in hits:
        m = hit.memory
        row = hit.to_dict() | {"files": m.files, "updated": m.updated, "priority": m.priority, "pinned": m.pinned}
        if used + cost(row) > budget_tokens:
            if rows:
                break
            row["snippet"] = ""  # the best hit always comes back, at least its id and title
        rows.append(row)
        used += cost(row)
    for row, hit in zip(rows, hits):
        body = hit.memory.body.strip()
        full = {k: v for k, v in row.items() if k != "snippet"}
        full["text"] = body if len(body) <= BODY_CHARS else body[:BODY_CHARS].rstrip() + "…"
        extra = cost(full) - cost(row)
        if used + extra <= budget_tokens:
            row.clear()
            row.update(full)
            used += extra
    return rows, used, len(hits) - len(rows)


def _public(memory: Memory, store: Store) -> dict[str, Any]:
    return memory.to_dict() | {"store": store.label}


def _find(backend: Backend, memory_id: str) -> tuple[Store, Memory]:
    """A memory by id or unique prefix, looked up in the warm indexes: the project store first, then the global one."""
    import re

    from cortex.errors import AmbiguousId

    key = memory_id.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{4,12}", key):
        raise MemoryNotFound(f"{memory_id!r} is not a memory id (4 to 12 hex characters)")
    stores = backend.stores()
    for store in stores:
        rel_of_id = backend.index(store).rel_of_id()
        matches = [found for found in rel_of_id if found.startswith(key)]
        if len(matches) > 1:
            raise AmbiguousId(key, matches)
        if matches:
            return store, store.read(store.memories_dir / rel_of_id[matches[0]])
    raise MemoryNotFound(f"no memory with id {memory_id!r} in {stores[0].root}")


def _plan_memories(store: Store, index: Any, branch: str | None) -> list[Memory]:
    """The active plan and progress memories of a branch, read in full."""
    out = []
    for rel, entry in index.records().items():
        if entry["type"] in ("plan", "progress") and entry["status"] == "active" and entry["branch"] == branch:
            try:
                out.append(store.read(store.memories_dir / rel))
            except CortexError:
                continue
    return out


def _plan_page(store: Store, memories: list[Memory], branch: str | None) -> str:
    """`active-plan.md` as `cortex project` would write it for these memories."""
    from cortex import projections

    pages = projections.build(store, memories=memories, branch=branch)
    return next(p.text for p in pages if p.name == "active-plan.md")


# ---------------------------------------------------------------- the server


class CortexMCPServer(MCPServer):
    """MCPServer whose bad arguments and unknown tools are protocol errors naming the field."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if self._tool_manager.get_tool(name) is None:
            known = ", ".join(sorted(tool.name for tool in self._tool_manager.list_tools()))
            raise MCPError(INVALID_PARAMS, f"unknown tool {name!r} (tools: {known})", {"field": "name"})
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            problems = []
            fields = []
            for error in cause.errors():
                field = ".".join(str(part) for part in error["loc"]) or "arguments"
                fields.append(field)
                problems.append(f"{field}: {error['msg']}")
            raise MCPError(INVALID_PARAMS, f"{name}: invalid arguments: " + "; ".join(problems),
                           {"tool": name, "fields": fields}) from None


def _guarded(backend: Backend, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a tool under the backend's lock; a cortex error becomes the tool's error message."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with backend.lock:
                return fn(*args, **kwargs)
        except CortexError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:  # a bug or the machine (disk full, ...): say what, and log it
            try:
                backend.store().log(f"mcp: {fn.__name__} failed: {exc!r}")
            except Exception:
                pass
            raise ToolError(f"{fn.__name__} failed: {exc.__class__.__name__}: {exc}") from exc

    return wrapper


def build_server(backend: Backend) -> CortexMCPServer:
    """The MCP server with cortex's tools and resources, answering for `backend`."""
    server = CortexMCPServer("cortex", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    def tool(name: str, annotations: ToolAnnotations, title: str) -> Callable[[Callable[..., Any]], Any]:
        def register(fn: Callable[..., Any]) -> Any:
            server.add_tool(_guarded(backend, fn), name=name, title=title, annotations=annotations)
            return fn

        return register

    # ------------------------------------------------------------ read tools

    @tool("cortex_search", READ_ONLY, "Search project memory")
    def search(
        query: Annotated[str, Field(min_length=1, description="A question or keywords, e.g. 'why SQLite and not Postgres?'")],
        types: Annotated[list[MemoryType] | None, Field(description="Only these memory types (default: all).")] = None,
        branch: Annotated[str | None, Field(description="Only memories made on this git branch.")] = None,
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many results.")] = 10,
        budget_tokens: Annotated[int, Field(ge=50, le=20000, description=(
            "Token budget for the answer (~4 characters a token): full text while it fits, then snippets, "
            "then results are left out."))] = 1500,
        scope: Annotated[Literal["all", "project", "global"], Field(description=(
            "Which stores: this project's and the global one ('all'), or one of them."))] = "all",
    ) -> CallToolResult:
        """Search the project's memory (decisions, gotchas, patterns, architecture, plans, code notes) by meaning
        and by words (hybrid full-text + semantic), best first. Each result has the memory's id (for
        cortex_get_memory / cortex_forget), type, title, score, the store it came from, and its text or a snippet.
        Results reached through a link (code behind a description) are marked `via`."""
        from cortex.recall import recall

        stores = backend.stores(scope)
        result = recall(stores, query, limit=limit, types=types or (), branch=branch,
                        indexes=backend.indexes(stores), restore=False)
        rows, used, omitted = _hit_rows(result.hits, budget_tokens)
        return _result({"query": query, "results": rows, "tokens": used, "omitted": omitted, "notes": result.notes})

    @tool("cortex_search_decisions", READ_ONLY, "Search decisions")
    def search_decisions(
        query: Annotated[str, Field(min_length=1, description="What the decision is about, e.g. 'cache storage'.")],
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many decisions.")] = 10,
        include_superseded: Annotated[bool, Field(description=(
            "Also superseded and archived decisions (what was decided before, and what replaced it)."))] = False,
    ) -> CallToolResult:
        """Search the recorded decisions (and architecture records tagged decision/adr): each with its rationale,
        the alternatives it rejected, its date and branch, and — when superseded — what replaced it. Use before
        deciding something that may already be decided."""
        from cortex import projections
        from cortex.recall import recall

        stores = backend.stores()
        indexes = backend.indexes(stores)
        result = recall(stores, query, limit=limit * 2, types=("decision", "architecture"),
                        include_all=include_superseded, indexes=indexes, restore=False)
        rows = []
        for hit in result.hits:
            m = hit.memory
            if hit.via is not None or not projections._is_decision(m):
                continue
            rationale, rejected = projections._split_rejected(m.body)
            row = {"id": m.id, "title": m.title, "status": m.status, "date": m.created[:10], "branch": m.branch,
                   "tags": m.tags, "score": round(hit.score, 6), "store": hit.store, "rationale": rationale.strip(),
                   "rejected": rejected, "path": str(m.path)}
            if m.status != "active":
                index = indexes[hit.store]
                row["superseded_by"] = sorted(entry["id"] for entry in index.records().values()
                                              if any(rel == "supersedes" and to == m.id for rel, to, _ in entry["links"]))
            rows.append(row)
            if len(rows) >= limit:
                break
        return _result({"query": query, "decisions": rows, "notes": result.notes})

    @tool("cortex_get_memory", READ_ONLY, "Read one memory")
    def get_memory(
        id: Annotated[str, Field(min_length=4, max_length=12, pattern=r"^[0-9a-fA-F]+$",
                                 description="The memory's id, or a unique prefix of it (4+ hex characters).")],
    ) -> CallToolResult:
        """One memory in full: front matter, text and file path. Follows `source_of` links to the code memories it
        describes (included in full under `code`), lists the memories describing it (`described_by`) and its other
        links with titles, and names listed files that no longer exist."""
        store, item = _find(backend, id)
        index = backend.index(store)
        rel_of_id = index.rel_of_id()
        data = _public(item, store)
        code, links = [], []
        for link in item.links:
            rel = rel_of_id.get(link.to)
            if link.rel == "source_of" and rel is not None:
                try:
                    code.append(_public(store.read(store.memories_dir / rel), store))
                    continue
                except CortexError:
                    pass
            title = index.manifest.meta(rel)["title"] if rel is not None else None
            links.append({"rel": link.rel, "to": link.to, "title": title, "strength": link.strength})
        described_by = []
        for rel, entry in index.records().items():
            if any(kind == "source_of" and to == item.id for kind, to, _ in entry["links"]):
                described_by.append({"id": entry["id"], "type": entry["type"], "title": index.manifest.meta(rel)["title"]})
        worktree = store.worktree
        data.update(code=code, links=links, described_by=described_by,
                    missing_files=[f for f in item.files if worktree is not None and not (worktree / f).exists()])
        store.record_access([item.id])
        return _result(data)

    @tool("cortex_get_plan", READ_ONLY, "The branch's active plan")
    def get_plan(
        branch: Annotated[str | None, Field(description="A git branch (default: the checked-out one).")] = None,
    ) -> CallToolResult:
        """The active plan of the current git branch: its plan memories (checklists) and progress notes, as
        `.cortex/active-plan.md` shows them (the text is that page)."""
        store = backend.store()
        branch = branch or store.current_branch()
        memories = _plan_memories(store, backend.index(store), branch)
        page = _plan_page(store, memories, branch)
        by_date = sorted(memories, key=lambda m: (m.created, m.id))
        data = {"branch": branch,
                "plans": [{"id": m.id, "title": m.title, "updated": m.updated, "text": m.body.strip()}
                          for m in by_date if m.type == "plan"],
                "progress": [{"id": m.id, "title": m.title, "updated": m.updated, "text": m.body.strip()}
                             for m in by_date if m.type == "progress"],
                "page": page}
        return _result(data, page)

    @tool("cortex_get_recent", READ_ONLY, "Recently changed memories")
    def get_recent(
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many memories.")] = 10,
        types: Annotated[list[MemoryType] | None, Field(description="Only these memory types (default: all).")] = None,
        branch: Annotated[str | None, Field(description="Only memories made on this git branch.")] = None,
    ) -> CallToolResult:
        """The most recently created or updated active memories of this project, newest first (id, type, title,
        date, branch, tags)."""
        store = backend.store()
        index = backend.index(store)
        wanted = set(types or ())
        rows = []
        for rel, entry in index.records().items():
            if entry["status"] != "active" or (wanted and entry["type"] not in wanted) \
                    or (branch is not None and entry["branch"] != branch):
                continue
            meta = index.manifest.meta(rel)
            rows.append({"id": meta["id"], "type": meta["type"], "title": meta["title"],
                         "updated": meta["updated"] or meta["created"], "branch": meta["branch"], "tags": meta["tags"],
                         "path": str(store.memories_dir / rel)})
        rows.sort(key=lambda r: (r["updated"], r["id"]), reverse=True)
        return _result({"memories": rows[:limit], "total": len(rows)})

    def status_report() -> dict[str, Any]:
        from cortex.index import status_report

        store = backend.store()
        return status_report(store, backend.index(store))

    @tool("cortex_get_status", READ_ONLY, "Memory store status")
    def get_status() -> CallToolResult:
        """The memory store's state: counts by type and status, paths, git branch, whether semantic search is on,
        and problems (malformed files, broken links, unknown config keys)."""
        return _result(status_report())

    @tool("cortex_get_briefing", READ_ONLY, "Session briefing")
    def get_briefing(
        budget_tokens: Annotated[int | None, Field(ge=50, le=2500, description=(
            "Token budget (default: the project's briefing.budget_tokens, 500)."))] = None,
    ) -> CallToolResult:
        """The briefing for the current branch, as injected at session start: pinned memories, this branch's
        work, key memories, code in play and the active plan, within a token budget."""
        from cortex import briefing

        store = backend.store()
        result = briefing.build(store, budget_tokens) if budget_tokens else briefing.get(store)
        return _result({"text": result.text, "tokens": result.tokens, "ids": result.ids}, result.text)

    # ------------------------------------------------------------ write tools

    @tool("cortex_remember", ADDITIVE, "Save a memory")
    def remember(
        text: Annotated[str, Field(min_length=1, description=(
            "The memory itself: what and why; for a decision, the rejected alternatives ('Rejected: ...'). "
            "Never a secret."))],
        type: Annotated[MemoryType, Field(description="Kind of memory.")] = "context",
        title: Annotated[str | None, Field(max_length=200, description="Short title (default: the first sentence).")] = None,
        priority: Annotated[int, Field(ge=1, le=10, description="Importance, 1..10.")] = 5,
        confidence: Annotated[float, Field(ge=0, le=1, description="How sure, 0..1.")] = 0.9,
        tags: Annotated[list[str] | None, Field(description="Tags, e.g. ['storage', 'ci'].")] = None,
        files: Annotated[list[str] | None, Field(description="Code files it is about, relative to the repository.")] = None,
        pin: Annotated[bool, Field(description="Always include it in session briefings.")] = False,
        scope: Annotated[Literal["project", "global"], Field(description=(
            "'project' (committed with this repository) or 'global' (this machine, all projects)."))] = "project",
    ) -> CallToolResult:
        """Save a memory as a markdown file in .cortex/memories/ (committed with the code, so teammates get it).
        Text that looks like a secret is refused. Returns the new memory's id and path."""
        from cortex.memory import title_from_text

        if not text.strip():
            raise ToolError("text: nothing to remember (it is blank)")
        store = backend.global_store() if scope == "global" else backend.store()
        item = Memory(id="", type=type, title=(title or title_from_text(text)).strip(), body=text.strip() + "\n",
                      confidence=confidence, priority=priority, pinned=pin,
                      tags=list(dict.fromkeys(tags or ())), files=list(dict.fromkeys(files or ())),
                      source={"kind": "mcp"})
        created = store.create(item)
        from cortex.graph import connect_quietly

        connect_quietly(store, [created.id])  # relates_to links, near-duplicate flags (as `cortex remember`)
        backend.changed(store)
        return _result({"id": created.id, "type": created.type, "title": created.title, "branch": created.branch,
                        "store": store.label, "path": str(created.path)})

    @tool("cortex_forget", DESTRUCTIVE, "Archive a memory")
    def forget(
        id: Annotated[str, Field(min_length=4, max_length=12, pattern=r"^[0-9a-fA-F]+$",
                                 description="Id (or unique prefix) of the memory to retire.")],
        replaced_by: Annotated[str | None, Field(min_length=4, max_length=12, pattern=r"^[0-9a-fA-F]+$", description=(
            "Id of the memory that replaces it: it becomes superseded and the new one links to it."))] = None,
    ) -> CallToolResult:
        """Retire a memory that is wrong or outdated: archived (the file stays, git history keeps it), or with
        replaced_by marked superseded by another memory. Searches no longer return it."""
        store, item = _find(backend, id)
        data: dict[str, Any]
        if replaced_by:
            old, new = store.supersede(item.id, replaced_by)
            data = {"id": old.id, "title": old.title, "status": old.status, "replaced_by": new.id}
        else:
            done = store.archive(item.id)
            data = {"id": done.id, "title": done.title, "status": done.status, "replaced_by": None}
        backend.changed(store)
        return _result(data | {"store": store.label})

    # ------------------------------------------------------------ resources

    def resource(uri: str, name: str, mime_type: str, description: str) -> Callable[[Callable[..., str]], Any]:
        def register(fn: Callable[..., str]) -> Any:
            import functools

            @functools.wraps(fn)
            def read(*args: Any, **kwargs: Any) -> str:
                try:
                    with backend.lock:
                        return fn(*args, **kwargs)
                except MemoryNotFound as exc:
                    raise ResourceNotFoundError(str(exc)) from exc
                except CortexError as exc:
                    raise ResourceError(str(exc)) from exc

            server.resource(uri, name=name, mime_type=mime_type, description=description)(read)
            return fn

        return register

    @resource("cortex://status", "status", "application/json", "The memory store's counts, paths, search state and problems.")
    def status_resource() -> str:
        return json.dumps(status_report(), ensure_ascii=False, indent=2)

    @resource("cortex://decisions", "decisions", "text/markdown",
              "Every active decision with its rationale and rejected alternatives (.cortex/decisions.md).")
    def decisions_resource() -> str:
        from cortex import projections

        store = backend.store()
        index = backend.index(store)
        path = store.root / "decisions.md"
        if path.exists() and projections.known_current(store, index):
            return path.read_text(encoding="utf-8")
        return next(p.text for p in projections.build(store, index=index) if p.name == "decisions.md")

    @resource("cortex://plan", "plan", "text/markdown", "The current branch's plan and progress (.cortex/active-plan.md).")
    def plan_resource() -> str:
        store = backend.store()
        branch = store.current_branch()
        return _plan_page(store, _plan_memories(store, backend.index(store), branch), branch)

    @resource("cortex://memory/{id}", "memory", "text/markdown", "One memory's file (front matter and text) by id.")
    def memory_resource(id: str) -> str:
        store, item = _find(backend, id)
        assert item.path is not None
        store.record_access([item.id])
        return item.path.read_text(encoding="utf-8")

    return server


def run(directory: Path | None = None, use_global: bool = False) -> None:
    """Serve over stdio until the client closes the connection."""
    backend = Backend(directory, use_global)
    server = build_server(backend)
    threading.Thread(target=backend.warm, name="cortex-mcp-warm", daemon=True).start()
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        backend.close()
