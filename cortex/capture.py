"""Capture: memories from session transcripts, read incrementally, through the layers, guarded and deduplicated.

docs/capture.md.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import re
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from cortex.errors import SecretDetected
from cortex.files import atomic_write, file_lock, lock_wait, read_json
from cortex.gitfacts import branch_and_head, worktree_root
from cortex.guard import redact, scan_text
from cortex.memory import CAPTURE_TYPES, Memory, now_iso, title_from_text
from cortex.store import Store
from cortex.text import INJECTED_END, INJECTED_MARK, strip_controls, words
from cortex.transcripts import MAX_DUMP_BYTES, MAX_LINE_BYTES, Lines, normalise, text_of

MAX_SLICE = 65_000  # characters of the session the LLM layer is sent
SKIP_PROMPT_PREFIXES = ("<command-name>", "<command-message>", "<local-command-stdout>", "<task-notification>",
                        "<system-reminder>", "Stop hook feedback:", "[Request interrupted by user", "Caveat:")
TAG = re.compile(r"\[MEMORY:\s*([a-z_]+)((?:\s+[a-z]+=[^\s:\]]+)*)\s*:\s*(.+?)\]", re.S)
PRIVATE = re.compile(r"<private>.*?</private>", re.S | re.I)
SUBAGENT_TOOLS = ("Task", "Agent")  # the tools that run a sub-agent; their result is the sub-agent's report


@dataclass
class Event:
    kind: str  # human | text | tool
    text: str = ""
    uuid: str = ""
    branch: str | None = None
    tool: str = ""
    tool_id: str = ""
    tool_input: dict[str, Any] = field(default_factory=dict)
    result: str = ""
    failed: bool = False
    sidechain: bool = False
    cwd: str | None = None
    index: int = -1  # the record's position in the transcript slice (with `uuid`, where a memory came from)
    queued: bool = False  # a prompt typed while Claude was busy (queue-operation enqueue)


@dataclass
class Candidate:
    type: str
    title: str
    body: str
    layer: str
    confidence: float = 0.7
    priority: int = 5
    tags: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    branch: str | None = None
    key: str | None = None  # a stable identity to update in place (the session's plan)
    scope: str = "project"  # "global": the LLM layer's confident, project-independent knowledge
    project: str | None = None  # with scope global: the name of the project it was captured in
    update_only: bool = False  # with `key`: refresh the memory if it exists, never create it
    links: list[Any] = field(default_factory=list)  # Link objects proposed by the LLM layer (never `supersedes`)
    origin: dict[str, Any] = field(default_factory=dict)  # more `source` fields: the sub-agent that reported it
    record: str = ""  # the transcript record it came from (uuid) ...
    index: int = -1  # ... and its position among the records read (0 = the first record of the slice)


@dataclass
class CaptureReport:
    records: int = 0
    skipped_lines: int = 0
    written: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    duplicates: int = 0
    redacted: int = 0
    by_layer: dict[str, int] = field(default_factory=dict)
    paths: dict[str, list[Path]] = field(default_factory=dict)  # files written or updated, by store root
    candidates: list[Candidate] = field(default_factory=list)  # a dry run: what would be written, guarded


# ---------------------------------------------------------------- reading


def _cursor_path(store: Store, transcript: Path) -> Path:
    key = hashlib.sha1(str(transcript.resolve()).encode()).hexdigest()[:16]
    return store.state_dir / "cursors" / f"{key}.json"


def read_new_records(store: Store, transcript: Path, from_start: bool = False) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    """Records appended since the last run, the count of skipped lines, and the cursor to save after success."""
    stat = transcript.stat()
    cursor: dict[str, Any] = {} if from_start else read_json(_cursor_path(store, transcript), {})
    if cursor.get("inode") != stat.st_ino or int(cursor.get("size", 0)) > stat.st_size:
        cursor = {}  # replaced or truncated: start over
    with open(transcript, "rb") as handle:
        head = handle.read(1)
        handle.seek(0)
        if head == b"[":  # a JSON-array dump: one element per JSONL line
            if stat.st_size > MAX_DUMP_BYTES:  # parsed whole, so never one this big
                store.log(f"capture: {transcript}: a JSON dump of {stat.st_size} bytes, over {MAX_DUMP_BYTES}; not read")
                return [], 1, cursor
            try:
                records = json.load(handle)
            except ValueError:
                return [], 1, cursor
            done = int(cursor.get("count", 0))
            fresh = [r for r in records[done:] if isinstance(r, dict)]
            return fresh, 0, {"inode": stat.st_ino, "size": stat.st_size, "count": len(records)}
        # Streamed: a partial last line waits for the next run; one over MAX_LINE_BYTES is skipped, never held.
        lines = Lines(handle, int(cursor.get("offset", 0)), bool(cursor.get("skipping")))
        records, skipped = [], 0
        for raw in lines:
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                skipped += 1
                continue
            if isinstance(record, dict):
                records.append(record)
    if lines.skipped:
        store.log(f"capture: {transcript}: skipped {lines.skipped} line(s) over {MAX_LINE_BYTES} bytes")
    last = next((r.get("uuid") for r in reversed(records) if r.get("uuid")), cursor.get("uuid"))
    saved = {"inode": stat.st_ino, "size": lines.end, "offset": lines.end, "uuid": last, "pending": cursor.get("pending")}
    return records, skipped, saved | ({"skipping": True} if lines.skipping else {})


def _digest(text: str) -> str:
    return hashlib.sha1(" ".join(text.split()).encode()).hexdigest()[:16]


def save_cursor(store: Store, transcript: Path, cursor: dict[str, Any]) -> None:
    atomic_write(_cursor_path(store, transcript), json.dumps(cursor), durable=False)


def events(records: list[dict[str, Any]]) -> list[Event]:
    """Normalise transcript records into human prompts, assistant text and tool calls with their results."""
    out: list[Event] = []
    tools: dict[str, Event] = {}
    seen: set[str] = set()
    texts_by_message: dict[str, Event] = {}
    for index, record in enumerate(records):
        uuid = str(record.get("uuid") or "")
        if uuid:
            if uuid in seen:
                continue  # a resumed or forked session copies records
            seen.add(uuid)
        kind = record.get("type")
        raw_message = record.get("message")
        message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
        branch = record.get("gitBranch") or None
        sidechain = bool(record.get("isSidechain"))
        if kind == "assistant":
            if record.get("isApiErrorMessage") or message.get("model") == "<synthetic>":
                continue  # Claude Code's own "API Error: …" line, not the model's words
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            for block in blocks:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text"):
                    message_id = str(message.get("id") or uuid)
                    if message_id in texts_by_message:  # one response split over records
                        texts_by_message[message_id].text += "\n" + str(block["text"])
                    else:
                        event = Event("text", str(block["text"]), uuid, branch, sidechain=sidechain, index=index)
                        texts_by_message[message_id] = event
                        out.append(event)
                elif block.get("type") == "tool_use":
                    given = block.get("input")
                    event = Event("tool", "", uuid, branch, tool=str(block.get("name", "")),
                                  tool_id=str(block.get("id", "")),
                                  tool_input=given if isinstance(given, dict) else {}, sidechain=sidechain,
                                  cwd=str(record.get("cwd")) if record.get("cwd") else None, index=index)
                    tools[event.tool_id] = event
                    out.append(event)
        elif kind == "user":
            content = message.get("content")
            if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        target = tools.get(str(block.get("tool_use_id", "")))
                        if target is not None:  # a sub-agent's report is its whole answer; other output its head
                            limit = 20_000 if target.tool in SUBAGENT_TOOLS else 4000
                            target.result = text_of(block.get("content"))[:limit]
                            target.failed = bool(block.get("is_error"))
                continue
            if record.get("isCompactSummary") and not sidechain:
                out.append(Event("summary", text_of(content).strip(), uuid, branch, index=index))
                continue
            if record.get("isMeta") or sidechain:
                continue
            text = text_of(content).strip()
            if text and not text.startswith(SKIP_PROMPT_PREFIXES):
                out.append(Event("human", text, uuid, branch, index=index))
        elif kind == "queue-operation" and record.get("operation") == "enqueue" and isinstance(record.get("content"), str):
            text = record["content"].strip()
            if text and not text.startswith(SKIP_PROMPT_PREFIXES):
                out.append(Event("human", text, uuid, branch, index=index, queued=True))
    # A queued prompt usually comes back as a user record once dequeued: keep it only when it never did.
    typed = [" ".join(e.text.split()) for e in out if e.kind == "human" and not e.queued]
    return [e for e in out if not (e.queued and any(" ".join(e.text.split()) in t for t in typed))]


# ---------------------------------------------------------------- layers


REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.S)  # Claude Code's note to the model


def _clean(text: str) -> str:
    text = REMINDER.sub("", PRIVATE.sub("", text))
    # Either end of a block cortex injected: the whole message is left out (a piece of a cut block carries one).
    return "" if INJECTED_MARK in text or INJECTED_END in text else text


def self_report(items: list[Event]) -> Iterator[Candidate]:
    for event in items:
        if event.kind != "text":
            continue
        text = _clean(event.text)
        quoted = [found.span() for found in QUOTED_BLOCK.finditer(text)]
        for match in TAG.finditer(text):
            if any(start <= match.start() < end for start, end in quoted):
                continue  # in a fence or a blockquote: a file or page the assistant quoted, not its own tag
            kind, options = match.group(1), match.group(2)
            body = "\n".join(" ".join(line.split()) for line in match.group(3).strip().splitlines() if line.strip())
            if kind not in CAPTURE_TYPES or not body:
                continue
            priority, tags = 6, []
            for option in options.split():
                name, _, value = option.partition("=")
                if name == "priority" and value.isdigit():
                    priority = max(1, min(10, int(value)))
                elif name == "tags":
                    tags = [t for t in value.split(",") if t]
            yield Candidate(kind, title_from_text(body), body + "\n", "self-report", 0.9, priority, tags,
                            branch=event.branch, **_origin(event))


WINDOWS_PATH = re.compile(r"^(?:([A-Za-z]):[\\/]|/([A-Za-z])/|\\\\)")  # C:\…, C:/…, /c/… (Git Bash), \\server


def _absolute_form(path: str) -> str | None:
    """One absolute form to compare on any platform ("c:/users/ana/app" for C:\\Users\\ana\\app); None if relative."""
    match = WINDOWS_PATH.match(path)
    if match:
        drive = (match.group(1) or match.group(2) or "").lower()
        rest = path[match.end():].replace("\\", "/")
        return f"{drive}:/{rest}".lower() if drive else "//" + rest.lower()
    if path.startswith("/"):
        return path
    return None


def _relative(path: str, root: Path | None, cwd: str | None = None) -> str:
    """Repository-relative path (POSIX separators) of a file a session touched; "" outside the repository."""
    if not path:
        return ""
    absolute = _absolute_form(path)
    if absolute is None:
        return path.replace("\\", "/")
    windows = absolute != path  # a Windows path is compared lower-cased
    bases = ([str(root.resolve())] if root is not None and not windows else []) + [cwd or ""]
    for base in bases:
        form = _absolute_form(base) if base else None
        if form:
            prefix = (form.lower() if windows else form).rstrip("/")
            if absolute.startswith(prefix + "/"):
                return path.replace("\\", "/")[-(len(absolute) - len(prefix) - 1):]
    return ""


# A failing test run before a passing one is ordinary work, and so is a push without an upstream.
ROUTINE_FAILURE = re.compile(r"(?i)\b(test|tests|pytest|py\.test|jest|vitest|mocha|rspec|phpunit|tox|nox)\b"
                             r"|\bgit\s+(push|pull|fetch)\b")
WEAK_OPENING = re.compile(r"(?i)^(that's|that is|this is|i have|i've|i'll|i will|let me|now|next|done|all done|"
                          r"perfect|great|ok|okay|sure|here's|here is|it completed|it worked|it passed)\b")


def _substance(text: str) -> str:
    """The text from its first sentence that says something ("Let me look again." and the like dropped)."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(_clean(text).split()))
    while sentences and (WEAK_OPENING.match(sentences[0]) or len(sentences[0]) < 12):
        sentences.pop(0)
    return " ".join(sentences)


