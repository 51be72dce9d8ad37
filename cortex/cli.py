"""The `cortex` command: a thin shell over the library.

Each command opens the store, calls one library function and prints. The library's named errors become one-line
messages with exit status 1.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import click

from cortex import __version__
from cortex.errors import CortexError
from cortex.memory import TYPES

TYPE_CHOICE = click.Choice(TYPES)


def _fail(message: str) -> None:
    click.echo(f"cortex: {_safe(message.replace(chr(10), ' '))}", err=True)  # one printable line
    sys.exit(1)


def _print_json(data: Any) -> None:
    # Indented at a terminal, compact in a pipe; DEL, C1 and bidi controls escaped too (json escapes only C0).
    indent = 2 if sys.stdout.isatty() else None
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    click.echo(_DEL_C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


# What a memory's text may not send to a terminal, shown as a visible escape (\x1b) instead: C0 controls (a body
# keeps newline and tab), DEL, C1, and the bidi controls that reorder what a person reads.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_DEL_C1 = re.compile(f"[\x7f-\x9f{_BIDI}]")
_CONTROL_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_CONTROL_BODY = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")


def _safe(text: str) -> str:
    """One line of text (a title, a path, a tag) as it may be printed: every control character escaped."""
    return _CONTROL_LINE.sub(_escape, text)


def _safe_body(text: str) -> str:
    """Many lines (a memory's file): newlines and tabs kept, every other control character escaped."""
    return _CONTROL_BODY.sub(_escape, text.replace("\r\n", "\n"))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _echo(line: str) -> None:
    """Print one line of a report on stdout, its control characters escaped."""
    click.echo(_safe(line))


def store_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --global / --dir to a command and hand it an opened `store`."""

    @click.option("--global", "use_global", is_flag=True, help="Use the global store ($CORTEX_HOME, default ~/.cortex).")
    @click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
                  help="Use this store folder (also $CORTEX_DIR), e.g. .cortex-example.")
    @functools.wraps(func)
    def wrapper(use_global: bool, directory: Path | None, **kwargs: Any) -> Any:
        from cortex.store import Store

        store = None
        try:
            store = Store.locate(use_global=use_global, directory=directory)
            result = func(store=store, **kwargs)
            global quick_exit
            quick_exit = func.__name__ in QUICK_EXIT and PROCESS_ARGV is not None
            return result
        except CortexError as exc:
            _fail(str(exc))
        finally:
            if func.__name__ != "status":  # status lists them among its problems
                _warn_config(store, llm_notice=func.__name__ not in NO_NOTICE)

    return wrapper


# No LLM notice from commands hooks start detached (nobody reads their stderr) nor from reset (it empties cache/).
NO_NOTICE = frozenset({"maintain", "worker", "serve_command", "watch", "reset"})
PROCESS_ARGV: list[str] | None = None  # the arguments of a `cortex` process (set by `cortex.__main__.run`)
# Read-only commands whose process may end without tearing down what it loaded (`cortex.__main__.run`).
QUICK_EXIT = frozenset({"list_command", "status", "show"})
quick_exit = False  # set once such a command ran in a `cortex` process


def _index(store: Any) -> Any:
    """The store's index, synced (manifest level)."""
    from cortex.index import Index

    return Index(store).ensure()


def _warn_config(store: Any, llm_notice: bool = True) -> None:
    """Each wrong setting the command read (its default used), and once the LLM notice: a line each on stderr."""
    config = getattr(store, "_config", None)  # only when the command loaded it: never read it just for this
    for problem in getattr(config, "invalid", ()):
        click.echo(f"cortex: warning: {_safe(problem)}", err=True)
    if llm_notice and store is not None and store.label == "project":
        from cortex.llm import notice

        line = notice(store, "cli")  # reads config.yaml if the command did not (from its cache)
        if line is not None:
            click.echo(f"cortex: {_safe(line)}", err=True)


class CortexGroup(click.Group):
    """The command group, with click's usage errors as one line (`cortex: <message>`) and exit status 1."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:  # a caller (a test, an embedding program) handles click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # plain `cortex`: the help, not an error
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.UsageError as exc:  # unknown option, missing argument, bad value
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            _fail(_one_line(exc.format_message()) + where)
        except click.ClickException as exc:
            _fail(_one_line(exc.format_message()))
        except click.Abort:  # Ctrl-C or end of input at a prompt
            _fail("aborted")
        except OSError as exc:  # the machine refused: a read-only store, no permission, a full disk
            from cortex.files import write_problem

            problem = write_problem(exc)
            if problem is None:
                raise
            _fail(problem)
        sys.exit(result if isinstance(result, int) else 0)  # an int only from --help/--version (click's Exit)


def _one_line(message: str) -> str:
    """click's message as one line in cortex's style: "Missing argument 'QUERY'." -> "missing argument 'QUERY'"."""
    text = " ".join(message.split()).rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


@click.group(cls=CortexGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cortex")
def main() -> None:
    """cortex: a git-native memory for AI coding assistants.

    Memories are markdown files in .cortex/memories/, committed with the code.
    """


def _at(store: Any, rev: str | None) -> Any:
    """The store as it was at a git revision (materialised from git objects into the cache), or itself."""
    if not rev:
        return store
    from cortex.gitops import materialize_at
    from cortex.store import Store

    return Store(materialize_at(store.root, rev), f"project@{rev}")


@main.command()
@click.option("--global", "use_global", is_flag=True, help="Create the global store instead ($CORTEX_HOME).")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), help="Create the store in this folder.")
@click.option("--git-hooks", is_flag=True, help="Also install the pre-push, post-merge, post-checkout and post-rewrite hooks.")
@click.option("--claude", "claude_code", is_flag=True, help="Also add cortex's hooks to .claude/settings.json and write .claude/rules/cortex-memory.md.")
@click.option("--agents", is_flag=True, help="Also keep a marked section of AGENTS.md holding the briefing (updated by the Stop hook).")
@click.option("--codex", is_flag=True, help="Also add cortex's hooks and MCP server to .codex/ and its memory rules to AGENTS.md (OpenAI Codex CLI).")
@click.option("--gemini", is_flag=True, help="Also add cortex's hooks and MCP server to .gemini/settings.json and its memory rules to GEMINI.md (Google Gemini CLI).")
@click.option("--cursor", is_flag=True, help="Also add cortex's hooks, MCP server and rules file to .cursor/ (Cursor's agent).")
def init(use_global: bool, directory: Path | None, git_hooks: bool, claude_code: bool, agents: bool, codex: bool,
         gemini: bool, cursor: bool) -> None:
    """Create a .cortex/ store in this repository (or the global one)."""
    from cortex.gitops import find_worktree_root
    from cortex.store import STORE_DIRNAME, Store, global_home

    if use_global:
        root = global_home()
    elif directory is not None:
        root = directory
    else:
        worktree = find_worktree_root(Path.cwd())
        root = (worktree or Path.cwd()) / STORE_DIRNAME
    existed = (root / "config.yaml").exists()
    try:
        store = Store.init(root, label="global" if use_global else "project")
    except OSError as exc:
        _fail(f"{root}: cannot create the store ({exc.strerror})")
    except CortexError as exc:  # a store folder that is a link
        _fail(str(exc))
    if use_global:  # a git repository of its own: the Stop hook commits there, `cortex sync --global` pushes
        from cortex import globalsync

        if globalsync.ensure_repository(store)[1]:
            globalsync.commit_changes(store, "cortex: global store")
            click.echo(f"made {store.root} a git repository (`cortex sync --global --remote URL` to sync it)")
    else:  # an older store's custom merge driver: replaced by git's built-in union (docs/git.md)
        from cortex.gitops import union_attributes

        for line in union_attributes(store.root):
            click.echo(line)
    if existed:
        click.echo(f"cortex store already set up at {store.root}")
    else:
        click.echo(f"created {store.root} (config.yaml, memories/, .gitignore)")
        if not use_global:  # the pages exist from the first commit: a push right after init finds none stale
            from cortex import projections

            projections.refresh(store)
        if not use_global and find_worktree_root(root.parent) is None:
            click.echo("not a git repository: branch tracking and git features are off")
    from cortex.errors import NotARepository

    try:
        for module in _assistant_modules(claude_code, codex, gemini, cursor):  # cortex.claude, cortex.codex, …
            for line in module.install(store.root.parent):
                click.echo(line)
        if agents:
            from cortex import agents as agents_file

            click.echo(agents_file.update(store, create=True) or f"{agents_file.path_for(store)} is already up to date")
            attribute = agents_file.union_attribute(agents_file.path_for(store).parent)
            if attribute:
                click.echo(attribute)
        if git_hooks:
            from cortex.gitops import install_git_hooks

            for line in install_git_hooks(Path.cwd()):
                click.echo(line)
    except NotARepository as exc:  # only the git hooks need one
        _fail(f"{exc}: git hooks need a git repository")
    except CortexError as exc:
        _fail(str(exc))


def _assistant_modules(claude: bool, codex: bool, gemini: bool, cursor: bool) -> list[Any]:
    import importlib

    return [importlib.import_module(f"cortex.{name}") for name, wanted in
            (("claude", claude), ("codex", codex), ("gemini", gemini), ("cursor", cursor)) if wanted]


@main.command()
@click.argument("text")
@click.option("--type", "memory_type", type=TYPE_CHOICE, default="context", show_default=True, help="Kind of memory.")
@click.option("--title", help="Short title (default: the first sentence of TEXT).")
@click.option("--summary", help="One line for short renderings and the briefing (default: written from TEXT).")
@click.option("--priority", type=click.IntRange(1, 10), default=5, show_default=True, help="Importance, 1..10.")
@click.option("--confidence", type=click.FloatRange(0, 1), default=0.9, show_default=True, help="How sure, 0..1.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeat for more).")
@click.option("--file", "files", multiple=True, help="A code file this is about (repeat for more).")
@click.option("--pin", is_flag=True, help="Always include it in briefings.")
@click.option("--created", metavar="DATE", help="When it was learnt, for notes brought in from elsewhere (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ; default now).")
@click.option("--json", "as_json", is_flag=True, help="Print the new record as JSON.")
@store_options
def remember(store: Any, text: str, memory_type: str, title: str | None, priority: int, confidence: float,
             tags: tuple[str, ...], files: tuple[str, ...], pin: bool, as_json: bool, summary: str | None,
             created: str | None = None) -> None:
    """Save a memory. TEXT is its content ('-' reads it from stdin)."""
    from cortex import events

    if text == "-":
        text = sys.stdin.read()
    for trace in events.forgotten_like(store, text, title):  # said, and written all the same: the person asked
        click.echo(f"cortex: warning: this repeats a forgotten memory: {_safe(trace.said())}", err=True)
    made = events.remember(store, text, None, type=memory_type, title=title, priority=priority,
                           confidence=confidence, tags=tags, files=files, pinned=pin, summary=summary, created=created)
    if as_json:
        _print_json(made.to_dict() | {"store": store.label})
    else:
        click.echo(made.id)


@main.command(name="list")
@click.option("--type", "types", type=TYPE_CHOICE, multiple=True, help="Only this type (repeatable).")
@click.option("--status", "statuses", type=click.Choice(["active", "superseded", "archived", "proposed"]), multiple=True,
              help="Only this status (default: active).")
@click.option("--all", "show_all", is_flag=True, help="Every status, archived and superseded included.")
@click.option("--tag", "tags", multiple=True, help="Only memories with this tag.")
@click.option("--branch", help="Only memories made on this branch.")
@click.option("--pinned", is_flag=True, help="Only pinned memories.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("--at", "at", metavar="REV", help="The memories as they were at a git revision (read from git, no checkout).")
@store_options
def list_command(store: Any, types: tuple[str, ...], statuses: tuple[str, ...], show_all: bool, tags: tuple[str, ...],
                 branch: str | None, pinned: bool, as_json: bool, at: str | None) -> None:
    """List memories (active ones unless --status or --all)."""
    store = _at(store, at)
    wanted_status = set() if show_all else set(statuses or ("active",))
    root = str(store.memories_dir)
    wanted = set(tags)
    index = _index(store)
    # The records' fields read as columns: no dict per memory.
    fields = ("pinned", "priority", "type", "title", "id", "status", "branch") + (
        ("tags",) if wanted or as_json else ()) + (("confidence", "files", "created", "updated") if as_json else ())
    rows = [row for row in index.records().column(*fields)
            if not ((types and row[3] not in types) or (wanted_status and row[6] not in wanted_status)
                    or (branch is not None and row[7] != branch) or (pinned and not row[1])
                    or (wanted and not wanted & set(row[8])))]
    rows.sort(key=lambda row: (not row[1], -row[2], row[3], row[4].lower(), row[5]))
    for path, reason in index.problems():
        click.echo(f"cortex: skipped {_safe(str(path))}: {_safe(reason)}", err=True)
    if as_json:
        _print_json([{"id": ident, "type": kind, "title": title, "status": status, "priority": priority,
                      "confidence": confidence, "pinned": is_pinned, "branch": on, "tags": tags, "files": files,
                      "created": created, "updated": updated, "path": f"{root}/{rel}", "store": store.label}
                     for rel, is_pinned, priority, kind, title, ident, status, on, tags, confidence, files, created,
                     updated in rows])
        return
    if not rows:
        click.echo("no memories" + ("" if show_all else " (try --all)"))
        return
    width = shutil.get_terminal_size((100, 20)).columns
    type_width = max(len(row[3]) for row in rows)
    lines = []
    for _, is_pinned, priority, kind, title, ident, status, *_ in rows:
        flags = ("*" if is_pinned else " ") + (" " if status == "active" else status[0].upper())
        prefix = f"{ident}  {kind:<{type_width}}  p{priority:<2} {flags} "
        title = _safe(title)
        if len(prefix) + len(title) > width:
            title = title[: max(10, width - len(prefix) - 1)] + "…"
        lines.append(prefix + title)
    lines.append(f"{len(rows)} memories  (* pinned, A archived, S superseded)")
    click.echo("\n".join(lines))  # one write, not one per memory


@main.command()
@click.argument("memory_id")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@click.option("--at", "at", metavar="REV", help="The memory as it was at a git revision.")
@click.option("--raw", is_flag=True, help="Print the file as it is on disk instead of every field in order.")
@store_options
def show(store: Any, memory_id: str, as_json: bool, at: str | None, raw: bool) -> None:
    """Show one memory by id (or unique id prefix), with its path: every field, its links, its body."""
    store = _at(store, at)
    item = store.get(memory_id)
    _refuse_shared_id(store, item)
    if item.links:  # a link to a memory that no longer exists is not shown (gc drops it; `--raw` shows the file)
        there = store.ids_on_disk()
        item.links = [link for link in item.links if link.to in there]
    store.record_access([item.id])
    ranking = _ranking(store, item) if not at else None
    from cortex.guard import redacted, redacted_data
    from cortex.history import generations, lines

    # Every generation, through `supersedes` links both ways; one that replaced nothing and stands needs no sync.
    replaced = item.status == "superseded" or any(link.rel == "supersedes" for link in item.links)
    history = generations(_index(store), item.id) if replaced else [
        {"id": item.id, "title": item.title, "status": item.status, "updated": item.updated}]
    if as_json:  # every form passes the one secret rule: a hand-committed secret is named, never shown
        _print_json(redacted_data(item.to_dict() | {"store": store.label, "history": history}
                                  | ({"ranking": ranking} if ranking else {})))
        return
    assert item.path is not None
    click.echo(_safe(str(item.path)))
    if raw:
        click.echo(_safe_body(redacted(item.path.read_text(encoding="utf-8").rstrip("\n"))))
    else:
        from cortex.render import full

        click.echo(_safe_body(full(item).rstrip("\n")))
    if len(history) > 1:
        click.echo("")
        for line in lines(history, item.id):
            click.echo(_safe(redacted(line)))
    if ranking:
        from cortex.salience import explain_lines

        click.echo("")
        for line in explain_lines(ranking):
            click.echo(_safe(line))


def _refuse_shared_id(store: Any, item: Any) -> None:
    """Show no memory whose id another file holds too (the cache reads every file; `Store.get` only names)."""
    from cortex.errors import MemoryNotFound
    from cortex.index import Index

    kept = Index(store).saved_rel_of_id()  # the ids kept for the committed cache: no sync when they vouch
    if kept is not None and item.id in kept and str(store.memories_dir / kept[item.id]) == str(item.path):
        return
    index = _index(store)  # synced here (not by a child): the ids it keeps are for the manifest it commits
    for path, reason in [] if item.id in index.rel_of_id() else index.problems():
        if str(path) == str(item.path) and reason.startswith(f"duplicate id {item.id}"):
            raise MemoryNotFound(f"{path}: {reason}")


def _ranking(store: Any, item: Any) -> dict[str, Any] | None:
    """Why a memory ranks where it does (the prior's terms, its salience and tier); None when unknown."""
    from cortex import salience
    from cortex.index import Index
    from cortex.memory import now_epoch
    from cortex.recall import Prior

    try:
        # The centralities kept for the committed cache when there are some: one memory needs no sync.
        central = Index(store).saved_centralities()
        prior = Prior(store, None if central is not None else _index(store), now_epoch(), store.current_branch(),
                      central=central)
        return salience.explain(store, item, prior.parts(item))
    except Exception as exc:  # the explanation is extra: a broken cache never hides the memory
        store.log(f"show: no ranking explanation: {exc!r}")
        return None


@main.command()
@click.argument("memory_id")
@click.argument("rating", type=click.Choice(["up", "down"]))
@click.option("--note", help="Why (kept in state/, shown by `cortex show`).")
@click.option("--json", "as_json", is_flag=True, help="Print the memory's usage record as JSON.")
@store_options
def feedback(store: Any, memory_id: str, rating: str, note: str | None, as_json: bool) -> None:
    """Rate a memory: up (it helped) or down (noise); feeds its salience and so the ranking."""
    from cortex import salience

    result = salience.feedback(store, memory_id, rating, note)
    if rating == "up" and store.get(result["id"]).status == "proposed":  # a person vouches for a proposal
        from cortex import events

        events.accept(store, [result["id"]])
        result["accepted"] = True
    if as_json:
        _print_json(result)
        return
    click.echo(_safe(f"rated {result['id']} {rating}: salience {result['salience']:.2f}, tier {result['tier']} "
                     f"({result['title']})" + ("; accepted (was proposed)" if result.get("accepted") else "")))


@main.command()
@click.argument("memory_id")
@store_options
def edit(store: Any, memory_id: str) -> None:
    """Open a memory in $EDITOR; it is checked before it replaces the file."""
    _edit(store, memory_id)


def _edit(store: Any, memory_id: str) -> None:
    """`cortex edit`: the draft is checked (format, id, secrets) before it replaces the file, or nothing changes."""
    from cortex import memory as fmt
    from cortex.errors import MalformedMemory, SecretDetected
    from cortex.files import atomic_write
    from cortex.store import guard_text

    item = store.get(memory_id)
    assert item.path is not None
    original = item.path.read_text(encoding="utf-8")
    draft = store.state_dir / f"edit-{item.id}.md"
    draft.parent.mkdir(parents=True, exist_ok=True)
    draft.write_text(original, encoding="utf-8")
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    while True:
        try:
            code = subprocess.call([*shlex.split(editor), str(draft)])
        except OSError as exc:
            _fail(f"cannot start editor {editor!r}: {exc.strerror}")
        if code != 0:
            _fail(f"editor exited with status {code}; {item.path} unchanged (your draft: {draft})")
        text = draft.read_text(encoding="utf-8")
        if text == original:
            draft.unlink()
            click.echo("no change")
            return
        try:
            edited = fmt.parse(text, item.path)
            if edited.id != item.id:
                raise MalformedMemory(item.path, f"id: changed from {item.id} to {edited.id}; ids are fixed")
        except MalformedMemory as exc:
            click.echo(f"cortex: {exc}", err=True)
            if sys.stdin.isatty() and click.confirm("Edit again?", default=True):
                continue
            _fail(f"{item.path} unchanged; your draft is kept at {draft}")
        try:
            guard_text(text, item.path)  # the guard every other write goes through: memories are pushed
        except SecretDetected as exc:
            where = f"{item.path}" + (f" line {exc.line}" if exc.line else "")
            if sys.stdin.isatty():
                click.echo(f"cortex: {where}: looks like a secret ({exc.rule})", err=True)
                if click.confirm("Edit again?", default=True):
                    continue
            _fail(f"{where}: looks like a secret ({exc.rule}); not saved, your draft is kept at {draft}")
        break
    with store.lock():
        try:
            now_on_disk = item.path.read_text(encoding="utf-8")
        except OSError:
            now_on_disk = None
        if now_on_disk != original:  # changed while the editor was open (a hook, consolidation, gc, a pull)
            _fail(f"{item.path} changed while you were editing; it was not overwritten. Your draft is kept at "
                  f"{draft}: run `cortex edit {item.id}` again and copy your change in")
        atomic_write(item.path, text)
        store.update(item.id, {})  # stamp `updated` through the round-trip writer
    draft.unlink()
    from cortex import events
    from cortex.index import Indexes

    events.memories_changed(store, Indexes(), [item.path], upkeep="none")  # the pages it is on, at once
    click.echo(f"saved {item.path}")


@main.command()
@click.argument("action", required=False, type=click.Choice(["accept", "reject", "edit"]))
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--json", "as_json", is_flag=True, help="Print the proposals (or those changed) as JSON.")
@store_options
def inbox(store: Any, action: str | None, ids: tuple[str, ...], as_json: bool) -> None:
    """The memories capture proposed, newest first; `accept ID...` makes them active, `reject ID...` deletes
    their files, `edit ID` opens one in $EDITOR and accepts it."""
    from cortex import events

    if action is None:
        if ids:
            _fail(f"{ids[0]!r}: name an action first (cortex inbox accept|reject|edit ID...)")
        found = events.proposals(store)
        if as_json:
            _print_json([{"id": m.id, "type": m.type, "title": m.title, "branch": m.branch, "created": m.created,
                          "path": str(m.path), "store": store.label} for m in found])
            return
        for m in found:
            _echo(f"{m.id}  {m.type:<12} {m.title}  ({m.branch or 'no branch'}, {m.created[:16].replace('T', ' ')})")
        if not found:
            click.echo("no proposals")
        return
    if not ids:
        _fail(f"inbox {action}: name one or more ids (`cortex inbox` lists them)")
    if action == "edit":
        if len(ids) > 1:
            _fail("inbox edit: name one id")
        events.proposals_named(store, ids)  # a bad id fails before the editor opens
        _edit(store, ids[0])
        if store.get(ids[0]).status != "proposed":  # the person changed its status in the editor: as written
            return
        action = "accept"
    changed = events.accept(store, ids) if action == "accept" else events.reject(store, ids)
    verb = "accepted" if action == "accept" else "rejected (file deleted)"
    if as_json:
        _print_json([{"id": m.id, "title": m.title, "path": str(m.path),
                      "status": m.status if action == "accept" else "deleted", "store": store.label} for m in changed])
    else:
        for m in changed:
            _echo(f"{m.id} {verb}")


@main.command()
@click.argument("targets", nargs=-1, required=True, metavar="TARGET...")
@click.option("--replaced-by", help="Id of the memory that replaces it (records a supersedes link).")
@click.option("--delete", is_flag=True, help="Remove the files instead of archiving (TARGETs are ids; git history keeps them).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (when TARGET is a query, or before --delete on a terminal).")
@click.option("--reason", help="Why it is forgotten: kept in its trace (.cortex/forgotten/) and said when the same is written again.")
@click.option("--json", "as_json", is_flag=True, help="Print the changed records as JSON.")
@store_options
def forget(store: Any, targets: tuple[str, ...], replaced_by: str | None, delete: bool, yes: bool,
           as_json: bool, reason: str | None = None) -> None:
    """Archive a memory (the file is kept), or with --delete remove memory files. TARGET is an id or a query;
    several ids at once."""
    from cortex import events
    from cortex.errors import MemoryNotFound

    if delete and replaced_by:
        _fail("--delete removes the memory; --replaced-by keeps it as superseded: pass one of them")
    if reason is not None and replaced_by:
        _fail("--reason is kept in a forgotten memory's trace; a superseded one stays in the history "
              "(say why in the new memory's text): pass one of them")
    if delete or len(targets) > 1:
        if len(targets) > 1 and replaced_by:
            _fail("--replaced-by replaces one memory: name one TARGET")
        bad = [t for t in targets if not re.fullmatch(r"[0-9a-fA-F]{4,12}", t)]
        if bad:
            _fail(f"{bad[0]!r} is not a memory id: name memories by id, or quote a query (cortex forget \"QUERY\")")
        items = [store.get(t) for t in targets]  # an unknown id fails here, before anything changes
        if delete:
            if not yes and sys.stdin.isatty():
                for item in items:
                    click.echo(f"{item.id}  {item.type}  {_safe(item.title)}", err=True)
                if not click.confirm(f"Delete {len(items)} memory file{'s' if len(items) > 1 else ''}?",
                                     default=False, err=True):
                    _fail("nothing changed")
            removed = events.delete(store, [item.id for item in items], reason=reason)
            if as_json:
                _print_json([{"id": m.id, "title": m.title, "path": str(m.path), "status": "deleted",
                              "store": store.label} for m in removed])
            else:
                for m in removed:
                    click.echo(f"{m.id} deleted ({_safe(str(m.path))})")
            return
        changed = [events.forget(store, item.id, reason=reason) for item in items]
        if as_json:
            _print_json([m.to_dict() | {"store": store.label} for m in changed])
        else:
            for m in changed:
                click.echo(f"{m.id} archived")
        return
    target = targets[0]
    item = None
    if re.fullmatch(r"[0-9a-fA-F]{4,12}", target):
        try:
            item = store.get(target)
        except MemoryNotFound:
            item = None
    if item is None:
        item = _forget_match(store, target, yes)
    result = events.forget(store, item.id, replaced_by=replaced_by, reason=reason)
    verb = f"superseded by {store.get(replaced_by).id}" if replaced_by else "archived"
    if as_json:
        _print_json(result.to_dict() | {"store": store.label})
    else:
        click.echo(f"{result.id} {verb}")


def _forget_match(store: Any, query: str, yes: bool) -> Any:
    """The memory `forget QUERY` means: a clearly leading hit (confirmed unless --yes), else a choice."""
    from cortex.recall import recall, use_contextual

    use_contextual("inline")
    hits = [h for h in recall([store], query, limit=5).hits if h.via is None]
    if not hits:
        _fail(f"no active memory matches {query!r}")
    best = hits[0]
    second = hits[1].match if len(hits) > 1 and hits[1].match is not None else 0.0
    clear = best.match is not None and best.match >= FORGET_MATCH and best.match - second >= FORGET_LEAD
    if clear:
        click.echo(f"best match: {best.memory.id}  {best.memory.type}  {_safe(best.memory.title)}  "
                   f"(match {best.match:.2f})", err=True)
        if not yes and not click.confirm("Forget it?", default=False, err=True):
            _fail("nothing changed")
        return best.memory
    for n, hit in enumerate(hits, start=1):
        shown = "?" if hit.match is None else f"{hit.match:.2f}"
        click.echo(f"{n}. {hit.memory.id}  {hit.memory.type}  {_safe(hit.memory.title)}  (match {shown})", err=True)
    if yes:
        _fail(f"no memory clearly matches {query!r}: nothing archived; name one by id (cortex forget ID)")
    choice = click.prompt("Forget which (number, or 0 for none)?", type=click.IntRange(0, len(hits)), default=0,
                          err=True)
    if choice == 0:
        _fail("nothing changed")
    return hits[choice - 1].memory


FORGET_MATCH, FORGET_LEAD = 0.5, 0.15


@main.command()
@click.argument("memory_id")
@click.option("--json", "as_json", is_flag=True, help="Print the restored record as JSON.")
@store_options
def restore(store: Any, memory_id: str, as_json: bool) -> None:
    """Bring an archived or superseded memory back to active (the opposite of forget)."""
    from cortex import events

    before = store.get(memory_id).status
    restored = events.restore(store, memory_id)
    if as_json:
        _print_json(restored.to_dict() | {"store": store.label})
    else:
        click.echo(f"{restored.id} restored (was {before})" if before != "active" else f"{restored.id} is already active")


@main.command()
@click.argument("memory_id")
@click.option("--archive", is_flag=True, help="Also archive the project memory (by default it stays, for the team).")
@click.option("--json", "as_json", is_flag=True, help="Print the new global record as JSON.")
@store_options
def promote(store: Any, memory_id: str, archive: bool, as_json: bool) -> None:
    """Copy a project memory into the global store; its source names the project and the original id."""
    from cortex import events

    created = events.promote(store, memory_id, archive=archive)
    if as_json:
        _print_json(created.to_dict() | {"store": "global"})
    else:
        click.echo(f"{created.id} (global, promoted from {created.source.get('id')})")


@main.command(name="sync")
@click.option("--global", "use_global", is_flag=True, help="Sync the global store ($CORTEX_HOME); required.")
@click.option("--remote", metavar="URL", help="Set the global store's remote (origin) to this URL or path first.")
@click.option("--resolve", "resolve", metavar="ID", multiple=True,
              help="You merged a conflict into memory ID: remove its conflict copies (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def sync_command(use_global: bool, remote: str | None, resolve: tuple[str, ...], as_json: bool) -> None:
    """Commit the global store's memories, pull the remote's (rebase, file by file) and push (docs/git.md)."""
    from cortex import globalsync
    from cortex.store import Store

    if not use_global:
        _fail("only the global store syncs: `cortex sync --global` (a project's memories travel with its git push)")
    try:
        result = globalsync.sync(Store.locate(use_global=True), remote=remote, resolve=resolve)
    except CortexError as exc:
        _fail(str(exc))
    if as_json:
        _print_json(result.as_dict())
        return
    if result.created:
        click.echo("made the global store a git repository (branch main)")
    for copy in result.resolved:
        _echo(f"resolved: removed {copy}")
    click.echo(f"committed {len(result.committed)} files" if result.committed else "nothing new to commit")
    if result.remote is None:
        click.echo("no remote: set one with `cortex sync --global --remote URL`")
        return
    _echo(f"pulled {len(result.pulled)} files from {result.remote}" + (
        f", {result.replayed} local commits replayed on top" if result.replayed else ""))
    if result.skipped:  # the person's config.yaml, state/ and cache/ are never the remote's to write
        _echo(f"not checked out (a sync writes only memories/ and conflicts/): {', '.join(result.skipped[:3])}"
              + (f" and {len(result.skipped) - 3} more" if len(result.skipped) > 3 else ""))
    for conflict in result.conflicts:
        _echo(f"conflict: {conflict.path} changed on both sides; this machine's version is in {conflict.copy}")
    click.echo(f"pushed to {_safe(result.remote)}" if result.pushed else "nothing to push")
    if result.conflicts:
        click.echo("`cortex status --global` lists the conflicts and what to do", err=True)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 when any problem is found.")
@store_options
def status(store: Any, as_json: bool, strict: bool) -> None:
    """Counts by type and status, store paths, search state, and problems found."""
    from cortex import status as store_status

    report = store_status.report(store, _index(store))
    _config_problems(store, report)
    if as_json:
        _print_json(report)
    else:
        _echo(f"store:    {report['root']} ({report['store']})")
        if report["store"] == "project":
            git = f"branch {report['branch']}" if report["branch"] else ("detached HEAD" if report["git"] else "off (not a git repository)")
            _echo(f"git:      {git}")
        if "sync" in report:
            _echo(f"sync:     {_sync_line(report['sync'])}")
        _echo(f"memories: {report['total']} ({report['pinned']} pinned)")
        semantic = report["semantic"]
        _echo(f"search:   full-text + semantic ({semantic['model']})" if semantic["on"]
              else f"search:   full-text only: {semantic['problem']}")
        for name, count in report["by_status"].items():
            _echo(f"  {name:<18} {count}")
        _echo("by type:")
        for name, count in report["by_type"].items():
            _echo(f"  {name:<18} {count}")
        tiers = report.get("tiers")
        if tiers:
            _echo(f"tiers:    hot {report['pinned']} pinned + {len(tiers['hot'])} most used (within "
                  f"{tiers['budget_tokens']} tokens), the rest cold; shown {tiers['shown']} times, used {tiers['used']}"
                  + (f"; {len(tiers['muted'])} muted at prompt time" if tiers["muted"] else ""))
            for change in tiers["changes"]:
                _echo(f"  {'promoted' if change['to'] == 'hot' else 'demoted'} {change['id']} to {change['to']}: "
                      f"{change['why']}")
        _activity_lines(report["activity"])
        if report["proposed"]:
            _echo(f"inbox:    {report['proposed']} proposed by capture, waiting for review (`cortex inbox`)")
        if report["flagged_pairs"]:
            _echo(f"possible duplicates flagged: {report['flagged_pairs']} pairs, judged by the next automatic "
                  f"consolidation (`cortex consolidate --auto --dry-run`)")
        if report.get("suspects"):
            when = "" if report["suspects_checked"] == "current" else " at the last check"
            _echo(f"suspects: {report['suspects']} pairs of memories that cannot both hold{when}, waiting for a "
                  f"person (`cortex suspects`)")
        elif report["suspects_checked"] == "never":
            _echo("suspects: not checked yet in this clone (`cortex suspects` compares the memories)")
        if report["contested"]:
            _echo(f"for a person ({len(report['contested'])}): alike but they differ, so consolidation did not merge "
                  f"them; forget or delete one, or merge them with `cortex consolidate`")
            for pair in report["contested"]:
                _echo(f"  {pair['id']} vs {pair['other']}: {pair['reason']}")
        for warning in report["warnings"]:
            _echo(f"warning: {warning}")
        if report["problems"]:
            _echo(f"problems ({len(report['problems'])}):")
            for problem in report["problems"]:
                _echo(f"  {problem}")
        else:
            _echo("problems: none")
    if strict and report["problems"]:
        sys.exit(1)


def _activity_lines(activity: dict[str, Any]) -> None:
    """`cortex status`: the last capture, the queues, the last briefing, the LLM's use (`state/metrics.json`)."""
    counted = activity["metrics"]
    capture = counted.get("capture", {})
    runs = f" ({capture.get('runs', 0):g} runs, {capture.get('written', 0):g} memories written)" if capture else ""
    _echo(f"last capture:  {activity['last_capture'] or 'never'}{runs}")
    queue = activity["queue"]
    _echo(f"queue:         {queue['llm_jobs']} LLM capture jobs, {queue['links']} memories waiting for links, "
          f"{queue['suggested_links']} suggested links (`cortex links --suggested`)")
    last = activity["last_briefing"]
    if last:
        built = f", built in {last['ms']:g} ms" if last.get("ms") is not None else ""
        _echo(f"last briefing: {last['tokens']} tokens, {last['memories']} memories{built}")
    else:
        _echo("last briefing: none yet")
    llm = counted.get("llm")
    if llm:
        failed = f" ({llm.get('failures', 0):g} failed)" if llm.get("failures") else ""
        _echo(f"LLM calls:     {llm.get('calls', 0):g}{failed}, about {llm.get('input_tokens', 0):,.0f} tokens in, "
              f"{llm.get('output_tokens', 0):,.0f} out")


def _sync_line(sync: dict[str, Any]) -> str:
    """The global store's repository in one line: remote, ahead/behind as of the last fetch, conflicts."""
    if not sync["repository"]:
        return "not a git repository yet (`cortex sync --global --remote URL` sets it up)"
    parts = [f"branch {sync['branch']}" if sync["branch"] else "detached HEAD",
             f"remote {sync['remote']}" if sync["remote"] else "no remote (`cortex sync --global --remote URL`)"]
    if sync["remote"]:
        parts.append(f"{sync['ahead']} ahead, {sync['behind']} behind at the last sync ({sync['last_sync'] or 'never'})")
    if sync["uncommitted"]:
        parts.append(f"{sync['uncommitted']} files not committed yet")
    parts.append(f"{len(sync['conflicts'])} conflicts")
    return "; ".join(parts)


def _config_problems(store: Any, report: dict[str, Any]) -> None:
    """A setting with a wrong value is a problem (`--strict` fails on it), not only a warning."""
    try:
        invalid = list(store.config().invalid)
    except CortexError:
        return  # an unreadable config.yaml is already among the problems
    report["warnings"] = [line for line in report["warnings"] if line not in invalid]
    report["problems"] = invalid + [line for line in report["problems"] if line not in invalid]


@main.command(name="report")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the page here (default: state/report.html in the store; '-' for stdout).")
@click.option("--json", "as_json", is_flag=True, help="Print the page's data as JSON instead of writing the page.")
@store_options
def report_command(store: Any, output: Path | None, as_json: bool) -> None:
    """Write one self-contained HTML page: the memory graph, decisions, this branch, salience and decay, problems."""
    from cortex import report

    if as_json:
        _print_json(report.build(store))
        return
    if output is not None and str(output) == "-":
        click.echo(report.render(report.build(store)), nl=False)
        return
    try:
        written = report.write(store, output)
    except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:  # the path, not the machine, is wrong
        _fail(f"{exc.filename or output}: cannot write the report there ({exc.strerror})")
    click.echo(f"wrote {_safe(str(written))}\nopen {_safe(written.resolve().as_uri())}")


RECALL_BUDGET = 2000  # tokens `cortex recall` prints at most (every recall path has a budget)


def _served_recall(stores: list[Any], query: str, **options: Any) -> Any:
    """A running `cortex serve`'s recall (its models are warm) as a `RecallResult`; None when none answers."""
    from cortex.errors import QueryRefused
    from cortex.layout import server_up

    root = str(stores[0].root)
    if not server_up(root):
        return None
    from cortex.serve import ask

    # The server searches its own stores: the project's, and the global one when this command would.
    answer: dict[str, Any] | None = ask(root, {"op": "recall", "query": query, "types": list(options.pop("types")),
                        "global": len(stores) > 1, "proposed": True, **options}, timeout=10.0)
    if not answer or "hits" not in answer:
        if answer and "refused" in answer:
            raise QueryRefused(str(answer["refused"]))
        return None
    roots = tuple(os.path.join(str(each.root), "") for each in stores)
    if any(not str(row["memory"].get("path") or "").startswith(roots) for row in answer["hits"]):
        return None  # a server with another global store (its own CORTEX_HOME): this command searches itself
    from cortex.index.manifest import memory_from_meta
    from cortex.recall import Hit, RecallResult

    hits = []
    for row in answer["hits"]:
        meta = dict(row["memory"])
        path = Path(meta.pop("path"))
        hits.append(Hit(memory_from_meta(meta, path), float(row["score"]), row["store"], snippet=row["snippet"],
                        via=row["via"], match=row["match"], root=row["root"], relevant=row.get("relevant"),
                        spans=[(int(a), int(b)) for a, b in row["highlights"]]))
    return RecallResult(hits, list(answer.get("notes") or []))


@main.command()
@click.argument("query", required=False)
@click.option("--path", "path", metavar="FILE", help="Instead of QUERY: the memories bound to FILE (its `files:`, its code's outline, its folder), most specific first.")
@click.option("--limit", "-n", type=click.IntRange(1, 1000), help="How many results (default: recall.limit, 10).")
@click.option("--type", "types", type=TYPE_CHOICE, multiple=True, help="Only this type (repeatable).")
@click.option("--branch", help="Only memories made on this branch.")
@click.option("--all", "include_all", is_flag=True, help="Also hits below the relevance line and archived or superseded memories, each marked (reading changes nothing; `cortex restore ID` brings one back).")
@click.option("--keyword", is_flag=True, help="Full-text only: skip the embedding model.")
@click.option("--since", metavar="DATE", help="Only memories created on or after DATE (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ).")
@click.option("--until", metavar="DATE", help="Only memories created on or before DATE (a day counts whole).")
@click.option("--no-global", is_flag=True, help="Search the project store only.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("--at", "at", metavar="REV", help="Search the memories as they were at a git revision (project store only).")
@click.option("--budget", "budget", type=click.IntRange(50, 100_000), default=RECALL_BUDGET, show_default=True,
              help="Token budget of the answer (~4 characters a token): results past it are left out, and said so.")
@store_options
def recall(store: Any, query: str | None, limit: int | None, types: tuple[str, ...], branch: str | None,
           include_all: bool, keyword: bool, no_global: bool, as_json: bool, at: str | None, budget: int,
           since: str | None, until: str | None, path: str | None) -> None:
    """Find memories by meaning and by words (hybrid full-text + semantic): the relevant ones, or "nothing
    relevant". With --path FILE: the active memories bound to that file."""
    if path is not None:
        if query is not None:
            raise click.UsageError("give QUERY or --path FILE, not both", click.get_current_context())
        other = [name for name, given in (("--branch", branch), ("--all", include_all), ("--keyword", keyword),
                                          ("--at", at), ("--since", since), ("--until", until)) if given]
        if other:
            raise click.UsageError(f"--path takes --type, --limit, --budget and --json, not {other[0]}",
                                   click.get_current_context())
        _recall_path(store, path, types, limit or int(store.config().get("recall.limit")), budget, as_json)
        return
    if query is None:
        raise click.UsageError("missing argument 'QUERY' (or --path FILE)", click.get_current_context())
    from cortex.recall import NARROWED_NOTE, count_reads, time_window, use_contextual
    from cortex.recall import recall as run_recall
    from cortex.store import iter_stores
    from cortex.text import estimate_tokens, within_budget

    if at:
        store, no_global = _at(store, at), True
    stores = list(iter_stores(store, include_global=not no_global and store.label == "project"))
    asked, limit = limit, limit or int(store.config().get("recall.limit"))
    try:
        window = time_window(since, until)
    except ValueError as exc:
        _fail(f"--{exc}")
    result: Any = None if at or window else _served_recall(stores, query, limit=limit, types=types, branch=branch,
                                                       include_all=include_all, keyword=keyword)
    if result is not None and asked and any(NARROWED_NOTE in note for note in result.notes):
        result = None  # the server narrowed a broad query; the person asked for `--limit`: search here
    here = result is None
    if here:  # no server (or still warming): search here
        if not keyword:
            use_contextual("inline")
        result = run_recall(stores, query, limit=limit, types=types, branch=branch, include_all=include_all,
                            keyword_only=keyword, narrow=asked is None, count=False, window=window, proposed=True)
    # Below the relevance line (`cortex.recall.mark_relevant`): left out, or with --all shown and marked.
    below = 0 if include_all else sum(hit.relevant is False for hit in result.hits)
    shown = [hit for hit in result.hits if include_all or hit.relevant is not False]
    hits = within_budget(shown, budget, lambda hit: estimate_tokens(json.dumps(hit.to_dict(), ensure_ascii=False)))[0]
    left_out = len(shown) - len(hits)
    if here:  # what is shown and relevant is read (a server counted its relevant hits itself)
        count_reads(stores, hits)
    for note in result.notes:
        click.echo(f"cortex: {_safe(note)}", err=True)
    if left_out:
        click.echo(f"cortex: {left_out} more results left out (token budget {budget}; raise it with --budget)", err=True)
    if below and not hits:  # said only when it explains an empty answer: a shown answer needs no footnote
        click.echo(f"cortex: {below} weaker hits below the relevance line left out (--all shows them)", err=True)
    result.hits = hits
    from cortex.graph import hit_reasons
    from cortex.staleness import mark

    mark(stores, hits)  # in this process, served or not: the working tree's git says
    because = hit_reasons(stores, hits)  # a decision's reason, linked `because`, comes with it
    if as_json:
        from cortex.guard import redacted_data

        rows = [hit.to_dict() | {"created": hit.memory.created}
                | ({"because": because[hit.memory.id]} if hit.memory.id in because else {}) for hit in result.hits]
        _print_json(redacted_data(rows))  # the one secret rule, as `medium`
        return
    if not result.hits:
        click.echo("nothing relevant")
        return
    from cortex.guard import redacted
    from cortex.render import medium

    for hit in result.hits:  # the medium form: heading, what the title does not say, marked words, facts
        project = f": {hit.memory.project}" if hit.memory.project else ""
        label = "" if hit.store == "project" else f" [{hit.store}{project}]"
        via = f"  (via {hit.via})" if hit.via else ""
        via += "  (below the relevance line)" if hit.relevant is False else ""
        via += f"  (possibly stale: {hit.stale})" if hit.stale else ""
        click.echo(_safe_body(f"{hit.score:5.3f}  " + medium(hit.memory, hit.snippet, hit.spans, label + via,
                                                              indent="       ")))
        for reason in because.get(hit.memory.id, ()):
            _echo(redacted(f"       because: {reason['title']} `{reason['id']}`"))


def _recall_path(store: Any, path: str, types: tuple[str, ...], limit: int, budget: int, as_json: bool) -> None:
    """`cortex recall --path FILE`: the project's active memories bound to FILE (`cortex.bypath`), in budget."""
    from cortex.bypath import lookup
    from cortex.text import estimate_tokens, within_budget

    if store.label != "project":
        _fail("--path looks in a project's store (files are a repository's)")
    try:
        rel, rows = lookup(store, path, os.getcwd())
    except CortexError as exc:
        _fail(f"--path {exc}")
    rows = [row for row in rows if not types or row["type"] in types]
    kept = within_budget(rows[:limit], budget, lambda row: estimate_tokens(json.dumps(row, ensure_ascii=False)))[0]
    if len(kept) < len(rows):
        click.echo(f"cortex: {len(rows) - len(kept)} more memories bound to {rel} left out (--limit, --budget)", err=True)
    store.record_access(row["id"] for row in kept)  # what is shown is read
    if as_json:
        from cortex.guard import redacted_data

        _print_json(redacted_data(kept))
        return
    if not kept:
        click.echo("nothing relevant")
        return
    for row in kept:
        click.echo(_safe_body(f"{row['id']}  [{row['type']}] {row['title']}  ({row['why']})"))
        if row["summary"] and row["summary"] != row["title"]:
            click.echo(_safe_body(f"              {row['summary']}"))

@main.command()
@click.option("--hard", is_flag=True, help="Also remove the transcript cursors and the LLM capture queue (asks first).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (with --hard).")
@store_options
def reset(store: Any, hard: bool, yes: bool) -> None:
    """Remove the cache and local state (state/), keeping the memories; the next command rebuilds the cache."""
    from cortex.lifecycle import reset as reset_store

    if hard and not yes and not click.confirm(
            f"Remove the cache and all of {store.state_dir}, transcript cursors included (the next capture reads "
            f"whole transcripts again; duplicates are skipped)?", default=False):
        _fail("reset cancelled: nothing removed")
    removed = reset_store(store, hard=hard)
    kept = "" if hard else "; kept the transcript cursors and the LLM queue (`--hard` removes them too)"
    click.echo(f"removed {len(removed)} cache and state entries{kept}; memories untouched")


@main.command()
@click.argument("words", nargs=-1, metavar="[ID | add ID OTHER | remove ID OTHER]")
@click.option("--rel", help="With add: the relation, ID REL OTHER (default relates_to; `because`: OTHER is ID's "
                            "reason); with remove: only links of this relation.")
@click.option("--suggested", is_flag=True, help="List the suggested links (similar, just under graph.link_min), for review.")
@click.option("--accept", nargs=2, metavar="ID OTHER", help="Write a suggested link (relates_to, in ID's file).")
@click.option("--dismiss", nargs=2, metavar="ID OTHER", help="Drop a suggested link without writing it.")
@click.option("--remove", nargs=2, metavar="ID OTHER", help="Remove every link between ID and OTHER, in either file.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@store_options
def links(store: Any, words: tuple[str, ...], suggested: bool, accept: tuple[str, str] | None,
          dismiss: tuple[str, str] | None, remove: tuple[str, str] | None, as_json: bool,
          rel: str | None = None) -> None:
    """The links of a memory (or of the store), with strength now (decayed) and when made; --suggested for review;
    `add ID OTHER --rel REL` links two memories, `remove ID OTHER [--rel REL]` takes links out."""
    from cortex import graph
    from cortex.memory import now_epoch

    if words and words[0] in ("add", "remove"):
        _links_write(store, words, rel, as_json)
        return
    if len(words) > 1:
        _fail(f"links takes one memory id, or `add ID OTHER` / `remove ID OTHER`; got {' '.join(words)!r}")
    if rel is not None:
        _fail("--rel goes with `cortex links add ID OTHER` or `cortex links remove ID OTHER`")
    memory_id = words[0] if words else None
    if remove:  # the older spelling of `cortex links remove ID OTHER`
        _links_write(store, ("remove", *remove), None, as_json)
        return
    if accept or dismiss:
        a, b = accept or dismiss  # type: ignore[misc]
        made = graph.resolve_suggestion(store, a, b, accept=bool(accept))
        click.echo(f"linked {made.to} from {a} (relates_to, strength {made.strength:g})" if made
                   else f"dismissed the suggested link between {a} and {b}")
        return
    index = _index(store)
    titles = {entry["id"]: json.loads(entry["meta"]).get("title", "") for entry in index.records().values()}
    if suggested:
        rows = [{"id": a, "other": b, "similarity": s, "title": titles.get(a, ""), "other_title": titles.get(b, "")}
                for a, b, s in graph.pending_suggestions(store, index) if memory_id in (None, a, b)]
        if as_json:
            _print_json(rows)
            return
        for row in rows:
            _echo(f"{row['id']} ~ {row['other']}  {row['similarity']:.2f}  {row['title']}  ~  {row['other_title']}")
        click.echo(f"{len(rows)} suggested links (`cortex links --accept ID OTHER` writes one, `--dismiss` drops it)")
        return
    only = store.get(memory_id).id if memory_id else None
    ages = graph.LinkAges(store, index, now_epoch())
    rows = []
    there = set(index.rel_of_id())
    for entry in sorted(index.records().values(), key=lambda e: e["id"]):
        meta = json.loads(entry["meta"])
        for link in meta.get("links", ()):
            if only not in (None, entry["id"], link["to"]) or link["to"] not in there:
                continue  # (a link to a memory that no longer exists is skipped: gc drops it)
            now = ages.strength(entry["id"], link["rel"], link["to"], link.get("strength"))
            rows.append({"id": entry["id"], "rel": link["rel"], "to": link["to"], "strength": link.get("strength"),
                         "strength_now": None if now is None else round(now, 3), "created": link.get("created")})
    if as_json:
        _print_json(rows)
        return
    for row in rows:
        strength = "" if row["strength"] is None else f"  strength {row['strength']:g} (now {row['strength_now']:.2f})"
        created = f"  made {row['created']}" if row["created"] else ""
        _echo(f"{row['id']} {row['rel']} {row['to']}{strength}{created}")
    click.echo(f"{len(rows)} links")


@main.command("suspects")
@click.argument("words", nargs=-1, metavar="[clear A B [C D ...]]")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (with clear: the pairs cleared).")
@store_options
def suspects_command(store: Any, words: tuple[str, ...], as_json: bool) -> None:
    """Pairs of active memories that cannot both hold (contradiction or drift), each with why; `clear A B` records
    that a person looked and the pair is fine: it is never raised again (a file under .cortex/cleared/ to commit)."""
    from cortex import suspects

    if words:
        if words[0] != "clear" or len(words) < 3 or len(words) % 2 == 0:
            _fail(f"suspects takes `clear A B [C D ...]` (pairs of ids); got {' '.join(words)!r}")
        written = suspects.clear(store, list(zip(words[1::2], words[2::2])))
        if as_json:
            _print_json([{"a": p.stem.split("-")[0], "b": p.stem.split("-")[1], "file": str(p)} for p in written])
            return
        for path in written:
            _echo(f"cleared {path.stem.replace('-', ' and ')} ({path}): commit it and the pair stays cleared")
        return
    found = suspects.find(store, _index(store))
    if as_json:
        _print_json([pair.as_dict() for pair in found])
        return
    for pair in found:
        _echo(f"{pair.kind}: {pair.a} \"{pair.a_title}\" vs {pair.b} \"{pair.b_title}\"")
        _echo(f"  why: {pair.reason}")
    click.echo(f"{len(found)} open pair{'' if len(found) == 1 else 's'}" + (" (supersede one: `cortex forget OLD --replaced-by NEW`; fine as they are: "
                                              "`cortex suspects clear A B`)" if found else ""))


def _links_write(store: Any, words: tuple[str, ...], rel: str | None, as_json: bool) -> None:
    """`cortex links add ID OTHER --rel REL` and `cortex links remove ID OTHER [--rel REL]`."""
    from cortex import events

    verb, ids = words[0], words[1:]
    if len(ids) != 2:
        _fail(f"links {verb}: name two memories: cortex links {verb} ID OTHER"
              + (" --rel REL" if verb == "add" else " [--rel REL]"))
    if verb == "remove":
        removed = events.unlink(store, ids[0], ids[1], rel)
        if as_json:
            _print_json([{"in": owner, "rel": each.rel, "to": each.to} for owner, each in removed])
        else:
            for owner, each in removed:
                click.echo(f"removed {owner} {each.rel} {each.to}")
        return
    first, made = events.link(store, ids[0], ids[1], rel or "relates_to")
    other = store.get(ids[1]).id
    if as_json:
        _print_json({"id": first.id, "rel": rel or "relates_to", "to": other, "added": made is not None})
    else:
        click.echo(f"{'linked' if made else 'already linked:'} {first.id} {rel or 'relates_to'} {other}")


@main.command()
@store_options
def reindex(store: Any) -> None:
    """Rebuild the cache (index and vectors) from the memory files."""
    from cortex.index import Index

    index = Index(store)
    report = index.rebuild()
    if index.encoder_problem:
        click.echo(f"cortex: semantic search off ({index.encoder_problem})", err=True)
    files = index.manifest.files if index.manifest else {}
    skipped = sum(1 for entry in files.values() if "error" in entry)
    note = f"; {skipped} skipped as malformed, see `cortex status`" if skipped else ""
    click.echo(f"reindexed {len(files)} files ({report.embedded} embedded{note}) in {report.seconds:.1f}s")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the digest and differences as JSON.")
@store_options
def verify(store: Any, as_json: bool) -> None:
    """Print the cache's digest and check it against the files, every vector recomputed (exit 1 if they differ)."""
    from cortex.index import Index

    index = Index(store)
    index.sync(full=True)  # damaged parts it finds are rebuilt, and reported below
    digest = index.digest()
    remaining = index.check()
    differences = [f"damaged, rebuilt now: {line}" for line in index.repaired] + remaining
    if as_json:
        _print_json(digest | {"differences": differences, "repaired": index.repaired,
                              "vectors_checked": index.vectors_checked, "ok": not differences})
    else:
        vectors = f"vectors on, {index.vectors_checked} recomputed and compared" if digest["vectors"] else "vectors off"
        click.echo(f"digest {digest['digest']}  ({digest['memories']} memories, {vectors})")
        for line in differences:
            click.echo(f"  {line}")
        if not differences:
            click.echo("cache matches the files")
        elif not remaining:
            click.echo("cache did NOT match the files; the damaged parts were rebuilt (`cortex verify` again to confirm)")
        else:
            click.echo("cache does NOT match the files; run `cortex reindex`")
    if differences:
        sys.exit(1)


@main.command()
@click.option("--debounce", type=float, default=0.3, show_default=True, help="Seconds to wait for a burst of changes to end.")
@store_options
def watch(store: Any, debounce: float) -> None:
    """Keep the cache in step with the files while it runs (Ctrl-C stops)."""
    from cortex.spawn import resident

    resident()
    from cortex.watch import AlreadyWatching, watch as run_watch

    try:
        run_watch(store, debounce=debounce, echo=lambda line: click.echo(line, err=True))
    except AlreadyWatching as exc:
        _fail(str(exc))


@main.command()
@click.option("--check", is_flag=True, help="Write nothing; exit 1 naming the pages that are out of date.")
@store_options
def project(store: Any, check: bool) -> None:
    """Regenerate decisions.md, decisions-archive.md and active-plan.md from the memories."""
    from cortex import projections

    if check:
        stale = projections.stale(store)
        for path in stale:
            click.echo(f"cortex: {path} is out of date; run `cortex project`", err=True)
        if stale:
            sys.exit(1)
        click.echo("projections are up to date")
        return
    changed = projections.refresh(store)
    for path in changed:
        click.echo(f"wrote {path}")
    if not changed:
        click.echo("projections are up to date")


@main.command()
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the actions as JSON.")
@store_options
def gc(store: Any, dry_run: bool, as_json: bool) -> None:
    """Archive faded memories and merged branches' progress; remove long-archived files (git keeps them); drop links
    to memories that no longer exist."""
    from cortex import lifecycle

    actions = lifecycle.gc(store, dry_run=dry_run)
    if not dry_run and any(a.kind != "keep" for a in actions):
        from cortex import events
        from cortex.index import Indexes

        events.memories_changed(store, Indexes(), upkeep="none", everything=True)  # the pages, at once
    if as_json:
        _print_json([a.to_dict() for a in actions])
        return
    verb = {"archive": "would archive" if dry_run else "archived", "remove": "would remove" if dry_run else "removed",
            "keep": "keeping", "unlink": "would unlink" if dry_run else "unlinked"}
    for action in actions:
        click.echo(f"{verb[action.kind]} {action.id} {_safe(action.title)} ({_safe(action.reason)})")
    if not actions:
        click.echo("nothing to do")


@main.command()
@click.option("--dry-run", is_flag=True, help="Print the proposed groups and their merged text; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Merge every group without asking (not those whose memories differ: they are kept for a person).")
@click.option("--allow-conflicts", is_flag=True, help="Also merge memories that differ in a claim (a number, version, name, negation, choice); never those linked contradicts.")
@click.option("--threshold", type=click.FloatRange(0, 1), help="Duplicate score a group needs (default: consolidate.manual_threshold, 0.55).")
@click.option("--auto", "auto", is_flag=True, help="Run what runs after capture, without asking: only pairs flagged when written, at consolidate.auto_threshold (0.64).")
@click.option("--json", "as_json", is_flag=True, help="Print the groups (and what was merged) as JSON.")
@store_options
def consolidate(store: Any, dry_run: bool, yes: bool, allow_conflicts: bool, threshold: float | None, auto: bool,
                as_json: bool) -> None:
    """Merge near-duplicate memories of the same type into one (the originals are archived, linked derived_from)."""
    from cortex import consolidate as merging

    if merging.recover(store):
        click.echo("rolled back an unfinished consolidation", err=True)
    if auto and allow_conflicts:
        _fail("--auto never merges memories that differ; `cortex consolidate` asks about them")
    report: dict[str, Any] = {}
    result = None
    if auto:  # the automatic run asks nobody: it merges only what no check stops, and keeps the rest for a person
        try:
            groups, result, report = merging.automatic(store, threshold, dry_run=dry_run)
        except CortexError as exc:
            _fail(str(exc))
    else:
        groups = merging.find_groups(store, threshold, progress=sys.stderr.isatty(), report=report,
                                     conflicts="allow" if allow_conflicts else "show")
    if report.get("by") == "static similarity":
        click.echo(f"the contextual model could not be loaded (see .cortex/state/cortex.log): judged by the static "
                   f"similarity at {report['threshold']:.2f} or more", err=True)
    if report.get("waiting"):
        key, again = ("max_judged", "cortex consolidate --auto") if auto else ("max_judged_by_hand", "cortex consolidate")
        click.echo(f"{len(report['waiting'])} memories wait for a decision (at most consolidate.{key} memories are "
                   f"encoded per run): run `{again}` again", err=True)
    asking = not yes and not dry_run and not auto
    if asking and groups and not sys.stdin.isatty():
        _fail("not a terminal: pass --yes to merge every group, or --dry-run to see them")
    chosen = []
    # pairs that differ: kept for a person, never merged unasked (the automatic run found and kept its own)
    contested: list[tuple[str, str, str]] = list(report["contested"]) if auto else []
    settled = []
    for n, group in enumerate(groups, start=1):
        merged = group.merged if auto and not dry_run else merging.preview(store, group, use_llm=asking)
        ids = [m.id for m in group.members]
        if not as_json:
            differ = f"; they differ, {group.conflict}" if group.conflict else ""
            click.echo(f"group {n} ({group.type}, {report.get('by', 'duplicate score')} {group.similarity:.2f}{differ}):")
            for member in group.members:
                click.echo(f"  {member.id} {_safe(member.title)}")
            if merged is not None and (dry_run or asking):
                click.echo(f"  merged: {_safe(merged.title)}")
                for line in merged.body.strip().splitlines():
                    click.echo(f"    {_safe(line)}" if line.strip() else "")
        if merged is None:
            if not as_json:
                click.echo(f"  not merged: {group.veto or 'the LLM says these memories differ'}")
            continue
        if dry_run or auto:
            continue
        if asking:
            question = f"merge group {n} anyway?" if group.conflict else f"merge group {n}?"
            if click.confirm(question, default=not group.conflict):
                chosen.append(group)
            if group.conflict:
                settled.append((ids[0], ids[1]))  # a person decided: merged, or both kept
        elif group.conflict:
            contested.append((ids[0], ids[1], group.conflict))
        else:
            chosen.append(group)
    if not dry_run and not auto:
        merging.contest(store, contested)
        merging.settle(store, settled)
    if not as_json:
        for a, b, why in contested:
            click.echo(f"not merged: they differ ({why}): {a} and {b} are kept for a person (`cortex status` lists "
                       f"them); forget or delete one, or merge them by answering yes to `cortex consolidate` or "
                       f"with --allow-conflicts")
        if not groups and not contested:
            click.echo("no near-duplicates found")
    if chosen:
        try:
            result = merging.apply(store, chosen)
        except CortexError as exc:
            _fail(str(exc))
        from cortex import events
        from cortex.index import Indexes

        events.memories_changed(store, Indexes(), upkeep="none", everything=True)  # the pages, at once
    merged_ids = result.merged if result is not None else []
    if as_json:
        _print_json({"groups": [g.to_dict() for g in groups],
                     "merged": [{"id": new, "from": old} for new, old in merged_ids],
                     "contested": [{"id": a, "other": b, "reason": why} for a, b, why in contested]})
        return
    for group in chosen:  # the LLM, asked as the merge was made, stopped it
        if group.veto:
            click.echo(f"not merged: {', '.join(m.id for m in group.members)}: {group.veto}")
    for new, old in merged_ids:
        click.echo(f"merged {', '.join(old)} into {new}")


@main.command(name="index-code")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--force", is_flag=True, help="Index again even when a file has not changed.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@store_options
def index_code_command(store: Any, paths: tuple[Path, ...], force: bool, as_json: bool) -> None:
    """Describe source files (default: the repository) as a code_description and the code, linked source_of; kept
    out of git (derived from the code)."""
    from cortex import codeindex

    report = codeindex.index_code(store, list(paths) or [store.worktree or store.root.parent], force=force)
    if as_json:
        _print_json(codeindex.as_dict(report))
        return
    for line in codeindex.describe(report):
        click.echo(line)
    if not (report.indexed or report.unchanged or report.skipped):
        click.echo("no files found")


@main.command()
@click.option("--git-hooks", is_flag=True, help="Remove cortex's git hooks (restoring any hook they chained) and merge driver.")
@click.option("--claude", "claude_code", is_flag=True, help="Remove cortex's entries from .claude/settings.json and its rules file.")
@click.option("--agents", is_flag=True, help="Remove cortex's section from AGENTS.md.")
@click.option("--codex", is_flag=True, help="Remove cortex's entries from .codex/ and its rules from AGENTS.md.")
@click.option("--gemini", is_flag=True, help="Remove cortex's entries from .gemini/settings.json and its rules from GEMINI.md.")
@click.option("--cursor", is_flag=True, help="Remove cortex's entries from .cursor/ and its rules file.")
def uninstall(git_hooks: bool, claude_code: bool, agents: bool, codex: bool, gemini: bool, cursor: bool) -> None:
    """Remove what `cortex init` installed outside .cortex/ (memories are never touched)."""
    from cortex.errors import NotARepository
    from cortex.gitops import find_worktree_root, uninstall_git_hooks

    if not (git_hooks or claude_code or agents or codex or gemini or cursor):
        _fail("say what to remove: --git-hooks, --claude, --agents, --codex, --gemini and/or --cursor")
    root = find_worktree_root(Path.cwd()) or Path.cwd()
    try:
        for module in _assistant_modules(False, codex, gemini, cursor):  # Claude Code's entries go last
            for line in module.uninstall(root):
                click.echo(line)
        if agents:
            from cortex import agents as agents_file

            click.echo(agents_file.remove(root) or "AGENTS.md has no cortex section")
        if claude_code:
            from cortex import claude

            for line in claude.uninstall(root):
                click.echo(line)
        if git_hooks:
            for line in uninstall_git_hooks(Path.cwd()):
                click.echo(line)
    except (NotARepository, CortexError) as exc:
        _fail(str(exc))


HOOK_EVENTS = ("session-start", "prompt", "stop", "pre-compact", "session-end", "pre-tool-use", "subagent-start",
               "subagent-stop", "git-pre-push", "git-post-merge", "git-post-checkout", "git-post-rewrite")


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("event", type=click.Choice(HOOK_EVENTS), metavar="EVENT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook(event: str, args: tuple[str, ...]) -> None:
    """Entry point for the hooks cortex installs.

    \b
    EVENT is an assistant's hook, JSON on stdin:
      session-start, prompt, stop, pre-compact, session-end
        (Claude Code; Codex CLI, Gemini CLI and Cursor too),
      pre-tool-use (a sub-agent's task; the memories bound to a file about to be edited),
      subagent-start, subagent-stop (Claude Code's sub-agents);
    or a git hook, git's arguments following:
      git-pre-push, git-post-merge, git-post-checkout, git-post-rewrite.
    """
    from cortex import hooks

    def stdin() -> str:  # read only for the events that take it: a git hook's stdin may never end
        return sys.stdin.read() if not sys.stdin.isatty() else ""

    handler = getattr(hooks, "claude_" + ("stop" if event == "pre-compact" else event).replace("-", "_"), None)
    if handler is not None:  # an assistant's event: `cortex.hooks.claude_<event>`
        sys.exit(handler(stdin()))
    if event == "git-pre-push":
        sys.exit(hooks.git_pre_push(list(args), stdin()))
    sys.exit(hooks.git_refresh(event[len("git-"):], list(args)))


@main.command(name="log")
@click.argument("memory_id")
@click.option("--limit", "-n", type=int, default=0, help="At most this many commits (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@store_options
def log_command(store: Any, memory_id: str, limit: int, as_json: bool) -> None:
    """A memory's history from git: commits, authors, dates and what changed (follows renames)."""
    from cortex.errors import MemoryNotFound
    from cortex.gitops import memory_log, open_repository, store_prefix

    repo = open_repository(store.root if store.label == "global" else store.root.parent)
    try:
        full_id = store.get(memory_id).id
    except MemoryNotFound:
        full_id = memory_id.lower()  # gone from the working tree: history still knows it
    entries = memory_log(repo, full_id, store_prefix(repo, store.root), limit)
    if as_json:
        _print_json(entries)
        return
    if not entries:
        _fail(f"no commit touches memory {memory_id} (not committed yet?)")
    for entry in entries:
        click.echo(_safe(f"{entry['commit'][:12]}  {entry['date']}  {entry['author']}  {entry['change']}  {entry['message']}"))
        for detail in entry["details"]:
            click.echo(f"    {_safe(detail)}")


@main.command(name="diff")
@click.argument("revisions", metavar="OLD..NEW")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
@store_options
def diff_command(store: Any, revisions: str, as_json: bool) -> None:
    """Memories added, changed, archived, superseded and removed between two revisions, by type."""
    from cortex.gitops import memory_diff, open_repository, store_prefix

    old, sep, new = revisions.partition("..")
    if not sep or not old:
        _fail("give two revisions as OLD..NEW, e.g. main..feature")
    repo = open_repository(store.root if store.label == "global" else store.root.parent)
    changes = memory_diff(repo, old, new or "HEAD", store_prefix(repo, store.root))
    if as_json:
        _print_json(changes)
        return
    if not any(changes.values()):
        click.echo("no memory changed")
        return
    for kind, rows in changes.items():
        if not rows:
            continue
        click.echo(f"{kind} ({len(rows)}):")
        for memory_type in sorted({row["type"] for row in rows}):
            click.echo(f"  {memory_type}:")
            for row in (r for r in rows if r["type"] == memory_type):
                extra = f"  [{', '.join(row['fields'])}]" if row.get("fields") else ""
                click.echo(f"    {row['id']}  {_safe(row['title'])}{_safe(extra)}")


@main.command(name="review")
@click.argument("revisions", metavar="BASE..HEAD")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="The store folder inside the repository (default: the .cortex/ found here, or $CORTEX_DIR).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole review as JSON (no caps).")
@click.option("--limit", type=click.IntRange(1, 100), default=5, show_default=True, help="Items shown per list in the markdown.")
@click.option("--post", is_flag=True, help="Also post it as one pull-request comment (GitHub Actions, GitLab CI), updating cortex's earlier one "
              "(environment: docs/review.md).")
@click.option("--pr", type=click.IntRange(1), help="The pull or merge request number for --post (default: from the CI environment).")
@click.option("--strict", is_flag=True, help="Exit 1 when the review has warnings.")
def review_command(revisions: str, directory: Path | None, as_json: bool, limit: int, post: bool, pr: int | None,
                   strict: bool) -> None:
    """What a branch changes in memory, for a pull request: decisions, gotchas, conventions, the plan, warnings."""
    from cortex import review
    from cortex.gitops import open_repository

    try:
        base, head = review.parse_range(revisions)
        repo = open_repository(Path.cwd())
        report = review.build(repo, base, head, review.store_prefix(repo, directory))
        text = review.render(report, limit)
        if post:
            done, url = review.post(text, os.environ, pr, empty=not review.has_findings(report))
            click.echo(f"cortex: review comment {done}{' ' + url if url else ''}", err=True)
    except CortexError as exc:
        _fail(str(exc))
    if as_json:
        _print_json(report)
    else:
        click.echo(_safe_body(text), nl=False)
    if strict and report["warnings"]:
        sys.exit(1)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def scan(paths: tuple[Path, ...]) -> None:
    """Scan files for secrets, as the store and the pre-push hook do; exit 1 naming file and line."""
    from cortex.guard import scan_bytes

    found = 0
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as exc:
            _fail(f"{path}: cannot read ({exc.strerror})")
        for finding in scan_bytes(data):  # the text alone, in any encoding: a file's name never changes the rules
            click.echo(f"{path}:{finding.line}: possible secret ({finding.kind})")
            found += 1
    if found:
        sys.exit(1)


@main.command(name="capture")
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--from-start", is_flag=True, help="Ignore the cursor: read the whole transcript again (duplicates are still skipped).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--dry-run", is_flag=True, help="Print what would be written (layer, source record) and write nothing.")
@store_options
def capture_command(store: Any, transcript: Path, from_start: bool, as_json: bool, dry_run: bool) -> None:
    """Capture memories from a Claude Code transcript (what the Stop hook runs), from where the last run stopped."""
    from cortex import events, maintain
    from cortex.capture import capture
    from cortex.index import Indexes
    from cortex.store import iter_stores

    indexes = Indexes()
    report = capture(store, transcript, from_start=from_start, indexes=indexes, dry_run=dry_run)
    if dry_run:
        rows: list[dict[str, Any]] = [{"type": c.type, "title": c.title, "layer": c.layer, "record": c.record,
                                       "index": c.index, "files": c.files, "tags": c.tags, "body": c.body}
                                      for c in report.candidates]
        if as_json:
            _print_json({"records": report.records, "dry_run": True, "candidates": rows})
        else:
            click.echo(f"{report.records} new records: {len(rows)} candidates (dry run, nothing written)")
            for row in rows:
                click.echo(f"  {row['type']:<12} {row['layer']:<11} {row['record'] or '-':<38} {_safe(row['title'])}")
        return
    events.capture_done(store, report, indexes, upkeep="none")  # projections and AGENTS.md, as the Stop hook
    for each in iter_stores(store):  # links for what was written (global-scope memories too); gc, consolidation
        maintain.run(each, indexes, stage=False)
    if as_json:
        _print_json({"records": report.records, "written": report.written, "updated": report.updated,
                     "duplicates": report.duplicates, "redacted": report.redacted, "by_layer": report.by_layer,
                     "skipped_lines": report.skipped_lines})
        return
    click.echo(f"{report.records} new records: {len(report.written)} memories written, {len(report.updated)} updated, "
               f"{report.duplicates} duplicates skipped, {report.redacted} secrets redacted")
    for memory_id in report.written:
        item = store.get(memory_id)
        click.echo(f"  {item.id}  {item.type:<10} {_safe(item.title)}")


@main.command()
@store_options
def maintain(store: Any) -> None:
    """Upkeep after capture (started detached): link new memories, check suspects, fill contextual vectors; daily gc and
    automatic consolidation in the global store."""
    from cortex.spawn import resident

    resident()
    from cortex import maintain as upkeep

    counts = upkeep.run(store)
    click.echo(", ".join(f"{name} {count}" for name, count in counts.items()))
    upkeep.check_suspects(store)  # the queue `cortex status` counts
    upkeep.fill_contextual(store)  # after the links: the memories' contextual vectors, for recall's re-ranking


@main.command()
@store_options
def worker(store: Any) -> None:
    """Run queued LLM capture jobs once (the Stop hook starts this detached; failures stay queued)."""
    from cortex.spawn import resident

    resident()
    from cortex.worker import process_queue

    counts = process_queue(store)
    click.echo(f"{counts['done']} jobs done, {counts['failed']} failed (kept for a retry), {counts['written']} memories written")


@main.command(name="briefing")
@click.option("--budget", type=click.IntRange(50, 2500), help="Token budget (default: briefing.budget_tokens, 500).")
@click.option("--fresh", is_flag=True, help="Build it again instead of using the cached one.")
@click.option("--json", "as_json", is_flag=True, help="Print text, token count and memory ids as JSON.")
@click.option("--at", "at", metavar="REV", help="The briefing as it would have been at a git revision (read from git objects).")
@store_options
def briefing_command(store: Any, budget: int | None, fresh: bool, as_json: bool, at: str | None) -> None:
    """The session-start briefing for this branch (what the SessionStart hook injects)."""
    from cortex import briefing

    if at:
        result = briefing.build(_at(store, at), budget, rev=at)
    else:
        result = briefing.build(store, budget) if (fresh or budget) else briefing.get(store)
    if as_json:
        _print_json({"text": result.text, "tokens": result.tokens, "ids": result.ids})
    else:
        click.echo(result.text, nl=False)


@main.command(name="serve")
@click.option("--idle", type=float, default=900.0, show_default=True, help="Exit after this many seconds without a request.")
@store_options
def serve_command(store: Any, idle: float) -> None:
    """Resident query process for prompt-time recall (a unix socket only this user can reach; started by SessionStart)."""
    from cortex.serve import serve

    reason = serve(store, idle=idle)
    click.echo(f"cortex serve stopped ({reason})", err=True)


@main.command(name="mcp")
@click.option("--global", "use_global", is_flag=True, help="Serve the global store ($CORTEX_HOME) instead.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Serve this store folder (default: $CORTEX_DIR, else .cortex/ in $CLAUDE_PROJECT_DIR or here).")
def mcp_command(use_global: bool, directory: Path | None) -> None:
    """MCP server on stdio: search, read and write memory from Claude Code or any MCP client."""
    from cortex.spawn import resident

    resident()
    from cortex.mcp_server import run

    run(directory=directory, use_global=use_global)
