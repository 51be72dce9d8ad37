"""`cortex mcp`: the store over the Model Context Protocol (stdio), for Claude Code and any MCP client.

A thin edge over the library (`recall`, `events.remember`/`forget`, `status.report`), long-lived with a warm
index re-synced when the memories folder changes. Bad arguments are JSON-RPC errors; a cortex error is a
tool result with `isError`. Nothing but protocol goes to stdout. docs/mcp.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, AsyncIterator, Callable, Literal, cast

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from cortex import __version__
from cortex.errors import CortexError, MemoryNotFound
from cortex.index import Index, Indexes
from cortex.memory import TYPES, Memory
from cortex.store import Store, iter_stores

if TYPE_CHECKING:
    MemoryType = str
else:
    MemoryType = Literal[TYPES]  # the one list of types, cortex.memory's, as the schema's enum

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
RESTORING = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
DATE = r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}Z)?$"  # what `cortex.recall.time_window` reads
BODY_CHARS = 2000  # a search hit's text is cut here even when the budget would allow more
INSTRUCTIONS = """\
cortex is this repository's memory: decisions (with rejected alternatives), gotchas, patterns, \
architecture notes and the branch's plan, kept as markdown files in .cortex/ and committed with the code.
Before deciding something that may already be decided, call cortex_search (or cortex_search_decisions); \
cortex_get_memory reads one memory in full, with the code it describes. Save what a teammate should know \
next week with cortex_remember (say why; name rejected alternatives; never secrets). \
cortex_forget archives a memory that is wrong or replaced (replaced_by links the new one; delete removes junk); \
cortex_feedback rates a memory that helped (up) or was noise (down), which changes how it ranks. What capture found on its own is proposed (marked in results) until the user accepts it: cortex_inbox lists, accepts or rejects proposals, only when the user asks."""


class Backend:
    """The store(s) this server answers for: the library's `Indexes` holder, synced again at each tool call."""

    def __init__(self, directory: Path | None = None, use_global: bool = False, start: Path | None = None) -> None:
        self.directory = directory
        self.use_global = use_global
        self.start = start
        self.lock = threading.RLock()  # tools run on worker threads; one call at a time touches an index
        self.indexes = Indexes()
        self._project: Store | None = None
        self._checked: set[Path] = set()  # the stores brought in step with their files during this call

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

    def new_call(self) -> None:
        """A tool call starts: files and config.yaml may have changed since the last one."""
        self._checked.clear()

    def follow(self, store: Store) -> None:
        """Once per call, mark the store's index stale and its config unread: the next sync checks every file."""
        key = store.root.resolve()
        if key not in self._checked:
            self._checked.add(key)
            store.reload_config()
            self.indexes.get(store).store.reload_config()  # the Index may hold another Store of this root
            self.indexes.stale(store)

    def index(self, store: Store, full: bool = True) -> Index:
        """The store's warm Index, in step with its files (`full=False`: the manifest is enough)."""
        self.follow(store)
        return self.indexes.synced(store, full=full)

    def synced(self, stores: list[Store]) -> Indexes:
        """The holder, with these stores' indexes fully in step with their files (what `recall` searches)."""
        for store in stores:
            self.index(store)
        return self.indexes

    def warm(self) -> None:
        """Sync the indexes and load the query encoder before the first call needs them (runs in a thread)."""
        from cortex.recall import recall, use_contextual

        use_contextual("background")  # a resident process: re-rank with the contextual model
        try:
            with self.lock:
                self.new_call()
                stores = self.stores()
                recall(stores, "warm up", limit=1, indexes=self.synced(stores))
        except CortexError:
            pass  # no store yet: the first call says so
        except Exception as exc:
            with contextlib.suppress(CortexError):
                self.store().log(f"mcp: warm-up failed: {exc!r}")


def _result(data: dict[str, Any], text: str | None = None) -> CallToolResult:
    """Structured content for programs and text for the model, both through the one secret rule (`redacted`)."""
    from cortex.guard import redacted, redacted_data

    data = redacted_data(data)
    body = redacted(text) if text is not None else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=body)], structured_content=data)


def _row_tokens(row: dict[str, Any]) -> int:
    from cortex.text import estimate_tokens

    return estimate_tokens(json.dumps(row, ensure_ascii=False, separators=(",", ":")))