def _task_list(items: list[Event]) -> list[dict[str, str]]:
    """The plan as TaskCreate/TaskUpdate built it (task ids are the creation order, 1, 2, …)."""
    tasks: list[dict[str, str]] = []
    for event in items:
        if event.kind != "tool" or event.failed:
            continue
        if event.tool == "TaskCreate" and event.tool_input.get("subject"):
            tasks.append({"content": str(event.tool_input["subject"]), "status": "pending"})
        elif event.tool == "TaskUpdate":
            task_id = str(event.tool_input.get("taskId", ""))
            status = str(event.tool_input.get("status", ""))
            if task_id.isdigit() and 0 < int(task_id) <= len(tasks) and status:
                tasks[int(task_id) - 1]["status"] = status
    return tasks


def _committed(items: list[Event]) -> bool:
    return any(e.kind == "tool" and e.tool == "Bash" and not e.failed
               and re.search(r"\bgit\s+commit\b", str(e.tool_input.get("command", ""))) for e in items)


def _edited(items: list[Event], root: Path | None) -> list[str]:
    """The files these events changed, relative to the repository (or to the session's cwd, from elsewhere)."""
    return sorted({_relative(str(e.tool_input.get("file_path") or e.tool_input.get("notebook_path") or ""), root, e.cwd)
                   for e in items if e.kind == "tool" and not e.failed
                   and e.tool in ("Edit", "Write", "MultiEdit", "NotebookEdit")} - {""})


def structural(items: list[Event], session: str, root: Path | None) -> Iterator[Candidate]:
    edited = _edited(items, root)
    todos = [e for e in items if e.kind == "tool" and e.tool == "TodoWrite" and not e.failed
             and isinstance(e.tool_input.get("todos"), list)]
    tasks = _task_list(items)
    if tasks and not todos:  # the task tools (TaskCreate/TaskUpdate) of Claude Code 2.1: the same plan, built up
        last = next(e for e in reversed(items) if e.kind == "tool" and e.tool in ("TaskCreate", "TaskUpdate"))
        todos = [Event("tool", uuid=last.uuid, branch=last.branch, tool="TodoWrite", tool_input={"todos": tasks})]
    if todos:
        latest = todos[-1]
        steps = [todo for todo in latest.tool_input["todos"] if isinstance(todo, dict) and todo.get("content")]
        lines = []
        for todo in steps:
            mark = "x" if todo.get("status") == "completed" else " "
            note = " (in progress)" if todo.get("status") == "in_progress" else ""
            lines.append(f"- [{mark}] {todo['content']}{note}")
        if steps:
            first = next((todo["content"] for todo in steps if todo.get("status") != "completed"), None)
            title = f"Plan: {first}" if first else f"Plan (done): {steps[0]['content']}"
            # A plan first seen already finished is a record of work (the progress memory has it), not a plan.
            yield Candidate("plan", title_from_text(title, 100), "\n".join(lines) + "\n", "structural", 0.8, 6,
                            files=edited[:20], branch=latest.branch, key=f"plan:{session}", update_only=first is None)
    yield from request_reports(items, session, root)
    yield from compaction_summaries(items)
    yield from subagent_findings(items)
    yield from command_gotchas(items)
    yield from hook_refusals(items)
    yield from recurring_errors(items)
    yield from check_commands(items)


# Looking around (listing, reading, searching) fails all the time without teaching anything.
INSPECTION = ("ls", "cat", "find", "grep", "rg", "head", "tail", "echo", "pwd", "which", "wc", "sed", "awk", "tree",
              "file", "stat", "du", "df", "ps", "type", "command", "test", "[", "diff", "jq", "sleep", "kill", "true")


def command_gotchas(items: list[Event]) -> Iterator[Candidate]:
    """A command that failed, then worked once its own words changed: the error and the form that works."""
    commands = [e for e in items if e.kind == "tool" and e.tool in ("Bash", "PowerShell")]
    reported: set[str] = set()
    for i, failed in enumerate(commands):
        command = str(failed.tool_input.get("command", "")).strip()
        if not failed.failed or not command or "<tool_use_error>" in failed.result or "\n" in command:
            continue
        identity = _command_identity(command)
        if not identity or identity in reported or ROUTINE_FAILURE.search(command) or identity.split()[0] in INSPECTION:
            continue
        error = _error_line(failed.result)
        if not error:
            continue
        fix = None
        missing = NOT_FOUND.search(error)
        for later in commands[i + 1:i + 9]:
            text = str(later.tool_input.get("command", "")).strip()
            runner = _command_identity(text).split()[:1]
            if missing and not later.failed and runner and runner[0] not in INSPECTION + (identity.split()[0],) \
                    and re.search(rf"\s{re.escape(identity.split()[0])}\s", f" {text} "):
                fix = later  # the program was not on PATH: it runs through another (`nix develop --command go …`)
                break
            if _command_identity(text) != identity:
                continue
            if later.failed and (text == command or not USAGE.search(error) or _error_line(later.result) == error):
                if text != command:
                    break  # another form failed too: not a clean failure and fix
                continue
            if text != command:
                fix = later  # a changed form that works, or that the program accepts (a usage error gone)
            break
        if fix is None:
            continue
        fixed = str(fix.tool_input.get("command", "")).strip()
        if not missing and _wrong_folder(command, fixed, error):
            continue
        reported.add(identity)
        body = (f"`{command[:300]}` fails with:\n\n    {error[:300]}\n\nWhat works instead: `{fixed[:300]}`\n")
        title = title_from_text(f"{identity} fails with \"{error}\"", 110).rstrip("…\"") + ("\"" if len(error) < 70 else "…\"")
        yield Candidate("gotcha", title, body, "structural", 0.55, 5, branch=failed.branch, **_origin(failed))


# The programs a project is built, tested, linted or run with (the command as typed, not one run's outcome).
RUNNER = re.compile(r"^(?:(?:make|just|task|npm run|pnpm(?: run)?|yarn(?: run)?|bun run|npx|deno task|mix|rake) [a-z][\w:-]*|"
                    r"npm test|go (?:test|build|vet|generate)|cargo (?:build|test|check|clippy|fmt)|pytest|tox|nox|ruff|"
                    r"mypy|eslint|tsc|gradlew?|mvn|dotnet (?:build|test)|nix (?:build|flake check)|golangci-lint run|"
                    r"bazel (?:build|test)|ctest)\b")
WRAPPER = re.compile(r"^(?:nix develop|uv run|poetry run|pipenv run|bundle exec)\b\s*")  # runs what follows in the project's env
OWN_TARGET = re.compile(r"^(?:(?:nix develop|uv run|poetry run|pipenv run|bundle exec) )?(?:make|just|task|npm run|pnpm|yarn|"
                        r"bun run|deno task|mix|rake) [a-z]|^(?:nix develop|uv run|poetry run|pipenv run|bundle exec) [a-z][\w:-]*$")
MIN_COMMANDS = 2  # distinct ones: a session that ran one command says little about how the project is checked


def check_commands(items: list[Event]) -> Iterator[Candidate]:
    """How this project is built, tested and linted: the runner commands the session used, one form each (the last
    that worked), as typed."""
    found: dict[str, str] = {}
    worked: set[str] = set()
    first: Event | None = None
    for event in items:
        if event.kind != "tool" or event.tool not in ("Bash", "PowerShell") or event.sidechain:
            continue
        for part in re.split(r"&&|;|\|\||\|", str(event.tool_input.get("command", "")).split("\n")[0]):
            identity = _command_identity(part)
            wrapper = WRAPPER.match(identity)
            inner = identity[wrapper.end():] if wrapper else identity
            runner = RUNNER.match(inner)
            if wrapper and not runner and re.fullmatch(r"[a-z][\w:-]*", inner):
                runner = re.match(r".+", inner)  # a script of the project's own (`nix develop -c lint`)
            typed = " ".join(w for w in part.split() if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w))
            if runner is None or len(typed) > 60 or re.search(r"[<>$`\"']|\s/|[A-Za-z]:\\", typed):
                continue  # quoted data, a redirection, an absolute path: one run's form, not the way to run it
            group = (wrapper.group().strip() + " " if wrapper else "") + runner.group()
            if group not in worked:  # the last form that worked, else the last one tried
                found[group] = typed
            if not event.failed:
                worked.add(group)
            first = first or event
    if len(found) < MIN_COMMANDS or first is None or not any(OWN_TARGET.match(c) for c in found):
        return  # `pytest` and `ruff` alone say what every project of the kind runs; a target or script is the project's
    shown = list(found.values())
    title = title_from_text("How this project is built and checked: " + ", ".join(f"`{c}`" for c in shown[:4]), 120)
    body = "Commands this session ran to build, test, lint or run the project:\n\n" + \
        "\n".join(f"- `{c}`" for c in shown[:12]) + "\n"
    yield Candidate("context", title, body, "structural", 0.55, 4, tags=["commands"], branch=first.branch,
                    **_origin(first))


USAGE = re.compile(r"(?i)unknown (?:flag|option|shorthand flag|command)|unrecognized (?:option|argument)|no such option|"
                   r"invalid (?:option|flag|argument)")
NOT_FOUND = re.compile(r"(?i)command not found|not found: \S+$|: not found$|is not recognized as")
HOOK_BLOCK = re.compile(r"(?i)\bhook\b.*\b(?:blocked|denied|prevented|refused)\b|\b(?:blocked|denied|prevented|refused)\b.*\bhook\b")


RECURRING = 3  # times one error must come back in a session to be a gotcha on its own


def recurring_errors(items: list[Event]) -> Iterator[Candidate]:
    """An error the session's commands ran into again and again: it will bite the next session too."""
    seen: dict[str, list[Event]] = {}
    for event in items:
        if event.kind == "tool" and event.tool in ("Bash", "PowerShell") and event.failed and "<tool_use_error>" not in event.result:
            error = _first_error(event.result)
            command = _command_identity(str(event.tool_input.get("command", "")))
            if error and not HOOK_BLOCK.search(error) and not ROUTINE_FAILURE.search(f"{command} {error}"):
                seen.setdefault(re.sub(r"[0-9a-f]{7,}|\d+", "#", error), []).append(event)
    for hits in seen.values():
        if len(hits) < RECURRING:
            continue
        first = hits[0]
        lines = [line.strip() for line in first.result.splitlines() if line.strip()]
        error = _first_error(first.result)
        at = lines.index(error)
        shown = lines[at:at + 4]
        if not any(NAMED.search(line) for line in shown):
            continue  # "Automatic merge failed; fix conflicts …": the tool's own words, naming nothing of the project
        said = re.sub(r"(?i)^[\s:]*(?:line \d+:\s*)?(?:error:\s*)?", "", ABSOLUTE.sub("", error)) or error  # not where it ran
        full = next((p.strip() for p in re.split(r"&&|;|\|\||\n", str(first.tool_input.get("command", "")))
                     if _command_identity(p) and _command_identity(p).split()[0] not in INSPECTION + ("#",)), "")
        body = (f"Failed {len(hits)} times in one session, first from `{full[:200]}`:\n\n"  # what ran, not an echo
                + "\n".join(f"    {line[:300]}" for line in shown) + "\n" + _cause_said(items, first, said))
        run = full if len(full) <= 20 and not re.search(r"[\"'$`<>]", full) else _command_identity(full)
        title = f"{said.rstrip(':')} (again and again, from `{run}`)" if run else f"Recurring error: {said}"
        yield Candidate("gotcha", title_from_text(title, 110), body, "structural", 0.6, 5, branch=first.branch,
                        **_origin(first))