def _hit_rows(hits: list[Any], budget_tokens: int) -> tuple[list[dict[str, Any]], int, int]:
    """Hits as rows within a token budget: snippets first, then full text for the best while it fits."""
    rows: list[dict[str, Any]] = []
    used = 0
    for hit in hits:
        m = hit.memory
        row = hit.to_dict() | {"files": m.files, "updated": m.updated, "priority": m.priority, "pinned": m.pinned}
        if used + _row_tokens(row) > budget_tokens:
            if rows:
                break
            row["snippet"] = ""  # the best hit always comes back, at least its id and title
        rows.append(row)
        used += _row_tokens(row)
    for row, hit in zip(rows, hits):
        body = hit.memory.body.strip()
        full = {k: v for k, v in row.items() if k != "snippet"}
        full["text"] = body if len(body) <= BODY_CHARS else body[:BODY_CHARS].rstrip() + "…"
        extra = _row_tokens(full) - _row_tokens(row)
        if used + extra <= budget_tokens:
            row.clear()
            row.update(full)
            used += extra
    return rows, used, len(hits) - len(rows)


def _add_reasons(stores: list[Store], hits: list[Any], rows: list[dict[str, Any]]) -> None:
    """`because`: the reasons a hit carries (its `because` links, or those of what it supersedes), id and title."""
    from cortex.graph import hit_reasons

    because = hit_reasons(stores, hits[:len(rows)])
    for row in rows:
        if row["id"] in because:
            row["because"] = because[row["id"]]


def _decision_rows(indexes: Indexes, stores: list[Store], hits: list[Any], limit: int) -> list[dict[str, Any]]:
    """The decisions among recall's hits, each with its rationale, rejected alternatives and what replaced it."""
    from cortex import projections

    by_label = {store.label: store for store in stores}
    rows = []
    for hit in hits:
        m = hit.memory
        if hit.via is not None or not projections.is_decision(m):
            continue
        rationale, rejected = projections.split_rejected(m.body)
        row = {"id": m.id, "title": m.title, "status": m.status, "date": m.created[:10], "branch": m.branch,
               "tags": m.tags, "score": round(hit.score, 6), "store": hit.store, "rationale": rationale.strip(),
               "rejected": rejected, "path": str(m.path)}
        if m.status != "active":
            records = indexes.get(by_label[hit.store]).records()  # the index recall just searched
            row["superseded_by"] = sorted(entry["id"] for entry in records.values()
                                          if any(rel == "supersedes" and to == m.id for rel, to, _ in entry["links"]))
        rows.append(row)
        if len(rows) >= limit:
            break
    return rows


def _forgotten_warnings(traces: list[Any]) -> dict[str, Any]:
    """`warnings` for a saved text that repeats forgotten memories (nothing when it repeats none)."""
    if not traces:
        return {}
    return {"warnings": [{"reason": "forgotten", "id": t.id, "title": t.title, "how": t.how, "when": t.forgotten,
                          "why": t.reason, "message": f"this repeats a forgotten memory: {t.said()}"}
                         for t in traces]}


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
        rel_of_id = backend.index(store, full=False).rel_of_id()
        matches = [found for found in rel_of_id if found.startswith(key)]
        if len(matches) > 1:
            raise AmbiguousId(key, matches)
        if matches:
            return store, store.read(store.memories_dir / rel_of_id[matches[0]])
    raise MemoryNotFound(f"no memory with id {memory_id!r} in {stores[0].root}")


def _memory_view(backend: Backend, memory_id: str) -> dict[str, Any]:
    """One memory in full, with the code memories it describes, what describes it, and its other links."""
    store, item = _find(backend, memory_id)
    index = backend.index(store, full=False)
    rel_of_id = index.rel_of_id()
    data = _public(item, store)
    code, links = [], []
    for link in item.links:
        rel = rel_of_id.get(link.to)
        if rel is None:
            continue  # to a memory that no longer exists: skipped, gc drops it
        if link.rel == "source_of":
            with contextlib.suppress(CortexError):
                code.append(_public(store.read(store.memories_dir / rel), store))
                continue
        title = index.meta(rel)["title"]
        links.append({"rel": link.rel, "to": link.to, "title": title, "strength": link.strength})
    described_by = []
    for rel, entry in index.records().items():
        if any(kind == "source_of" and to == item.id for kind, to, _ in entry["links"]):
            described_by.append({"id": entry["id"], "type": entry["type"], "title": index.meta(rel)["title"]})
    from cortex.lifecycle import present_files

    present = present_files(item.files, store.worktree) if store.worktree is not None else item.files
    from cortex.history import generations

    data.update(code=code, links=links, described_by=described_by,
                missing_files=[f for f in item.files if f not in present], history=generations(index, item.id))
    store.record_access([item.id])
    return data