def _cause_said(items: list[Event], first: Event, error: str) -> str:
    """The session's last word on why an error happens ("This fails because `basedpyright` is not installed"), when
    a message names what failed ("basedpyright: command not found"): a gotcha with its cause."""
    subject = re.match(r"([\w.-]{4,}):", error)
    if subject is None:
        return ""
    named = re.compile(rf"(?i)(?<![\w.-]){re.escape(subject.group(1))}(?![\w-])")
    causes = [sentence for e in items if e.kind == "text" and not e.sidechain and e.index > first.index
              for sentence in re.split(r"(?<=[.!?])\s+|\n+", _clean(e.text))
              if named.search(sentence) and (GOTCHA.search(sentence) or re.search(r"(?i)\bbecause\b", sentence))]
    return f"\nWhy: {_said(causes[-1])[:300]}\n" if causes else ""


NAMED = re.compile(r"[\w.-]+/[\w.-]+|\b\w+\.[a-z]{1,5}\b|`[^`]+`|\b[a-z]+_[a-z_]+\b")  # a file, a path, an identifier
ABSOLUTE = re.compile(r"(?:\b[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?")


def hook_refusals(items: list[Event]) -> Iterator[Candidate]:
    """A tool call a hook refused: the project's guard rails bite every session that tries it again."""
    said: set[str] = set()
    for event in items:
        if event.kind != "tool" or not event.failed:
            continue
        lines = [line.strip() for line in event.result.splitlines() if line.strip()]
        at = next((n for n, line in enumerate(lines) if HOOK_BLOCK.search(line)), None)
        if at is None:
            continue
        refusal = " ".join(lines[at:at + 2])[:400]  # the hook's own message often follows on the next line
        reason = re.split(r"(?i)\bblocked:\s*|\]:\s*", refusal)[-1].strip(" -")
        if reason in said:
            continue
        said.add(reason)
        what = str(event.tool_input.get("command") or event.tool_input.get("file_path") or event.tool).strip()
        parts = [p.strip() for p in re.split(r"&&|;|\|\||\n", what) if p.strip()] or [what]
        named = {w.lower() for w in re.findall(r"[\w-]+", reason) if len(w) > 1}  # "Dangerous rm command": `rm …`
        part = next((p for p in parts if _command_identity(p).split()[:1] and _command_identity(p).split()[0] in named),
                    parts[0])
        title = title_from_text(f"A hook refuses {event.tool} calls: {reason}", 110)
        body = f"`{part[:300]}` was refused by a hook:\n\n    {refusal}\n"
        yield Candidate("gotcha", title, body, "structural", 0.6, 5, branch=event.branch, **_origin(event))


def _wrong_folder(command: str, fixed: str, error: str) -> bool:
    """True when the fix is no lesson: the wrong folder, only paths changed, or another command of the program."""
    if re.search(r"\bcd\b", error) or re.match(r"(?i)^(?:\S*sh: )?(?:line \d+: )?cd:", error):
        return True
    def plain(text: str) -> list[str]:
        return [w for w in text.split() if not re.search(r"[\\/]", w)]
    if plain(command) == plain(fixed):
        return True  # the same words, only paths differ
    identity = _command_identity(command)
    part = next((p for p in re.split(r"&&|;|\|\|", fixed) if _command_identity(p) == identity), fixed)
    mine = set(command.split())
    return len(mine & set(part.split())) < len(mine) / 2