def _plan(backend: Backend, branch: str | None) -> tuple[dict[str, Any], str]:
    """A branch's plans and progress notes, and the `active-plan.md` page they make."""
    store = backend.store()
    branch = branch or store.current_branch()
    from cortex import projections

    memories = []  # the branch's active plan and progress memories, read in full
    for rel, entry in backend.index(store, full=False).records().items():
        if entry["type"] in ("plan", "progress") and entry["status"] == "active" and entry["branch"] == branch:
            with contextlib.suppress(CortexError):
                memories.append(store.read(store.memories_dir / rel))
    page = next(p.text for p in projections.build(store, memories=memories) if p.name == "active-plan.md")
    by_date = sorted(memories, key=lambda m: (m.created, m.id))

    def rows(kind: str) -> list[dict[str, Any]]:
        return [{"id": m.id, "title": m.title, "updated": m.updated, "text": m.body.strip()}
                for m in by_date if m.type == kind]

    return {"branch": branch, "plans": rows("plan"), "progress": rows("progress"), "page": page}, page


def _recent(backend: Backend, limit: int, types: list[str] | None, branch: str | None) -> dict[str, Any]:
    """The newest active memories of the project store (by updated, else created date)."""
    store = backend.store()
    index = backend.index(store, full=False)
    wanted = set(types or ())
    rows = []
    for rel, entry in index.records().items():
        if entry["status"] != "active" or (wanted and entry["type"] not in wanted) \
                or (branch is not None and entry["branch"] != branch):
            continue
        meta = index.meta(rel)
        rows.append({"id": meta["id"], "type": meta["type"], "title": meta["title"],
                     "updated": meta["updated"] or meta["created"], "branch": meta["branch"], "tags": meta["tags"],
                     "path": str(store.memories_dir / rel)})
    rows.sort(key=lambda r: (r["updated"], r["id"]), reverse=True)
    return {"memories": rows[:limit], "total": len(rows)}


def _status(backend: Backend) -> dict[str, Any]:
    from cortex.status import report

    store = backend.store()
    return report(store, backend.index(store))


def _decisions_page(backend: Backend) -> str:
    """`decisions.md` as on disk when it is current, else rendered from the index."""
    from cortex import projections

    store = backend.store()
    index = backend.index(store, full=False)
    path = store.root / "decisions.md"
    if path.exists() and projections.known_current(store, index):
        return path.read_text(encoding="utf-8")
    return next(p.text for p in projections.build(store, index=index) if p.name == "decisions.md")


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
            problems = [(".".join(str(part) for part in error["loc"]) or "arguments", error["msg"])
                        for error in cause.errors()]
            raise MCPError(INVALID_PARAMS, f"{name}: invalid arguments: " + "; ".join(f"{f}: {m}" for f, m in problems),
                           {"tool": name, "fields": [field for field, _msg in problems]}) from None

    async def run_stdio_async(self) -> None:
        """Serve over stdio, answering the lines the SDK's reader drops without a word: one that is not JSON
        (or not UTF-8) gets -32700 Parse error, JSON that is not one JSON-RPC message (a batch array, params
        that are not an object, no method) -32600 Invalid Request, both with id null; the server reads on.
        A blank line is skipped."""
        import anyio
        from mcp.server.stdio import stdio_server
        from mcp.shared.message import SessionMessage

        try:
            wire = _claim_stdin()
        except (ImportError, OSError):  # no fcntl (Windows), or no usable fd 0: the SDK's own reader
            await super().run_stdio_async()
            return
        try:
            async with stdio_server(stdin=cast(Any, _stdin_lines(wire))) as (read_stream, write_stream):
                send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_answer_malformed, read_stream, send, write_stream)
                    lowlevel = self._lowlevel_server
                    await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
                    tasks.cancel_scope.cancel()
        finally:  # the private copy stays open: a reader thread may still block on it after the server stops
            with contextlib.suppress(OSError):
                os.dup2(wire, 0)