def _command_identity(command: str) -> str:
    """What a shell command runs: the program and its subcommands (`uv run ruff check`), without flags or values."""
    for part in re.split(r"&&|;|\|\|", command):
        tokens = [w for w in part.split() if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
        if not tokens or tokens[0] in ("cd", "source", ".", "export", "set"):
            continue
        kept = [tokens[0].rsplit("/", 1)[-1]]
        for token in tokens[1:]:
            if token[:1] in ("'", '"', "$", "<", ">", "`") or len(kept) == 4:
                break  # a message, a substitution, a redirection: the rest is data
            if re.fullmatch(r"[a-z][a-z0-9_:-]*", token):
                kept.append(token)
            # flags, paths and values are skipped: `alembic -c app/alembic.ini upgrade head` is `alembic upgrade head`
        return " ".join(kept)
    return ""


_ERROR_WORDS = re.compile(r"(?i)\b(error|fatal|failed|failure|exception|not found|no such|denied|refused|invalid|cannot|can't|unable)\b")


def _origin(event: Event) -> dict[str, Any]:
    return {"record": event.uuid, "index": event.index}


def _first_error(output: str) -> str:
    """The first line of a command's output that says what went wrong (git and most tools say it first)."""
    return next((line.strip() for line in output.splitlines() if _ERROR_WORDS.search(line)), "")


def _error_line(output: str) -> str:
    """The last line of a command's output that says what went wrong (tracebacks end there)."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith("Exit code")]
    matching = [line for line in lines if _ERROR_WORDS.search(line)]
    return matching[-1] if matching else ""


FILLER = re.compile(r"(?i)^(perfect|great|excellent|awesome|good|ok|okay|sure|done|all done|now|next|let me|let's|"
                    r"i'll|i will|i'm going to|here's|here is|here are|looking at|thanks?|you're (?:absolutely )?right|yes|got it|"
                    r"based on|i notice|i now have|i can see|i see|from the|it's actually|the .{3,30} should now be open|"
                    r"i've|i have|i already|you raise|you want|makes sense|absolutely|the (?:issue|problem) is clear)\b")
# One run's outcome ("All 42 tests pass", "The build now passes", "… has been successfully …"): not what a report is about.
RUN_OUTCOME = re.compile(r"(?i)^(?:all\b.{0,60}\b(?:pass(?:es|ing|ed)?|green|clean|fixed|complete[d]?|done)\b"
                         r"|.{0,80}\b(?:successfully|is (?:now )?complete|are now passing|now (?:pass(?:es)?|builds?)\b)"
                         r"|\d+ (?:tests?|checks?|files?)\b.{0,40}\b(?:pass(?:es|ed)?|fail(?:s|ed)?)\b)")
MIN_REPORT = 160  # characters of substance a request's final report needs to be worth keeping


# Not what a title says: the state before a change ("The current prompt is …"), or a sentence whose object is only
# "this" or "that".
UNNAMED = re.compile(r"(?i)^(?:the current|currently)\b|\b(?:this|that|it)\W*$")


def summary_title(text: str, limit: int = 120) -> str:
    """A report's first prose sentence that says something and names what it is about."""
    in_code = False
    fallback = above = section = vague = row = ""  # `above`: the heading right over the current list
    lines = _clean(text).splitlines()
    for n, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith("```"):
            in_code = not in_code
            continue
        if line.startswith("|") and n and re.fullmatch(r"[|:\-\s]+", lines[n - 1].strip()) and not row:
            cells = [c.strip(" `*") for c in line.strip("|").split("|")]  # a table's first row: "Prompt: 50 → 20"
            head = lines[n - 2].lower() if n > 1 else ""
            row = f"{cells[0]}: " + (" → " if "before" in head and "after" in head else ", ").join(cells[1:3])
        if in_code or not line or line.startswith(("|", ">", "<")) or len(re.sub(r"[\W_]", "", line)) < len(line) / 2:
            continue
        heading = line.startswith("#") or (line.endswith(":") and len(line) < 60)
        item = bool(re.match(r"^(?:[-*•]|\d+[.)])\s", line))
        line = re.sub(r"^#+\s*|^[-*•]\s+|^\d+[.)]\s+|\*\*|__|`", "", line).strip()
        if heading:
            fallback = fallback or line.rstrip(":")
            above = _said(line).rstrip(":")
            section = above if len(above.split()) >= 3 else section
            continue
        above = above if item else ""
        for sentence in re.split(r"(?<![A-Z]\.)(?<=[.!?])\s+", line):
            sentence = sentence.strip().rstrip(":")
            if len(sentence) < 25 or FILLER.match(sentence) or RUN_OUTCOME.match(sentence) or sentence.endswith("?"):
                continue
            if UNNAMED.search(sentence.rstrip(".")):
                vague = vague or sentence.rstrip(".")
                continue
            if item and re.fullmatch(r"\S*[_-]\S*", above) and section:
                return title_from_text(section, limit)  # an item under a name ("cache_agent:") is one of the section
            if item and len(above.split()) >= 3 and len(above) + len(sentence) + 2 <= limit:
                return f"{above}: {sentence.rstrip('.')}"  # a list's first item says what only under its heading
            follows = [_said(x) for x in itertools.takewhile(lambda x: re.match(r"\s*(?:[-*•]|\d+[.)])\s", x), lines[n + 1:])]
            if raw.rstrip().endswith(":") and follows and len(sentence) < limit - 20:
                heads = [re.split(r"\s[(—–-]\s?|:\s|\.\s", x)[0].strip() for x in follows]  # "… preserving: a, b, c"
                shown = list(itertools.takewhile(lambda k: len(sentence) + 2 + len(", ".join(heads[:k])) <= limit,
                                                 range(1, len(heads) + 1)))
                if shown:
                    return f"{sentence}: " + ", ".join(h[:1].lower() + h[1:] for h in heads[:shown[-1]])
            if len(sentence) <= limit:
                return sentence.rstrip(".")
            clause = re.split(r"(?<=[;:—])\s|,\s(?=(?:and|but|so|which|because)\b|\w+ing\b)", sentence)[0].rstrip(";:— ,")
            return clause if 25 <= len(clause) <= limit else title_from_text(sentence, limit)
    return title_from_text(row or fallback or vague or " ".join(_clean(text).split()), limit)


def _turns(items: list[Event]) -> list[tuple[Event | None, list[Event]]]:
    """The session cut into requests: each human prompt with the events that answer it."""
    turns: list[tuple[Event | None, list[Event]]] = [(None, [])]
    for event in items:
        if event.kind == "human":
            turns.append((event, []))
        else:
            turns[-1][1].append(event)
    return [t for t in turns if t[0] is not None or t[1]]


def _report_of(answer: list[Event]) -> tuple[Event | None, bool]:
    """The request's last main-thread message with substance, and whether it was tagged (then its tags left out)."""
    acted = any(e.kind == "tool" and not e.failed and e.tool in ("Edit", "Write", "MultiEdit", "NotebookEdit", "Bash")
                for e in answer)
    for event in reversed(answer):
        if event.kind == "text" and not event.sidechain:
            if TAG.search(_clean(event.text)):
                rest = TAG.sub("", _clean(event.text)).strip()
                return (replace(event, text=rest), True) if acted and len(_substance(rest)) >= 40 else (None, True)
            if len(_substance(event.text)) >= (40 if acted else MIN_REPORT):
                return event, False
    return None, False


def request_reports(items: list[Event], session: str, root: Path | None) -> Iterator[Candidate]:
    """One memory per request whose final report says something lasting (`progress` when files changed)."""
    turns = _turns(items)
    for n, (prompt, answer) in enumerate(turns):
        report, _ = _report_of(answer)
        reply, then = turns[n + 1] if n + 1 < len(turns) else (None, [])
        if report is not None and _proposal_set_aside(_clean(report.text), reply, then):
            continue
        edited, committed = _edited(answer, root), _committed(answer)
        if report is None:
            last = next((e for e in reversed(answer) if e.kind == "text" and not e.sidechain), None)
            if not (edited or committed) or prompt is None or last is None or not TAG.search(_clean(last.text)):
                continue
            # Files changed and the reply says little (or only tags): the work itself is the progress.
            report = replace(last, text=TAG.sub("", _clean(last.text)).strip())
        # The report alone: the request restated, the file list (`files:` has it) and the commits (git has them)
        # are not what a later session needs to read; `precise` keeps what of it lasts.
        text = _capped(_clean(report.text).strip(), 6000)
        if "?" in " ".join(text.split())[-300:] and not (reply is not None and APPROVE.match(reply.text)):
            text = PROPOSED.sub("", text)  # steps it asked about and the person did not approve: not what was done
        key = f"report:{session}:{prompt.uuid or prompt.index}" if prompt is not None else f"report:{session}:{report.uuid}"
        yield Candidate("progress" if edited or committed else "context", summary_title(text), text + "\n", "structural",
                        0.6, 4, files=edited[:30], branch=report.branch, key=key, **_origin(report))


# Options laid out for the person to pick from ("A) …", "Option 2: …", each with its "Pros:"): the pick lasts, not the menu.
OPTION = re.compile(r"(?im)^\W{0,6}(?:\(?[A-E]\)|[A-E][.:]\s|option [A-E1-9]\b)|^\W{0,6}pros\b\W*:")
# The person turning down what was just offered ("No, it's ok then", "Nope", "Not now", "Let's not").
DECLINE = re.compile(r"(?i)^\W*(?:no\b(?![-\s]*(?:one|worries|problem|doubt|\w+ing)\b)|nope\b|nah\b|not (?:now|needed|necessary)\b|no need\b|"
                     r"never ?mind\b|let'?s not\b|don'?t bother\b|skip (?:it|that)\b)")


APPROVE = re.compile(r"(?i)^\W*(?:y|yes|yep|yeah|ok(?:ay)?|sure|go|do it|sounds good|lgtm|proceed|perfect|great)\b")
# The steps a report proposes ("I'd recommend:" and its list).
PROPOSED = re.compile(r"(?im)^[ \t]*(?:i'?d|i would|i) (?:recommend|suggest|propose)[^\n]*:[ \t]*\n"
                      r"(?:[ \t]*(?:[-*•]|\d+[.)])[^\n]*\n?)+")
# The person asking for a recommendation rather than approving ("what do you suggest?") or making their own pick
# ("let's use this one instead").
OTHERWISE = re.compile(r"(?i)\bwhat (?:do|would) you (?:suggest|recommend|propose|think)\b|\bwhich (?:one )?(?:do|would) you\b|"
                       r"\b(?:any|a) (?:better|other) (?:way|option|idea|approach)|\binstead\b")


def _proposal_set_aside(text: str, reply: Event | None, then: list[Event]) -> bool:
    """True for a report that asks the person to choose or approve, when it laid out options to pick from, the
    person's answer turned it down, asked back or picked something else, or the next turn made it a plan (the plan
    tool): what was chosen is said by the turns after it."""
    asks = "?" in " ".join(text.split())[-300:]
    planned = any(e.kind == "tool" and e.tool in ("TodoWrite", "TaskCreate") for e in then)
    answer = reply.text.strip() if reply is not None else ""
    return asks and (len(OPTION.findall(text)) >= 2 or planned or bool(DECLINE.match(answer) or OTHERWISE.search(answer)))


SECTION = re.compile(r"(?m)^\s*(\d+)\.\s+([A-Z][A-Za-z /&-]{3,60}):\s*$")
SECTION_TYPES = (("error", "gotcha"), ("fix", "gotcha"), ("problem", "context"), ("concept", "architecture"),
                 ("pending", "progress"), ("current work", "progress"), ("next step", "plan"), ("intent", "context"))
# The request restated, the work of that moment, a list of topic names and the log of what was tried are not
# lasting knowledge.
SKIPPED_SECTIONS = ("user messages", "files and code", "optional", "primary request", "current work", "concepts",
                    "problem solving")


def compaction_summaries(items: list[Event]) -> Iterator[Candidate]:
    """One memory per section of a compaction summary that carries knowledge, typed by the section's name."""
    summaries = [e for e in items if e.kind == "summary"]
    asked_after = {id(e): any(h.kind == "human" and h.index > e.index for h in items) for e in summaries}
    for event in summaries:
        text = _clean(event.text)
        text = text.split("\nSummary:", 1)[-1]  # the analysis before it is the model thinking aloud
        heads = list(SECTION.finditer(text))
        for n, head in enumerate(heads):
            name = head.group(2).strip()
            section = text[head.end():heads[n + 1].start() if n + 1 < len(heads) else len(text)].strip("\n").rstrip()
            lowered = name.lower()
            if any(s in lowered for s in SKIPPED_SECTIONS) or len(section) < 80:
                continue
            kind = next((t for word, t in SECTION_TYPES if word in lowered), "context")
            if kind in ("progress", "plan") and (event is not summaries[-1] or asked_after[id(event)]):
                continue  # the work pending at a compaction: a later one, or the requests after it, say what is open
            body = _capped(section, 6000) + "\n"
            title = f"{name}: {summary_title(section, 100)}"
            yield Candidate(kind, title, body, "structural", 0.6, 5, tags=["compaction"], branch=event.branch,
                            **_origin(event))


MAX_FINDING = 600  # characters of substance a sub-agent's report may have to be kept: more is a digest


def subagent_findings(items: list[Event]) -> Iterator[Candidate]:
    """A sub-agent's report when it is one short finding (a digest is what the main thread works from)."""
    for event in items:
        if event.kind != "tool" or event.tool not in SUBAGENT_TOOLS or event.failed:
            continue
        result = re.sub(r"(?m)^agentId: .*$", "", _clean(event.result)).strip()
        substance = _substance(result)
        structured = len(re.findall(r"(?m)^\s*(?:#|[-*•]\s|\d+[.)]\s|\|)", result))
        if not MIN_REPORT <= len(substance) <= MAX_FINDING or structured >= 3:
            continue
        agent = str(event.tool_input.get("subagent_type") or "sub-agent")
        agent_id = re.search(r"(?m)^agentId: *([\w-]+)", event.result)
        origin = {"agent": agent_id.group(1) if agent_id else None, "agent_type": agent, "tool_use": event.tool_id}
        yield Candidate("context", summary_title(substance), substance + "\n", "structural", 0.55, 4,
                        tags=["subagent", agent], branch=event.branch, origin={k: v for k, v in origin.items() if v},
                        **_origin(event))


GOTCHA = re.compile(r"(?i)\b(the (?:root )?(?:problem|issue|cause|bug|culprit) (?:was|is|here is)\b|root cause(?::| (?:is|was)\b)|"
                    r"turns out|it seems that .{3,80} (?:doesn't|does not|isn't|is not|only)|watch out|gotcha:|"
                    r"found the (?:problem|issue|bug|cause|culprit)|the reason (?:is|was)|this (?:happens|happened|fails|failed) because|"
                    r"note that .{3,80}\b(?:fails?|breaks?|doesn't|does not|won't|cannot|can't)|"
                    r"(?:doesn't|does not|won't|cannot|can't) (?:work|support|accept|handle|find|resolve)\b.{0,80}\bbecause)")
DECIDED = re.compile(r"(?i)\b(?:we chose|i chose|(?:i|we) decided|switched (?:to|from)|instead of|rather than|decision:|"
                     r"(?:chose|we(?:'ll| will)? (?:use|go with|switch to|keep)\b).{3,60}\b(?:over|not)|opted (?:for|to))\b")
CORRECTION = re.compile(r"(?i)^(no[,. !]|nope\b|don't\b|do not\b|stop\b|actually[, ]|instead[, ]|that's (?:wrong|not)|"
                        r"revert\b|wrong\b|not like that)")
RULE = re.compile(r"(?i)(^(?:no[,.!]|nope\b|don't\b|do not\b|never\b|always\b|stop\b|actually[, ]|instead[, ])|"
                  r"\b(?:always|never|must(?: not)?|mustn't|should(?:n't| not)?|don't|do not|(?<!to )make sure|"
                  r"(?:it|this|that) (?:needs|has) to be|needs to be|has to be|instead of|rather than|"
                  r"i prefer|we (?:use|prefer))\b)")
QUESTION = re.compile(r"(?i)^(?:should|shall|can|could|would|will|do|does|did|is|are|was|were|what|why|how|where|which|who)"
                      r" (?:we|i|you|it|this|that|there|the)\b")
HEDGED = re.compile(r"(?i)\b(?:may|might|could(?!n't| not)|possibly|probably|perhaps|likely|seems? to|appears? to)\b")
# "there should be no …" (what the person expects to find) and "we should have committed" (a regret) set no rule.
EXPECTED = re.compile(r"(?i)\bthere (?:should|must|shall)(?:n't| not)? be\b|\bshould(?:n't| not)? have (?:been|done|made|"
                      r"gone|run|written|taken|known|seen|[a-z]+ed)\b")
STRONG_RULE = re.compile(r"(?i)\b(?:never|always|must(?: not)?|mustn't)\b|(?:^|\b(?:you|we|please),? )(?:don't|do not)\b")
HEDGES = re.compile(r"(?i)^(let me|i'll (?!use|go with|switch|keep|stick)|i will|now,? (?:i|let)|first,? i|maybe|perhaps|if |i notice)")


def _sentences(text: str) -> Iterator[str]:
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        sentence = sentence.strip().strip("*-•> `#")
        sentence = re.sub(r"^[^\w\"'`(\[]+", "", re.sub(r"\*\*|__", "", sentence)).strip()  # "✅ Fixed X": "Fixed X"
        if 40 <= len(sentence) <= 400 and "?" not in sentence and not HEDGES.match(sentence) and "|" not in sentence:
            yield sentence


def _paragraph(text: str, sentence: str) -> str:
    """The paragraph a sentence sits in (and a list after a colon): a cue is kept with its reason."""
    blocks = re.split(r"\n\s*\n", text)
    probe = sentence[:60]
    for n, block in enumerate(blocks):
        if probe in re.sub(r"\*\*|__", "", block):
            if block.rstrip().endswith(":") and n + 1 < len(blocks):
                block += "\n\n" + blocks[n + 1]
            elif n and "\n" not in blocks[n - 1].strip() and blocks[n - 1].strip().rstrip("*").endswith(":"):
                block = blocks[n - 1] + "\n\n" + block  # the line that introduces the list says what it is
            return _capped(block.strip(), 1500)
    return sentence


# What the person quoted (a fence, a blockquote, double quotes) is not their rule (docs/capture.md).
QUOTED_BLOCK = re.compile(r"(?ms)^[ \t]*(`{3,}|~{3,}).*?(?:^[ \t]*\1[^\n]*$|\Z)|^[ \t]*>[^\n]*$")
QUOTED = re.compile(QUOTED_BLOCK.pattern + r"|\"[^\"\n]*\"|“[^”\n]*”")
_AI_READER = (r"(?:ai|llms?|(?:large )?language models?|ai (?:assistants?|agents?|models?|tools?|systems?)|"
              r"(?:ai |coding )?assistants?)")
# Instructions to AI readers in general are a planted note, pasted: the person says "you" to their assistant.
TO_ANY_AI = re.compile(rf"(?i)\b(?:(?:any|all|every|each) {_AI_READER}|(?:note|message|instructions?|attention|"
                       rf"notice|reminder|warning)s? (?:to|for) (?:the |an? |all |any )?{_AI_READER}|if you are an? "
                       rf"{_AI_READER}|{_AI_READER} (?:reading|processing|parsing) this)\b")


def _own_words(text: str) -> str:
    """`text` with what the person quoted (`QUOTED`) blanked to underscores, line breaks kept, so positions match."""
    return QUOTED.sub(lambda found: re.sub(r"[^\n\"“”]", "_", found.group()), text)


def user_rules(items: list[Event]) -> Iterator[Candidate]:
    """The person's own rules and corrections, as they wrote them (not pasted, quoted or addressed to any AI)."""
    acted = False
    for event in items:
        if event.kind == "tool":
            acted = True
        if event.kind != "human":
            continue
        text = _clean(event.text).strip()
        if 15 <= len(text) <= 1200 and not text.startswith(("/", "```")) and not TO_ANY_AI.search(text):
            own = _own_words(text)
            cuts = [0, *(n for found in re.finditer(r"(?<=[.!?])\s+|\n+", own) for n in found.span()), len(text)]
            sentences = [(text[a:b].strip(), own[a:b]) for a, b in zip(cuts[::2], cuts[1::2]) if text[a:b].strip()]
            # A message that asks something reports or wonders ("… not matching. Should we use X? It should have 5"):
            # its "should" is what the person expects to see, not a rule; "never", "always", "must" still are.
            asks = any(x.endswith("?") or QUESTION.match(x) for x, _ in sentences)
            rule = next((x for x, mine in sentences if RULE.search(mine.strip()) and 12 <= len(x) <= 300
                         and not x.endswith("?") and not QUESTION.match(x) and not EXPECTED.search(x)
                         and (not asks or STRONG_RULE.search(mine))), None)
            if rule is not None and (acted or not CORRECTION.match(own) or RULE.search(own[20:])):
                correction = bool(CORRECTION.match(own)) and acted
                kind, tags = ("pattern", ["correction" if correction else "rule"])
                # titled from the clause that sets the rule ("ok go with X - we should …": "we should …")
                cue = RULE.search(_own_words(rule)[1:])
                lead = [m.end() for m in re.finditer(r"\s[-—–]\s|[,;]\s", rule[:cue.start() + 1])] if cue else []
                title = title_from_text(f"{'Correction' if correction else 'User'}: {rule[lead[-1] if lead else 0:]}", 120)
                yield Candidate(kind, title, text + "\n", "keyword", 0.6, 6, tags=tags, branch=event.branch,
                                **_origin(event))
        acted = False


MOVE = re.compile(r"(?i)^(?:so,? )?(?:now,? )?(?:let me|let's|i(?:'ll| will| need to| should| have to)|"
                  r"we(?:'ll| will| need to| should))\s+")


def _fix_said(body: str, cause: str) -> str:
    """The cause's paragraph with the step the assistant takes next ("… on port 3001. Let me stop that server:") said
    as the fix it is ("Fix: stop that server.")."""
    end = body.find(cause[-30:])
    if end < 0:
        return body
    end += len(cause[-30:])
    step = re.match(r"[.!]?[ \t]+([^\n]+?)(?:[.:!](?=\s|$)|$)", body[end:])
    if step is None or not MOVE.match(step.group(1)):
        return body
    said = MOVE.sub("", step.group(1)).strip()
    return f"{body[:end]}{body[end:end + step.start(1)]}Fix: {said}.{body[end + step.end():]}"


def keyword(items: list[Event]) -> Iterator[Candidate]:
    """Rules and corrections; root causes and decisions in the assistant's untagged messages (two a message)."""
    yield from user_rules(items)
    for event in items:
        if event.kind != "text" or event.sidechain:
            continue
        text = _clean(event.text)
        if TAG.search(text):
            continue  # the message tagged what it wants remembered: mining its sentences too would say it twice
        found, bodies = 0, set()
        # A message that ends asking the person to choose or approve proposes: its "instead of" is not decided yet.
        proposes = "?" in " ".join(text.split())[-300:]
        for sentence in _sentences(text):
            # "`sees X instead of Y`" quotes output: a cue inside a code span (its opening mark cut) is not the claim
            claim = re.sub(r"`[^`]*`", "code", sentence if sentence.count("`") % 2 == 0 else "`" + sentence)
            kind = "gotcha" if GOTCHA.search(claim) else "decision" if DECIDED.search(claim) \
                and not proposes else None
            if kind is None or HEDGED.search(claim):
                continue  # "… may only be capturing one", "this might be resolved by …": a guess on the way, not a finding
            body = _paragraph(text, sentence)
            if kind == "gotcha":
                body = _fix_said(body, sentence)
            if body in bodies:  # two cues in one paragraph: one memory holds it
                break
            bodies.add(body)
            title = summary_title(sentence, 120)
            yield Candidate(kind, title, body + "\n", "keyword", 0.55, 5, branch=event.branch, **_origin(event))
            found += 1
            if found == 2:
                break


# ---------------------------------------------------------------- precision: what is not kept, by its form


# Home folders (the user's name) and temporary folders; paths under the session's own folder become relative.
HOME_PATH = re.compile(r"(?i)((?:\b[A-Z]:|/[a-z])?[\\/](?:Users|home)[\\/]+)(?!<user>)[^\\/\s'\"`<>|]+(?=[\\/])")
TEMP_PATH = re.compile(r"(?i)(?:\b[A-Z]:[\\/][^\s'\"`]*?[\\/]Temp|(?:/private)?/(?:tmp|var/folders))[\\/][^\s'\"`)\],;]*")


def machine_free(text: str, folders: list[str]) -> str:
    """`text` without machine-local paths: the session's folders cut, home user names and temp paths masked."""
    for folder in sorted({f.rstrip("/\\") for f in folders if f and len(f) > 3}, key=len, reverse=True):
        text = re.sub(re.escape(folder) + r"[\\/]", "", text)
        text = re.sub(re.escape(folder) + r"(?![\w.-])", ".", text)
    return TEMP_PATH.sub("<tmp>", HOME_PATH.sub(r"\1<user>", text))


# Openings that narrate rather than state ("The issue is that …", "I can see …"): cut from a title.
LEAD_IN = re.compile(r"(?i)^(?:(?:the|one|another|a) (?:real |actual |main |root |key )?(?:issue|problem|cause|bug|culprit|"
                     r"reason|fix|insight)(?: here)? (?:is|was)(?: clear)?(?: that)?|root cause|key (?:insight|finding)|"
                     r"i (?:can )?see(?: now)?(?: that)?|i (?:found|noticed|notice|discovered)(?: that)?|"
                     r"it (?:seems|looks like|turns out)(?: that)?|turns out(?: that)?|perfect|great|excellent|good|"
                     r"now|so|ok(?:ay)?|yes)\b\s*[:,—–!.-]*\s*")


def fact_title(title: str) -> str:
    """The title without a narrating opening or leading symbols, first letter capitalised."""
    cleaned = title
    for _ in range(3):
        cleaned = re.sub(r"^[^\w\"'`(\[]+", "", cleaned)
        cleaned = LEAD_IN.sub("", cleaned, count=1)
    if cleaned == title or len(cleaned) < 12:
        return title
    return cleaned[0].upper() + cleaned[1:]


def _title_words(title: str) -> set[str]:
    """The words a title says its fact with (a file path in it names where, not what)."""
    return {w for w in words(re.sub(r"\S*[\\/]\S*", " ", fact_title(title))) if len(w) > 2}


def _taken(title: str, taken: list[set[str]]) -> bool:
    """True when `title` has mostly the words of a title `taken` (the same fact, said again), or all but one of its
    words are in one ("Switched to X (file)" after "Switched from Y to X")."""
    mine = _title_words(title)
    return bool(mine) and any(len(mine & other) / len(mine | other) >= 0.6
                              or len(mine) >= 4 and len(mine - other) <= 1 for other in taken)


# What outlasts the session, by how it is said: a reason, a choice over another, a change from one thing to another.
REASON = re.compile(r"\b(?:because|since|so that|due to|caused by|the reason|which means|otherwise|to (?:avoid|prevent)|"
                    r"instead of|rather than|not\b[^.;]{1,40}\bbut|switch(?:ed|es)? (?:to|from)|chose|prefer|fallback|"
                    r"from\b[^.;]{1,40}\bto)\b|→|->", re.I)
# ... a failure.
FAILURE = re.compile(r"\b(?:fails?|failed|errors?|breaks?|broken|doesn't|does not|isn't|cannot|can't|won't|unknown|"
                     r"undefined|not found|missing|conflicts?|blocked|rejects?|ignores?)\b", re.I)
# The assistant telling what it does or did, or how the run went: not knowledge unless it gives a reason.
# The assistant announcing its next step: kept only when it names what it chose over (a decision).
NEXT_STEP_SAID = re.compile(r"(?i)^(?:let me|let's|i(?:'ll| will|'m going to| need to)|now,? (?:i|let|we)|next,? (?:i|we)|"
                            r"first,? (?:i|let)|we(?:'ll| will) now)\b")
CONTRAST = re.compile(r"(?i)\b(?:instead of|rather than|over)\b|, not\b")
# The assistant telling what it saw or did, or answering: kept only with a reason.
NARRATION = re.compile(r"(?i)^(?:i(?:'m| am|'ve| have| had| already| now| just| can| see| notice| found| checked| created|"
                       r" updated| added| made| [a-z]+ed| read| ran| wrote| did| went| took| built| saw)|you(?:'re| are) (?:absolutely )?right|you (?:confirmed|asked|want|raise)|perfect|"
                       r"great|excellent|awesome|good|ok(?:ay)?|sure|absolutely|done|all done|yes|got it|thanks?|"
                       r"here(?:'s| is| are)|based on|looking at|makes sense|the (?:issue|problem|fix|answer) is clear|"
                       r"this is (?:a|an|the)\b|(?:the issue is )?on lines? \d+|you can (?:now )?(?:open|explore|see|check|view|try)|"
                       r"(?:refresh|reload|check|open|visit) your|(?:that|this|these|it)\b[^.]{0,60}?\b(?:is|are|looks?|sounds?|will work|works)\s+"
                       r"(?:\w+\s+)?(?:much |far |a lot |really |so )?(?:better|great|good|perfect|nice|cleaner|optimal(?:ly)?|well)"
                       r")\b")  # the last: a reaction ("That orange is much better", "This will work optimally with …")
PAST_ACTION = re.compile(r"^(?:[A-Z][a-z]{2,}ed|Made|Ran|Wrote|Rewrote|Built|Found|Set|Put|Took|Got|Did|Kept|Left|Split|Moved)\b")
STATUS = re.compile(r"[✅✓✔🎉🚀☑🏆]|:\s*(?:all\s+)?[a-z]+ed(?: up)?\.?$|\bnow (?:be )?(?:live|open|running|in place)\b|"
                    r"\b(?:successfully|production[- ]ready|ready (?:for|to|in)|is (?:now )?complete|"
                    r"completed?|all (?:tests|checks) pass)\b|^(?:\w+ )?(?:status|progress|completion(?: rate)?)\b[^:]{0,30}:|"
                    r"\b(?:excellent|good|great|clean) (?:condition|shape|state)\b|\bfully (?:operational|functional)\b|"
                    r"\bno remaining\b|\bsuccessful\W*$|\b(?:committed|pushed) (?:to (?:git|main|origin)|and pushed)\b|^(?:dev(?:elopment)? )?(?:server|app) (?:is )?running (?:on|at)\b", re.I)
CHECKED = re.compile(r"(?i)(?:\b(?:works|working|present|valid|passe[sd]|passing|resolved|configured|in place|done|ready|"
                     r"correctly|properly|functional|operational|fixed)|\b(?:properly|correctly|fully) [a-z]+ed|\b[a-z]+ed and (?:[a-z]+ed|functional|working|ready))"
                     r"\W*(?:\([^)]*\))?\W*$")  # "Main entry point works (`src/app.js`)", "X implemented and functional"
# What the assistant suggests doing next, at the end of a report: this turn's offer, not what was decided.
NEXT_STEPS = re.compile(r"(?i)^(?:suggested |recommended |possible )?(?:next steps?|what'?s next|to (?:test|verify)\b|"
                        r"what to (?:check|test|verify|look for)\b|(?:how to |manual )?(?:testing|verification)\b|"
                        r"future (?:work|development|enhancements|improvements))\b")
# What the assistant expects of this run ("The new model should significantly improve accuracy", "This will help you
# evaluate …") or guesses would fix it ("This might be resolved by …"), and its own tools' mechanics (a file not read
# before an edit): none is a fact about the project.
EXPECTS = re.compile(r"(?i)^(?:this|these|that|it|the)\b[^.]{0,40}?\s(?:should|will|would)\s(?:now\s)?(?:\w+ly\s)?"
                     r"(?:improve|help|result in|make|provide|give|feel|look)\b|\b(?:might|may|could)\s(?:be\s)?"
                     r"(?:resolved|fixed|solved)\b")
HARNESS = re.compile(r"(?i)\b(?:Edit|Write|Read|MultiEdit|NotebookEdit) tool\b|\bfiles? (?:that )?(?:hadn't|had not|"
                     r"has not|hasn't) (?:yet )?been read\b|\b(?:write|writing|edit|editing) to (?:a )?non-existent\b")
BUT = re.compile(r"(?i)\b(?:but|however|although|though|yet)\b")
HOW = re.compile(r"\s(?:by|using|via|requires?|must|needs? to)\s|\s[-—]\s\S+\s\S+|\sto (?:satisfy|avoid|prevent|allow|ensure|support)\b")
ESTIMATE = re.compile(r"(?i)\(\s*~?\d+(?:\.\d+)?\s*(?:min|mins|minutes|h|hrs?|hours?|days?)\s*\)")  # a plan's time estimate
LABEL = re.compile(r"^(?:code|\S*[./]\S*)\s*[-—:]\s+")  # "`src/app.js` - Added …": a changed file's log line
FIX_LABEL = re.compile(r"(?i)^(?:solution|fix|fixed by|cause|root cause|workaround|reason|why)\b")  # a fix said as such
HEADING = re.compile(r"\W*\*\*[^*]+\*\*\W*")  # a line that is only bold text: a heading
NAMED_ITEM = re.compile(r"(?:[-*•]|\d+[.)])\s+\*\*[^*]+\*\*\s*(?:\([^)]*\))?:?")  # "1. **cache_agent** (90 min)": heads its items
MAX_TABLE = 10  # rows: a short table (before/after, options weighed) is kept; a longer one is data
MAX_BLOCK = 20  # lines of a code block kept under a kept sentence
MIN_LASTING = 80  # characters of lasting sentences a report needs
MIN_CUE = 40  # ... and a sentence the keyword layer picked by its cue


def _said(text: str) -> str:
    """Prose as the reader sees it: markup, list marks and leading symbols out."""
    text = re.sub(r"\*\*|__|^#+\s*|^(?:[-*•]|\d+[.)])\s+", "", text.strip())
    return re.sub(r"^[^\w\"'`(\[~/.]+", "", text).strip()


def _keeps(sentence: str) -> bool:
    """True for a sentence that states something lasting (not narration, a run's status, a question or a label)."""
    plain = re.sub(r"`[^`]*`", "code", sentence)  # a cue word inside a code span is data, not the sentence's claim
    plain = re.sub(r"\S*://\S*", "link", plain)
    plain = re.sub(r"^[A-Z]\w*\s*[—–,]\s+(?=I\b|I')", "", plain)  # "Sam — I read the issues …": to someone, still narration
    if len(re.sub(r"[\W\d_]", "", plain)) < 20 or plain.endswith("?") or ESTIMATE.search(plain):
        return False
    if NEXT_STEP_SAID.match(plain):
        return bool(CONTRAST.search(plain))
    if NEXT_STEPS.match(plain) or HARNESS.search(plain):  # "To test: reload …" said inline
        return False
    if EXPECTS.search(plain):
        return bool(REASON.search(plain))
    if NARRATION.match(plain) or RUN_OUTCOME.match(plain):
        return bool(REASON.search(plain))
    if STATUS.search(plain) or CHECKED.search(plain) or "✅" in sentence:
        return bool(FAILURE.search(plain) and BUT.search(plain))  # "… done, but it reported conflicts": the conflicts
    # "Removed the old worktree" is this run's log; "Fixed X by Y", "Moved X to Y" also say how, which lasts.
    action = "" if FIX_LABEL.match(plain) else LABEL.sub("", plain)
    action = action[:1].upper() + action[1:]  # "README.md — added a row": the log line's verb, whatever its case
    return not PAST_ACTION.match(action) or bool(REASON.search(action) or HOW.search(action))


def lasting(text: str, said: list[set[str]], least: int = MIN_LASTING, listed: bool = False) -> str:
    """What of `text` outlasts the session, in its order: its lasting sentences (each once across the capture,
    `said`), with the headings, short tables and code blocks that go with them."""
    kept: list[str] = []
    prose = 0
    stated = False  # a sentence of its own, a reason, a code span or block, a table: not only a list of labels
    headings: list[str] = []
    lines = _clean(text).splitlines()
    fence: list[str] = []
    aside = False  # under a "Next steps" heading
    dropped = -1  # the indent of a list item left out: the lines under it ("- Fixed by …") go with it
    for n, raw in enumerate(lines):
        line = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if line and dropped >= 0:
            if indent > dropped:
                continue
            dropped = -1
        if line.startswith("#") or HEADING.fullmatch(line) or (line.endswith(":") and (len(line) < 60 or NEXT_STEPS.match(
                _said(line))) and not re.match(r"^(?:[-*•]|\d+[.)])\s", line)):  # "To test: reload … and you should see:"
            aside = bool(NEXT_STEPS.match(_said(line)) or line.endswith(":") and not line.startswith("#")
                         and not HEADING.fullmatch(line) and re.search(r"(?i)\bready (?:for|to)\b", line))  # its offers
        if aside:
            continue
        if fence:
            fence.append(raw.rstrip())
            if line.startswith(fence[0].strip()[:3]):
                if (kept or headings) and len(fence) <= MAX_BLOCK and not re.match(r"\s*(?:`{3,}|~{3,})\s*diff\b", fence[0]):
                    # under a kept sentence or heading: what it names (a diff is the change itself: git keeps it)
                    prose += sum(len(h) for h in headings)
                    kept += [h.rstrip(":") + ":" for h in headings[-2:]] + ["\n".join(fence)]
                    stated = True
                    headings = []
                fence = []
            continue
        if line.startswith(("```", "~~~")):
            fence = [raw.rstrip()]
            continue
        if line.startswith("|"):
            if n == 0 or not lines[n - 1].strip().startswith("|"):
                table = list(itertools.takewhile(lambda x: x.strip().startswith("|"), lines[n:]))
                rows = [x for x in table if not re.fullmatch(r"[|:\-\s]+", x.strip())]
                hashes = sum(bool(re.match(r"\|\s*`?[0-9a-f]{7,40}`?\s*\|", x.strip())) for x in rows)
                if len(rows) <= MAX_TABLE and not STATUS.search(" ".join(rows)) and hashes < len(rows) / 2:  # commits: git
                    kept.append("\n".join(x.strip() for x in table))
                    stated = True
                    before_after = re.search(r"(?i)\bbefore\b.*\bafter\b", rows[0]) and len(rows) > 2
                    prose += MIN_LASTING if before_after else len(re.sub(r"[|\s]+", " ", " ".join(rows[1:])))  # a change
            continue
        if not line or line.startswith(">"):
            above = lines[n - 1].strip() if n else ""
            if not line and above and not (above.startswith("#") or HEADING.fullmatch(above) or NAMED_ITEM.fullmatch(above)):
                headings = []  # a block under the headings ended with nothing of it kept
            continue
        if line.startswith("#") or HEADING.fullmatch(line) or NAMED_ITEM.fullmatch(line):
            before = next((x.strip() for x in reversed(lines[:n]) if x.strip()), "#")
            if not (before.startswith("#") or HEADING.fullmatch(before) or NAMED_ITEM.fullmatch(before)):
                headings = []  # a new section: the last one's heading had nothing kept under it
            if not STATUS.search(line):
                headings.append(ESTIMATE.sub("", _said(line)).strip())  # shown only above what is kept under it
            continue
        bullet = re.match(r"^(?:[-*•]|\d+[.)])\s+", line)
        good = []
        for sentence in re.split(r"(?<![A-Z]\.)(?<![ .][a-z]\.)(?<=[.!?])\s+", _said(line)):
            sentence = _said(sentence)
            mine = {w for w in words(sentence) if len(w) > 2}
            if not _keeps(sentence) or len(mine) > 3 and any(len(mine & other) >= 0.8 * len(mine) for other in said):
                continue
            said.append(mine)
            good.append(sentence)
        if bullet and not good:
            dropped = indent
        if good:
            kept += [h.rstrip(":") + ":" for h in headings[-2:]] + [("- " if bullet else "") + " ".join(good)]
            headings = []
            prose += len(" ".join(good))
            stated = stated or any(not bullet and not x.endswith(":") or "`" in x
                                   or REASON.search(re.sub(r"\([^)]*\)", "", x)) for x in good)
    # A list of labels and fragments ("Extensive validation", "AOJ-101: config_agent") with nothing stated is a
    # feature list or a status board, not something to know.
    return "\n".join(kept) if prose >= least and (stated or listed) else ""


def _bare(body: str) -> bool:
    """True for a cue that is one short sentence with no reason or fix ("The issue is that jest is imported twice."):
    a diagnosis on the way to a fix, too cut to use later."""
    return "\n" not in body.strip() and len(body.strip()) < 100 and not REASON.search(body)


def precise(candidates: list[Candidate], items: list[Event], root: Path | None) -> list[Candidate]:
    """The candidates worth a memory: only their lasting sentences, each once, machine paths and narrating openings out."""
    folders = sorted({e.cwd for e in items if e.cwd} | ({str(root)} if root is not None else set()))
    kept: list[Candidate] = []
    said: list[set[str]] = []
    seen: list[set[str]] = []
    candidates = [c for c in candidates if not _overruled(c, items)]  # what was overruled replaces and takes nothing
    # Of two saying one thing, the one that names its kind (a tag, a gotcha, a decision) keeps it, not the report.
    for candidate in sorted(candidates, key=lambda c: (c.layer != "self-report", (c.key or "").startswith("report:"))):
        candidate.body = machine_free(candidate.body, folders)
        # What was said (a report, a summary, a cue's paragraph) is cut to what lasts; a tag, the person's own rule,
        # a plan and what the tools showed (a command's gotcha: structural, no key, no tags) are kept whole.
        told = candidate.layer == "keyword" and candidate.type != "pattern" or candidate.layer == "structural" and \
            candidate.type != "plan" and bool(candidate.key or candidate.tags) and "commands" not in candidate.tags
        if told:  # redacted first: cut into sentences, a private key's lines would no longer read as one
            pending = "compaction" in candidate.tags and candidate.type in ("progress", "plan")  # a to-do list is its items
            body = lasting(redact(candidate.body)[0], said, MIN_LASTING if candidate.layer == "structural" else MIN_CUE,
                           listed=pending)
            if not body or candidate.layer == "keyword" and candidate.type == "gotcha" and _bare(body):
                continue
            candidate.body = body + "\n"
            cue = candidate.title.rstrip(".…")
            # A cue's own sentence names its fact better than the paragraph's first line (a list's first item).
            if not (candidate.layer == "keyword" and len(cue) >= 25 and cue[:40] in body):
                candidate.title = summary_title(body)
        candidate.title = fact_title(machine_free(candidate.title, folders))
        if candidate.layer != "self-report" and _taken(candidate.title, seen):
            continue  # the same fact under the same words: one memory holds it
        seen.append(_title_words(candidate.title))
        kept.append(candidate)
    return _latest_word(kept)


SETS = re.compile(r"(?i)^\W*(?:(?:no|ok(?:ay)?|actually|instead)\W+)?(?:make|set|change|use|bump|raise|lower|increase|decrease|"
                  r"reduce|limit|cap)\b")  # an instruction that sets a figure
QUANTITY = re.compile(r"(?i)\b([a-z][a-z_]{2,})\s*[:=]\s*(\d[\d,]*)\b|\b(\d[\d,]*)\s+([a-z][a-z_]{2,})\b")


def _quantities(text: str) -> dict[str, set[str]]:
    """What `text` counts, by unit: {"token": {"1500"}} for "max_tokens: 1500" and for "1500 tokens"."""
    out: dict[str, set[str]] = {}
    for found in QUANTITY.finditer(text):
        unit, number = (found.group(1), found.group(2)) if found.group(1) else (found.group(4), found.group(3))
        out.setdefault(unit.lower().rsplit("_", 1)[-1].rstrip("s"), set()).add(number.replace(",", ""))
    return out


def _overruled(candidate: Candidate, items: list[Event]) -> bool:
    """True when a later instruction of the person sets another figure for what the memory counts ("make it 5000
    tokens" after a proposed 1500 tokens): what was said before it no longer holds."""
    if _shown(candidate):
        return False
    mine = _quantities(candidate.body)
    for event in items:
        if event.kind == "human" and event.index > candidate.index and len(event.text) <= 300 and "?" not in event.text \
                and SETS.match(event.text):
            for unit, numbers in _quantities(event.text).items():
                if mine.get(unit) and not numbers & mine[unit]:
                    return True
    return False


SAME_SUBJECT = 0.45  # share of the smaller memory's words the other has: one subject, said again


def _shown(c: Candidate) -> bool:
    """A tag, or what the tools showed (a refused call, a recurring error, a command that failed and its fix)."""
    return c.layer == "self-report" or c.layer == "structural" and c.type == "gotcha" and not (c.key or c.tags)


def _latest_word(kept: list[Candidate]) -> list[Candidate]:
    """Of two memories from different messages on one subject, the later: a person's amendment, a revised proposal or
    the report of the work replaces what was proposed or guessed before. What the tools showed is never replaced,
    and a passing mention (a third shorter) after a fuller account is the one left out. A plan is what is still open,
    not an account of the work: neither replaces the other."""
    content = {id(c): {w for w in words(f"{c.title} {c.body}") if len(w) > 3} for c in kept}
    out: list[Candidate] = []
    for candidate in sorted(kept, key=lambda c: c.index):
        mine = content[id(candidate)]
        same = [c for c in out if c.record != candidate.record and "plan" not in (c.type, candidate.type) and len(
            mine & content[id(c)]) >= SAME_SUBJECT * min(len(mine), len(content[id(c)])) > 0]
        if _shown(candidate) or not any(_shown(c) or len(mine) < len(content[id(c)]) * 2 / 3 for c in same):
            out = [c for c in out if c not in same or _shown(c)] + [candidate]
    return sorted(out, key=kept.index)


# ---------------------------------------------------------------- guard, dedup, write


def _as_text(candidate: Candidate) -> None:
    """Drop control characters a tool printed (ANSI colours, a NUL): a memory holding one is refused."""
    candidate.title, candidate.body = strip_controls(candidate.title), strip_controls(candidate.body)
    candidate.tags = [strip_controls(tag) for tag in candidate.tags]
    candidate.files = [strip_controls(name) for name in candidate.files]


def _redact(candidate: Candidate, report: CaptureReport, max_chars: int) -> Candidate | None:
    """The candidate with its secrets redacted and its body capped; None when a secret is the point."""
    if scan_text(candidate.title):
        return None
    body, findings = redact(candidate.body)
    if not findings and len(body) <= max_chars:
        return candidate
    if findings:
        stem = candidate.title.rstrip("…").strip()
        for finding in findings:
            around = candidate.body.rfind("\n", 0, finding.start) + 1
            line_end = candidate.body.find("\n", finding.end)
            for line in candidate.body[around:len(candidate.body) if line_end < 0 else line_end].splitlines():
                if stem and line.strip() and (stem in line or line.strip() in stem):
                    return None  # the title was cut from the secret's own line: the secret is the point
        report.redacted += len(findings)
        if not re.sub(r"[\w.\-]*[ \t]*[:=]?[ \t]*[\"'`]?\[REDACTED:[^\]]*\][\"'`]?|[\W_]", "", body):
            return None  # nothing left but the secret (and its name): the secret was the point
    if len(body) > max_chars:
        body = _capped(body, max_chars).rstrip() + "\n[…]"
    candidate.body = body.rstrip("\n") + "\n"
    return candidate if not scan_text(candidate.body) else None


def _capped(text: str, limit: int) -> str:
    """At most `limit` characters, cut between tokens (the head of a cut key no longer looks like one)."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind("\n", 0, limit + 1), text.rfind(" ", 0, limit + 1))
    return text[:cut if cut > limit // 2 else limit]


def _max_message(store: Store) -> int:
    """`capture.max_message_chars`: what capture reads of one message, a body's longest (validated by the config)."""
    return int(store.config().get("capture.max_message_chars"))


JACCARD_DUPLICATE = 0.7
NEAREST_READ = 24  # memories closest in meaning whose words a candidate is compared with (bodies read)


class _Existing:
    """The active and proposed memories of the candidates' types in one store, as the duplicate check sees them."""

    def __init__(self, store: Store, index: Any, types: set[str]) -> None:
        self.store, self.index = store, index
        self.records = index.records()
        self.rels = [rel for rel, entry in self.records.items() if entry["type"] in types
                     and entry["status"] in ("active", "proposed")]  # a proposal seen again is not proposed twice
        self.keyed: dict[str, str] = {}  # source key -> path
        for rel in self.rels:
            if '"key"' in self.records[rel]["meta"]:
                key = (index.meta(rel).get("source") or {}).get("key")
                if key:
                    self.keyed[str(key)] = rel
        self.fresh: list[Memory] = []  # written or updated by this capture: compared in full
        self.changed: set[str] = set()  # paths this capture rewrote: their cached metadata is stale
        self._read: dict[str, Memory | None] = {}
        self._by_type: dict[str, tuple[list[str], Any, list[str]]] = {}

    def read(self, rel: str) -> Memory | None:
        """One memory: its metadata from the cache, its body from the file."""
        if rel not in self._read:
            from cortex.index.cache import read_body

            self._read[rel] = replace(self.index.memory(rel), body=read_body(self.store.memories_dir / rel))
        return self._read[rel]

    def keyed_memory(self, key: str) -> Memory | None:
        fresh = next((m for m in reversed(self.fresh) if m.source.get("key") == key), None)
        if fresh is not None:
            return fresh
        rel = self.keyed.get(key)
        return self.read(rel) if rel is not None and rel not in self.changed else None

    def add(self, made: Memory, replaces: Memory | None = None) -> None:
        if replaces is not None:
            self.fresh = [m for m in self.fresh if m.id != replaces.id]
            if replaces.path is not None:
                self.changed.add(replaces.path.relative_to(self.store.memories_dir).as_posix())
        self.fresh.append(made)

    def of_type(self, kind: str) -> tuple[list[str], Any, list[str]]:
        """(paths with a vector, their rows as one matrix or None, paths without a vector) for one type."""
        if kind not in self._by_type:
            records = self.records
            rels = [rel for rel in self.rels if records[rel]["type"] == kind]
            found = self.index.vector_matrix()
            if found is None:
                self._by_type[kind] = ([], None, rels)
            else:
                import numpy as np

                matrix, row_of = found
                with_rows = [rel for rel in rels if records[rel].get("vhash") in row_of]
                rows = [row_of[records[rel]["vhash"]] for rel in with_rows]
                without = [rel for rel in rels if records[rel].get("vhash") not in row_of]
                self._by_type[kind] = (with_rows, matrix[np.asarray(rows, dtype=np.int64)], without)
        return self._by_type[kind]


def _duplicate_of(existing: _Existing, candidate: Candidate, encoder: Any, cosine_duplicate: float) -> Memory | None:
    """The memory of the candidate's type it repeats: by word overlap, or by cosine among the nearest read."""
    mine = words(candidate.title + " " + candidate.body)

    def same_words(other: Memory) -> bool:
        theirs = words(other.title + " " + other.body)
        union = mine | theirs
        return mine == theirs or bool(union and len(mine & theirs) / len(union) >= JACCARD_DUPLICATE)

    for fresh in existing.fresh:
        if fresh.type == candidate.type and same_words(fresh):
            return fresh
    with_rows, matrix, without = existing.of_type(candidate.type)
    if matrix is not None and len(with_rows) and encoder is not None:
        import numpy as np

        from cortex.index.manifest import embed_text  # as the index embeds memories

        vector = np.asarray(encoder.encode_one(embed_text(Memory(id="", type=candidate.type, title=candidate.title,
                                                                 body=candidate.body))), dtype=np.float32)
        scores = matrix @ vector
        top = min(NEAREST_READ, len(with_rows))
        nearest = np.argpartition(-scores, top - 1)[:top]
        for row in sorted(nearest, key=lambda i: (-scores[i], with_rows[i])):
            rel = with_rows[row]
            if rel in existing.changed:
                continue
            if scores[row] >= cosine_duplicate:
                return existing.read(rel)
            other = existing.read(rel)
            if other is not None and same_words(other):
                return other
    elif matrix is not None:
        without = without + with_rows  # no encoder: every memory by its words
    for rel in without:
        if rel in existing.changed:
            continue
        other = existing.read(rel)
        if other is not None and same_words(other):
            return other
    return None


def write_candidates(store: Store, candidates: list[Candidate], session: str, commit: str | None = None,
                     report: CaptureReport | None = None, indexes: Any = None) -> list[str]:
    """Guard, dedup and write candidates (global-scope ones to the global store), queued for links; the ids."""
    from cortex.index import Indexes

    report = report or CaptureReport()
    if not candidates:
        return []
    indexes = indexes or Indexes()
    targets: dict[str, _Existing] = {}
    types = {c.type for c in candidates}

    def target(scope: str) -> _Existing:
        if scope not in targets:
            chosen = Store.locate(use_global=True) if scope == "global" else store
            targets[scope] = _Existing(chosen, indexes.synced(chosen), types)
        return targets[scope]

    encoder: list[Any] = []  # the query encoder, loaded when a candidate first needs it

    def encode() -> Any:
        if not encoder:
            index = indexes.synced(store)
            encoder.append(index.encoder() if index.vector_matrix() is not None else None)
        return encoder[0]

    cosine_duplicate = float(store.config().get("capture.dedup_cosine"))
    max_chars = _max_message(store)
    gated = store.config().get("capture.gate") != "off"
    for candidate in candidates:
        _as_text(candidate)
        guarded = _redact(candidate, report, max_chars)
        if guarded is None:
            continue
        existing = target(guarded.scope)
        if existing.store is not store:  # the global store: say which project it was learnt in
            guarded.project = guarded.project or project_name(store)
        try:
            made = _write_one(existing, guarded, session, commit, encode, cosine_duplicate, report,
                              gated and guarded.layer != "self-report")
        except SecretDetected as exc:  # the write guard refused what redaction let through: this one is lost, not the rest
            existing.store.log(f"capture: {exc}")
            continue
        if made is not None:
            existing.add(made)
            report.written.append(made.id)
            report.by_layer[guarded.layer] = report.by_layer.get(guarded.layer, 0) + 1
            report.paths.setdefault(str(existing.store.root), []).append(made.path)  # type: ignore[arg-type]
    if report.written:
        from cortex.graph import queue_links

        for existing in targets.values():  # links are made by `cortex maintain`, off the hook's clock
            queue_links(existing.store, [m.id for m in existing.fresh if m.id in set(report.written)])
    return list(report.written)


def _write_one(existing: _Existing, candidate: Candidate, session: str, commit: str | None, encode: Any,
               cosine_duplicate: float, report: CaptureReport, propose: bool = False) -> Memory | None:
    """Write one guarded candidate (`propose`: as a proposal), update its keyed memory, or refresh its duplicate."""
    store = existing.store
    current = existing.keyed_memory(candidate.key) if candidate.key else None
    if candidate.update_only and current is None:
        return None
    if current is not None:
        if current.body.strip() != candidate.body.strip() or current.title != candidate.title:
            updated = store.update(current.id, {"title": candidate.title, "files": candidate.files or current.files},
                                   body=candidate.body)
            existing.add(updated, replaces=current)
            report.updated.append(current.id)
            report.paths.setdefault(str(store.root), []).append(updated.path)  # type: ignore[arg-type]
        return None
    duplicate = _duplicate_of(existing, candidate, encode(), cosine_duplicate)
    if duplicate is not None:
        report.duplicates += 1
        _refresh(store, duplicate)
        return None
    from cortex.traces import repeated

    for trace in repeated(store, candidate.title, candidate.body):  # a person forgot it: theirs to bring back
        propose = True
        store.log(f"capture: {candidate.title[:80]!r} repeats a forgotten memory: {trace.said()}; written as a "
                  "proposal (`cortex inbox`)")
    source = {"kind": "transcript", "session": session, "layer": candidate.layer}
    source |= {k: v for k, v in (("commit", commit), ("key", candidate.key)) if v} | candidate.origin
    from cortex.graph import automatic_links

    return store.create(Memory(id="", type=candidate.type, title=candidate.title, body=candidate.body,
                               status="proposed" if propose else "active", confidence=candidate.confidence, priority=candidate.priority, tags=candidate.tags,
                               files=candidate.files, branch=candidate.branch, source=source,
                               links=automatic_links(candidate.links), project=candidate.project))


def project_name(store: Store) -> str:
    """The project's name in the global store: its worktree's folder (the folder holding `.cortex/` outside git)."""
    return (store.worktree or store.root.parent).name


def _refresh(store: Store, memory: Memory) -> None:
    """Seen again: move the memory's `updated` forward, once a day at most (git does not churn)."""
    if memory.updated and memory.updated[:10] >= (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).strftime("%Y-%m-%d"):
        return
    try:
        store.update(memory.id, {"updated": now_iso()}, touch=False)
        store.log(f"capture: {memory.id} seen again; updated refreshed")
    except Exception as exc:
        store.log(f"capture: could not refresh {memory.id}: {exc!r}")


def capture(store: Store, transcript: Path, session: str | None = None, last_message: str | None = None,
            from_start: bool = False, commit: str | None = None, indexes: Any = None,
            dry_run: bool = False) -> CaptureReport:
    """Capture what is new in `transcript` and advance its cursor, one capture of a transcript at a time
    (`dry_run`: the guarded candidates in `report.candidates`, nothing written)."""
    lock = store.state_dir / "locks" / f"capture-{_cursor_path(store, transcript).stem}.lock"
    with nullcontext() if dry_run else file_lock(lock, timeout=lock_wait()):
        return _capture(store, transcript, session, last_message, from_start, commit, indexes, dry_run)


def _capture(store: Store, transcript: Path, session: str | None, last_message: str | None, from_start: bool,
             commit: str | None, indexes: Any, dry_run: bool) -> CaptureReport:
    started = time.perf_counter()
    report = CaptureReport()
    records, report.skipped_lines, cursor = read_new_records(store, transcript, from_start)
    report.records = len(records)
    # Codex, Gemini and Cursor transcripts are read as Claude Code's records: the same layers run on all of them.
    records = normalise(records)
    items = events(records)
    max_chars = _max_message(store)
    for event in items:  # one huge reply (50 MB) must not cost the Stop hook minutes or become a huge memory
        if event.kind in ("text", "human") and len(event.text) > max_chars:
            event.text = _capped(event.text, max_chars)
    if last_message and len(last_message) > max_chars:
        last_message = _capped(last_message, max_chars)
    pending = cursor.pop("pending", None)
    if pending:  # the reply the last run took from the hook payload has reached the file since: already captured
        items = [e for e in items if not (e.kind == "text" and _digest(e.text) == pending)]
    if last_message and (_digest(last_message) == pending
                         or any(e.kind == "text" and last_message.strip() in e.text for e in items)):
        cursor["pending"] = _digest(last_message)  # captured: a Stop sending the same reply again skips it
    elif last_message:
        # The transcript on disk can lag the Stop hook: the reply from the payload, remembered against a second capture.
        items.append(Event("text", last_message))
        cursor["pending"] = _digest(last_message)
    session = session or next((str(r.get("sessionId")) for r in records if r.get("sessionId")), transcript.stem)
    found = worktree_root(str(store.root.parent))
    root = Path(found) if found is not None else None
    candidates = candidates_from(store, items, session, root)
    if dry_run:  # every candidate still goes through the guard: a dry run prints nothing a write would not keep
        report.candidates = [c for c in (_redact(c, report, max_chars) for c in candidates) if c is not None]
        return report
    from cortex import salience

    salience.judge_quietly(store, session, items)  # were the memories shown before this turn used in it?
    write_candidates(store, candidates, session, commit, report, indexes)
    from cortex import metrics

    metrics.record(store.state_dir, "capture", {"runs": 1, "records": report.records, "written": len(report.written),
                                                "updated": len(report.updated), "duplicates": report.duplicates},
                   {"ms": round((time.perf_counter() - started) * 1000, 1), "written": len(report.written)})
    from cortex import llm

    if items and llm.enabled(store):
        # Layer 4 runs detached: queue the slice and return; the worker retries until it succeeds.
        context = f"branch: {branch_and_head(found)[0]}\nHEAD: {commit or 'none'}"
        if enqueue(store, session, render_slice(items), context) is not None:
            spawn_worker(store)
    save_cursor(store, transcript, cursor)
    if report.skipped_lines:
        store.log(f"capture: {transcript}: skipped {report.skipped_lines} malformed lines")
    return report


def candidates_from(store: Store, items: list[Event], session: str, root: Path | None) -> list[Candidate]:
    """The candidates of the local layers `capture.layers` turns on."""
    wanted = {str(name).replace("-", "_") for name in (store.config().get("capture.layers") or ())}
    out: list[Candidate] = []
    if "self_report" in wanted:
        out += self_report(items)
    if "structural" in wanted:
        out += structural(items, session, root)
    if "keyword" in wanted:
        out += keyword(items)
    return precise(out, items, root)


# ---------------------------------------------------------------- the LLM layer's queue


def queue_dir(store: Store) -> Path:
    return store.state_dir / "queue"


def render_slice(items: list[Event]) -> str:
    """The newest session events as plain text for the model, each guarded before it is cut or folded."""
    lines: list[str] = []
    size = 0
    for event in reversed(items):  # newest first, and only as many as are kept: old turns are never scanned
        if event.kind == "human":
            lines.append(f"USER: {sendable(event.text)}")
        elif event.kind == "text":
            lines.append(f"ASSISTANT: {sendable(event.text)}")
        elif event.kind == "tool":
            detail = event.tool_input.get("command") or event.tool_input.get("file_path") or ""
            status = " (failed)" if event.failed else ""
            result = " ".join(sendable(event.result).split())[:300]
            lines.append(f"TOOL {event.tool} {sendable(str(detail))}{status}: {result}")
        else:
            continue
        size += len(lines[-1]) + 1
        if size > MAX_SLICE:
            break
    return "\n".join(reversed(lines))[-MAX_SLICE:]


def sendable(text: str) -> str:
    """Text as it may be sent to the LLM: `<private>…</private>` removed, and everything after a `<private>` that
    is never closed; then its secrets redacted."""
    text = PRIVATE.sub("", text)
    opened = text.lower().find("<private>")
    return redact(text if opened < 0 else text[:opened])[0]


def enqueue(store: Store, session: str, slice_text: str, context: str) -> Path | None:
    """Queue a job for `cortex worker` (none for an empty slice), guarded where it is written."""
    slice_text, context = sendable(slice_text), sendable(context)
    if not slice_text.strip():
        return None
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}-{session[:40]}.json"
    path = queue_dir(store) / name
    atomic_write(path, json.dumps({"session": session, "slice": slice_text, "context": context, "attempts": 0}))
    return path


def spawn_worker(store: Store) -> None:
    """Start `cortex worker` detached (its own session, output to state/worker.log); return at once."""
    from cortex.spawn import detached

    detached(["worker", "--dir", str(store.root)], str(store.state_dir), env={"CORTEX_NESTED": "0"})