NOT_UTF8 = "\x00 (not UTF-8)\n"  # what a line of invalid UTF-8 is handed on as: not JSON, so a Parse error


def _claim_stdin() -> int:
    """A private copy of fd 0 for the protocol, fd 0 pointed at the null device: no child reads the client."""
    import fcntl

    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    return private


async def _stdin_lines(fd: int) -> AsyncIterator[str]:
    """The client's lines as text: strict UTF-8 (a bad line becomes NOT_UTF8), blank lines skipped."""
    import anyio

    async with anyio.wrap_file(os.fdopen(fd, "rb", closefd=False)) as wire:
        async for raw in wire:
            if not raw.strip():
                continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                yield NOT_UTF8


async def _answer_malformed(source: Any, sink: Any, write_stream: Any) -> None:
    """Pass the reader's messages on; answer each line it could not read with its JSON-RPC error."""
    import anyio
    from mcp.shared.message import SessionMessage
    from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

    async with sink:
        async for item in source:
            if not isinstance(item, Exception):
                await sink.send(item)
                continue
            kinds = {error.get("type") for error in item.errors()} if isinstance(item, ValidationError) else set()
            error = (ErrorData(code=PARSE_ERROR, message="Parse error: not a line of UTF-8 JSON")
                     if "json_invalid" in kinds else
                     ErrorData(code=INVALID_REQUEST, message="Invalid Request: not one JSON-RPC 2.0 message (a "
                               "request or notification object with a method, and params an object)"))
            try:
                await write_stream.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=None, error=error)))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


Register = Callable[..., Callable[[Callable[..., Any]], Any]]


def _guarded(backend: Backend, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a tool under the backend's lock; a cortex error becomes the tool's error message."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with backend.lock:
                backend.new_call()
                return fn(*args, **kwargs)
        except ToolError:
            raise  # the tool's own message (a blank `text`)
        except CortexError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:  # a bug or the machine (disk full, ...): say what, and log it
            with contextlib.suppress(Exception):
                backend.store().log(f"mcp: {fn.__name__} failed: {exc!r}")
            raise ToolError(f"{fn.__name__} failed: {exc.__class__.__name__}: {exc}") from exc

    return wrapper


def _tool_registrar(server: CortexMCPServer, backend: Backend) -> Register:
    """`@tool(name, annotations, title)`: add the function as a guarded tool (its docstring is the description)."""

    def tool(name: str, annotations: ToolAnnotations, title: str) -> Callable[[Callable[..., Any]], Any]:
        def register(fn: Callable[..., Any]) -> Any:
            server.add_tool(_guarded(backend, fn), name=name, title=title, annotations=annotations)
            return fn

        return register

    return tool


def _resource_registrar(server: CortexMCPServer, backend: Backend) -> Register:
    """`@resource(uri, name, mime_type, description)`: read under the lock, cortex errors as resource errors."""

    def resource(uri: str, name: str, mime_type: str, description: str) -> Callable[[Callable[..., str]], Any]:
        def register(fn: Callable[..., str]) -> Any:
            @functools.wraps(fn)
            def read(*args: Any, **kwargs: Any) -> str:
                try:
                    with backend.lock:
                        from cortex.guard import redacted

                        backend.new_call()
                        return redacted(fn(*args, **kwargs))  # the one secret rule, as every tool's answer
                except MemoryNotFound as exc:
                    raise ResourceNotFoundError(str(exc)) from exc
                except CortexError as exc:
                    raise ResourceError(str(exc)) from exc

            server.resource(uri, name=name, mime_type=mime_type, description=description)(read)
            return fn

        return register

    return resource


def build_server(backend: Backend) -> CortexMCPServer:
    """The MCP server with cortex's tools and resources, answering for `backend`."""
    server = CortexMCPServer("cortex", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    tool = _tool_registrar(server, backend)
    _add_search_tools(tool, backend)
    _add_read_tools(tool, backend)
    _add_write_tools(tool, backend)
    _add_link_tool(tool, backend)
    _add_resources(_resource_registrar(server, backend), backend)
    return server


def _id_field(description: str | None = None) -> Any:
    """A memory id or a unique prefix of it, as a tool argument."""
    return Field(min_length=4, max_length=12, pattern=r"^[0-9a-fA-F]+$", description=description)


def _add_search_tools(tool: Register, backend: Backend) -> None:
    from cortex.recall import count_reads, recall, time_window
    from cortex.text import within_budget

    @tool("cortex_search", READ_ONLY, "Search project memory")
    def search(
        query: Annotated[str, Field(description=(
            "A question or keywords, e.g. 'why SQLite and not Postgres?' (or empty, with `path`)."))] = "",
        types: Annotated[list[MemoryType] | None, Field(description="Only these memory types (default: all).")] = None,
        branch: Annotated[str | None, Field(description="Only memories made on this git branch.")] = None,
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many results.")] = 10,
        budget_tokens: Annotated[int, Field(ge=50, le=20000, description=(
            "Token budget for the answer (~4 characters a token): full text while it fits, then snippets, "
            "then results are left out."))] = 1500,
        scope: Annotated[Literal["all", "project", "global"], Field(description=(
            "Which stores: this project's and the global one ('all'), or one of them."))] = "all",
        since: Annotated[str | None, Field(pattern=DATE, description=(
            "Only memories created on or after this date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)."))] = None,
        until: Annotated[str | None, Field(pattern=DATE, description=(
            "Only memories created on or before this date (a day counts whole)."))] = None,
        path: Annotated[str | None, Field(min_length=1, max_length=4096, description=(
            "Instead of a query: a file of the repository (relative to its root, or absolute); the active "
            "memories bound to it come back, most specific first."))] = None,
    ) -> CallToolResult:
        """Search the project's memory (decisions, gotchas, patterns, architecture, plans, code notes) by meaning
        and by words (hybrid full-text + semantic), best first. Each result has the memory's id (for
        cortex_get_memory / cortex_forget), type, title, score, the store it came from, and its text or a snippet;
        `because` names the memories a hit gives as its reason (id and title), when it has any.
        Results reached through a link (code behind a description) are marked `via`; capture's proposals, not
        yet accepted by a person, are marked `"proposed": true`. Only relevant memories come back: none when
        nothing in memory bears on the query. With `path` instead of a query: the active memories bound to that
        file (naming it in `files`, describing its code, naming its folder), each with `why` (`types`, `limit`
        and `budget_tokens` apply)."""
        if path is not None:
            return _by_path(backend, path, types or [], limit, budget_tokens)
        if not query:
            raise CortexError("give a query, or a path")
        stores = backend.stores(scope)
        result = recall(stores, query, limit=limit, types=types or (), branch=branch,
                        indexes=backend.synced(stores), count=False, proposed=True,
                        window=time_window(since, until))  # the pattern above has checked both
        # The one relevance rule `cortex recall` and the prompt hook use (`cortex.recall.mark_relevant`).
        hits = [hit for hit in result.hits if hit.relevant is not False]
        from cortex.staleness import mark

        mark(stores, hits)
        rows, used, omitted = _hit_rows(hits, budget_tokens)
        _add_reasons(stores, hits, rows)
        count_reads(stores, hits[:len(rows)])  # what is shown and relevant is read
        notes = result.notes + ([] if rows else ["nothing relevant"])
        return _result({"query": query, "results": rows, "tokens": used, "omitted": omitted, "notes": notes})

    @tool("cortex_search_decisions", READ_ONLY, "Search decisions")
    def search_decisions(
        query: Annotated[str, Field(min_length=1, description="What the decision is about, e.g. 'cache storage'.")],
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many decisions.")] = 10,
        include_superseded: Annotated[bool, Field(description=(
            "Also superseded and archived decisions (what was decided before, and what replaced it)."))] = False,
        budget_tokens: Annotated[int, Field(ge=50, le=20000, description=(
            "Token budget for the answer (~4 characters a token): decisions past it are left out, and counted."))] = 3000,
    ) -> CallToolResult:
        """Search the recorded decisions (and architecture records tagged decision/adr): each with its rationale,
        the alternatives it rejected, its date and branch, and — when superseded — what replaced it. Use before
        deciding something that may already be decided."""
        stores = backend.stores()
        indexes = backend.synced(stores)
        result = recall(stores, query, limit=limit * 2, types=("decision", "architecture"),
                        include_all=include_superseded, indexes=indexes)
        rows = _decision_rows(indexes, stores, result.hits, limit)
        kept, used = within_budget(rows, budget_tokens, _row_tokens)
        return _result({"query": query, "decisions": kept, "tokens": used, "omitted": len(rows) - len(kept),
                        "notes": result.notes})


def _by_path(backend: Backend, path: str, types: list[str], limit: int, budget_tokens: int) -> CallToolResult:
    """`cortex_search` with `path`: the project's memories bound to the file (`cortex.bypath`), in budget."""
    from cortex.bypath import lookup, worktree_of
    from cortex.text import within_budget

    store = backend.store()
    if store.label != "project":
        raise CortexError("path: looks in a project's store (files are a repository's)")
    rel, found = lookup(store, path, worktree_of(store), backend.index(store, full=False))
    found = [row for row in found if not types or row["type"] in types]
    rows, used = within_budget(found[:limit], budget_tokens, _row_tokens)
    store.record_access(row["id"] for row in rows)
    return _result({"path": rel, "results": rows, "tokens": used, "omitted": len(found) - len(rows),
                    "notes": [] if rows else ["nothing relevant"]})


def _add_read_tools(tool: Register, backend: Backend) -> None:
    @tool("cortex_get_memory", READ_ONLY, "Read one memory")
    def get_memory(
        id: Annotated[str, _id_field("The memory's id, or a unique prefix of it (4+ hex characters).")],
    ) -> CallToolResult:
        """One memory in full: front matter, text and file path. Follows `source_of` links to the code memories it
        describes (included in full under `code`), lists the memories describing it (`described_by`) and its other
        links with titles, and names listed files that no longer exist."""
        return _result(_memory_view(backend, id))

    @tool("cortex_get_plan", READ_ONLY, "The branch's active plan")
    def get_plan(
        branch: Annotated[str | None, Field(description="A git branch (default: the checked-out one).")] = None,
    ) -> CallToolResult:
        """The active plan of the current git branch: its plan memories (checklists) and progress notes, as
        `.cortex/active-plan.md` shows them (the text is that page)."""
        data, page = _plan(backend, branch)
        return _result(data, page)

    @tool("cortex_get_recent", READ_ONLY, "Recently changed memories")
    def get_recent(
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many memories.")] = 10,
        types: Annotated[list[MemoryType] | None, Field(description="Only these memory types (default: all).")] = None,
        branch: Annotated[str | None, Field(description="Only memories made on this git branch.")] = None,
    ) -> CallToolResult:
        """The most recently created or updated active memories of this project, newest first (id, type, title,
        date, branch, tags)."""
        return _result(_recent(backend, limit, types, branch))

    @tool("cortex_get_status", READ_ONLY, "Memory store status")
    def get_status() -> CallToolResult:
        """The memory store's state: counts by type and status, paths, git branch, whether semantic search is on,
        and problems (malformed files, broken links, unknown config keys)."""
        return _result(_status(backend))

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


def _add_write_tools(tool: Register, backend: Backend) -> None:
    from cortex import events

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
        created: Annotated[str | None, Field(pattern=DATE, description=(
            "When it was learnt, for notes brought in from elsewhere (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ); "
            "default now."))] = None,
    ) -> CallToolResult:
        """Save a memory as a markdown file in .cortex/memories/ (committed with the code, so teammates get it).
        Text that looks like a secret is refused. Returns the new memory's id and path, and `warnings` when it
        repeats a memory that was forgotten (when, and why): it is saved all the same; tell the user."""
        if not text.strip():
            raise ToolError("text: nothing to remember (it is blank)")
        from cortex.memory import control_problem

        problem = control_problem({"title": title, "tags": tags, "files": files}, text)
        if problem is not None:  # a NUL would make git call the file binary, an ESC drive a reader's terminal
            raise ToolError(problem.replace("body:", "text:", 1) + "; nothing was written")
        store = Store.locate(use_global=True) if scope == "global" else backend.store()
        backend.follow(store)  # files changed by hand are synced before the links and pages are made
        forgotten = events.forgotten_like(store, text, title)
        made = events.remember(store, text, backend.indexes, type=type, title=title, priority=priority,
                               confidence=confidence, tags=tags or (), files=files or (), pinned=pin,
                               source={"kind": "mcp"}, created=created)
        return _result({"id": made.id, "type": made.type, "title": made.title, "branch": made.branch,
                        "store": store.label, "path": str(made.path)} | _forgotten_warnings(forgotten))

    @tool("cortex_forget", DESTRUCTIVE, "Archive a memory")
    def forget(
        id: Annotated[str, _id_field("Id (or unique prefix) of the memory to retire.")],
        replaced_by: Annotated[str | None, _id_field((
            "Id of the memory that replaces it: it becomes superseded and the new one links to it."))] = None,
        delete: Annotated[bool, Field(description=(
            "Remove the file instead of archiving it (junk: noise, a wrong capture); git history keeps it."))] = False,
        reason: Annotated[str | None, Field(max_length=500, description=(
            "Why it is forgotten (archive or delete): kept in its trace and said when the same is saved again."))
        ] = None,
    ) -> CallToolResult:
        """Retire a memory that is wrong or outdated: archived (the file stays, git history keeps it), with
        replaced_by marked superseded by another memory, or with delete its file removed. Searches no longer
        return it; an archived or deleted one leaves a trace (id, title, when, reason), so saving the same
        text again is warned."""
        store, item = _find(backend, id)
        if reason is not None and replaced_by:
            raise ToolError("reason is kept in a forgotten memory's trace; a superseded one stays in the history: "
                            "pass one of them")
        if delete:
            if replaced_by:
                raise ToolError("delete removes the memory; replaced_by keeps it as superseded: pass one of them")
            events.delete(store, [item.id], backend.indexes, reason=reason)
            return _result({"id": item.id, "title": item.title, "status": "deleted", "path": str(item.path),
                            "store": store.label})
        old = events.forget(store, item.id, backend.indexes, replaced_by=replaced_by, reason=reason)
        return _result({"id": old.id, "title": old.title, "status": old.status,
                        "replaced_by": store.get(replaced_by).id if replaced_by else None, "store": store.label})

    @tool("cortex_inbox", DESTRUCTIVE, "Review proposed memories")
    def inbox(
        action: Annotated[Literal["list", "accept", "reject"], Field(description=(
            "'list' the proposals, 'accept' them (they become active memories) or 'reject' them (files deleted)."))
        ] = "list",
        ids: Annotated[list[Annotated[str, _id_field()]] | None,
                       Field(description="With accept or reject: the proposals' ids (or unique prefixes).")] = None,
    ) -> CallToolResult:
        """The inbox of memories capture proposed (found without an explicit [MEMORY: ...] tag): not in briefings
        or prompt context until accepted. 'list' gives them newest first (id, type, title, branch, created);
        'accept' makes them active, 'reject' deletes their files, all the ids or, one unknown or not a proposal,
        none. Accept or reject only what the user asked for."""
        store = backend.store()
        backend.follow(store)
        if action == "list":
            return _result({"proposals": [{"id": m.id, "type": m.type, "title": m.title, "branch": m.branch,
                                           "created": m.created} for m in events.proposals(store, backend.indexes)]})
        if not ids:
            raise ToolError(f"ids: name the proposals to {action}; nothing changed")
        done = (events.accept if action == "accept" else events.reject)(store, ids, backend.indexes)
        return _result({action + "ed": [{"id": m.id, "title": m.title} for m in done], "store": store.label})

    @tool("cortex_feedback", ADDITIVE, "Rate a memory")
    def feedback(
        id: Annotated[str, _id_field("Id (or unique prefix) of the memory to rate.")],
        rating: Annotated[Literal["up", "down"], Field(description=(
            "'up': it helped (it was right and relevant); 'down': it was noise or wrong here."))],
        note: Annotated[str | None, Field(max_length=500, description="Why, in a few words (optional).")] = None,
    ) -> CallToolResult:
        """Rate how useful a memory was. Ratings feed its salience, which ranks it higher or lower in search and
        in briefings (a memory rated down more than up is no longer shown at prompt time). Changes no memory
        file: the rating is kept in .cortex/state/. Returns its salience, counts and tier (hot or cold)."""
        from cortex import salience

        store, item = _find(backend, id)
        return _result(salience.feedback(store, item.id, rating, note))

    @tool("cortex_restore", RESTORING, "Restore an archived memory")
    def restore(
        id: Annotated[str, _id_field("Id (or unique prefix) of the archived or superseded memory.")],
    ) -> CallToolResult:
        """Bring an archived or superseded memory back to active (searching with include_superseded finds
        them; reading never restores one). Returns its id, title and status."""
        store, item = _find(backend, id)
        restored = events.restore(store, item.id, backend.indexes)
        return _result({"id": restored.id, "title": restored.title, "status": restored.status, "store": store.label})


def _add_link_tool(tool: Register, backend: Backend) -> None:
    from cortex import events

    @tool("cortex_link", DESTRUCTIVE, "Link two memories")
    def link(
        id: Annotated[str, _id_field("Id (or unique prefix) of the memory the link is written in.")],
        other: Annotated[str, _id_field("Id (or unique prefix) of the memory it links to.")],
        rel: Annotated[str | None, Field(max_length=40, description=(
            "The relation, id REL other: 'because' when other is id's reason (a decision's rationale, an open "
            "problem's answer; searches then carry it with id), 'relates_to' (default when adding), 'refines', "
            "'exemplifies', 'contradicts', 'derived_from'. With remove: only links of this relation."))] = None,
        remove: Annotated[bool, Field(description="Remove the links between the two instead of adding one.")] = False,
    ) -> CallToolResult:
        """Link two memories the user names (`cortex links add`), or with remove take the links between them
        out (either file). Returns the link added (`added` false when it was there already) or those removed."""
        store, first = _find(backend, id)
        backend.follow(store)
        if remove:
            removed = events.unlink(store, first.id, other, rel, backend.indexes)
            return _result({"removed": [{"in": owner, "rel": each.rel, "to": each.to} for owner, each in removed],
                            "store": store.label})
        linked, made = events.link(store, first.id, other, rel or "relates_to", backend.indexes)
        return _result({"id": linked.id, "rel": rel or "relates_to", "to": store.get(other).id,
                        "added": made is not None, "store": store.label})


    @tool("cortex_suspects", DESTRUCTIVE, "Memories that cannot both hold")
    def suspects(
        clear: Annotated[list[list[str]] | None, Field(max_length=100, description=(
            "Pairs [id, other] the user looked at and says are fine: never raised again (default: only list)."))] = None,
    ) -> CallToolResult:
        """The suspects queue (`cortex suspects`): pairs of active memories that contradict each other or drifted
        apart (two values for one thing), each with both ids, titles, kind and why. Show them to the user; with
        clear, record the pairs the user cleared."""
        from cortex import suspects as queue

        store = backend.store()
        if clear:
            if any(len(two) != 2 for two in clear):
                raise CortexError("clear takes pairs of two ids")
            written = queue.clear(store, [(a, b) for a, b in clear])
            return _result({"cleared": [path.stem.split("-") for path in written], "store": store.label})
        return _result({"pairs": [pair.as_dict() for pair in queue.find(store, backend.index(store))]})


def _add_resources(resource: Register, backend: Backend) -> None:
    @resource("cortex://status", "status", "application/json", "The memory store's counts, paths, search state and problems.")
    def status_resource() -> str:
        return json.dumps(_status(backend), ensure_ascii=False, indent=2)

    @resource("cortex://decisions", "decisions", "text/markdown",
              "Every active decision with its rationale and rejected alternatives (.cortex/decisions.md).")
    def decisions_resource() -> str:
        return _decisions_page(backend)

    @resource("cortex://plan", "plan", "text/markdown", "The current branch's plan and progress (.cortex/active-plan.md).")
    def plan_resource() -> str:
        return _plan(backend, None)[1]

    @resource("cortex://memory/{id}", "memory", "text/markdown", "One memory's file (front matter and text) by id.")
    def memory_resource(id: str) -> str:
        store, item = _find(backend, id)
        assert item.path is not None
        store.record_access([item.id])
        return item.path.read_text(encoding="utf-8")


def run(directory: Path | None = None, use_global: bool = False) -> None:
    """Serve over stdio until the client closes the connection (one BLAS thread: `cortex.__main__` set the cap)."""
    backend = Backend(directory, use_global)
    server = build_server(backend)
    warm = threading.Thread(target=backend.warm, name="cortex-mcp-warm", daemon=True)
    warm.start()
    with contextlib.suppress(KeyboardInterrupt):
        server.run("stdio")
    # The client closed the connection. Closing the indexes (or tearing the interpreter down) under the warm-up or
    # a background fill of contextual vectors crashed the process at exit: let the warm-up end, then leave as a
    # read-only command does (the cache is SQLite's and survives an exit mid-write).
    warm.join(timeout=30)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

