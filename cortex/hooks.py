"""Hook entry points: what `cortex hook <event>` runs.

Git hooks never break the person's git command (errors go to the log) and never write a commit. pre-push
fails closed only for a secret in a pushed memory (and, with `git.pre_push: block`, stale pages). docs/git.md.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Callable

from cortex.errors import LockBusy
from cortex.hotpath import emit, event_name, note_injected, payload_cwd, payload_prompt
from cortex.store import STORE_DIRNAME, Store


def _as_hook() -> None:
    """A hook waits less for a lock than a command does: it gives up, logs, and the next event retries."""
    from cortex.files import HOOK_LOCK_WAIT, set_lock_wait

    set_lock_wait(HOOK_LOCK_WAIT)


def _store_here() -> Store | None:
    from cortex.gitops import find_worktree_root, scrubbed_git_env

    _as_hook()
    scrubbed_git_env()
    root = find_worktree_root(Path.cwd())
    if root is None or not (root / STORE_DIRNAME).is_dir():
        return None
    return Store(root / STORE_DIRNAME, "project")


def git_pre_push(args: list[str], stdin: str) -> int:
    from cortex import projections
    from cortex.gitops import open_repository, pushed_changes

    store = _store_here()
    try:
        if stdin.strip():
            # Only what this push adds to the remote's history under .cortex/ matters; most pushes add nothing there.
            if store is not None:
                repo = open_repository(store.root.parent)
                prefix = Path(store.root).resolve().relative_to(Path(repo.workdir).resolve()).as_posix()
            else:
                # A worktree without the store (`git worktree add` of a commit from before `.cortex/`) can still
                # push commits that add memories: the scan reads only git objects, at the default layout's place.
                repo = open_repository(Path.cwd())
                prefix = STORE_DIRNAME
            changes = pushed_changes(repo, stdin, prefix, args[0] if args else "")
            if not changes:
                return 0
            from cortex.guard import scan_bytes

            found = [(change, finding) for change in changes
                     for finding in scan_bytes(change.data)]  # UTF-16/32 too: what PowerShell's `>` writes
            if found:
                for change, finding in found:
                    print(f"cortex: possible secret in {change.path}:{finding.line} ({finding.kind}), "
                          f"added in commit {change.commit[:12]}", file=sys.stderr)
                print("cortex: push stopped: those commits would put the secret in the remote's history, and deleting "
                      "the file in a later commit does not take it out; remove it from history (e.g. `git rebase -i "
                      "<commit>^` and edit or drop each commit named above), then push again", file=sys.stderr)
                return 1
        if store is None:
            return 0  # no store in this worktree: no memories on disk to render projections from
        from cortex.index import Index

        index = Index(store).ensure()
        if projections.known_current(store, index):
            return 0
        pages = projections.build(store, index=index)
        stale = [page for page in pages if not page.is_current()]
        if not stale:
            projections.write(store, pages, index)  # records the stamp: the next push skips rendering
            return 0
        names = ", ".join(page.name for page in stale)
        if str(store.config().get("git.pre_push")) in ("block", "check"):
            print(f"cortex: push stopped: {names} out of date (git.pre_push: block); run `cortex project`, commit, "
                  "and push again", file=sys.stderr)
            return 1
        print(f"cortex: {names} out of date; `cortex project` regenerates it, for your next commit", file=sys.stderr)
        return 0
    except Exception as exc:  # never block a push on cortex's own failure
        if store is None:
            print(f"cortex: pre-push check skipped ({exc})", file=sys.stderr)
            return 0
        store.log(f"git pre-push: {exc!r}")
        print(f"cortex: pre-push check skipped ({exc}); see .cortex/state/cortex.log", file=sys.stderr)
        return 0


def git_refresh(event: str, args: list[str]) -> int:
    """post-merge, post-rewrite: sync the cache and name a tracked page the union merge left stale; write no
    tracked file (it would stop the next checkout, pull or rebase). Always 0."""
    rebased = event == "post-rewrite" and bool(args) and args[0] == "rebase"  # not `commit --amend`
    store = _store_here()
    if store is None:
        return 0
    try:
        from cortex.index import Index

        index = Index(store)
        index.sync(full=True, progress=False)
        if event == "post-merge" or rebased:
            _name_stale_pages(store, index, "merge" if event == "post-merge" else "rebase")
        from cortex.spawn import briefing_ahead

        briefing_ahead(str(store.root))  # another branch or new memories: the next session start's briefing
    except Exception as exc:
        store.log(f"git {event}: {exc!r}")
    return 0


def _name_stale_pages(store: Store, index: Any, after: str) -> None:
    from cortex import projections
    from cortex.gitops import open_repository

    repo = open_repository(store.root.parent)
    if repo.head_is_unborn or repo.head_is_detached:
        return
    workdir = Path(repo.workdir)
    tree = repo.head.peel().tree
    stale = []
    for page in projections.build(store, index=index):
        try:
            tree[page.path.relative_to(workdir).as_posix()]
        except KeyError:
            continue  # never committed: nothing merged it
        if not page.is_current():
            stale.append(page.name)
    if stale:
        print(f"cortex: {', '.join(stale)} is not its regeneration after the {after}; "
              "`cortex project` rewrites it, for your next commit", file=sys.stderr)


# ---------------------------------------------------------------- Claude Code hooks


def _claude_hook(name: str, raw: str, body: Callable[[Store, dict[str, Any]], None]) -> int:
    """What every assistant hook shares: the payload, the store at its `cwd`, exit 0 whatever happens."""
    from cortex.spawn import nested

    if nested():
        return 0
    _as_hook()
    store = None
    try:
        payload = json.loads(raw) if raw.strip() else {}
        if not isinstance(payload, dict):
            raise ValueError("hook input is not a JSON object")
        store = _store_at(Path(payload_cwd(payload)))
        if store is not None:
            body(store, payload)
    except LockBusy as exc:  # a writer holds on for long (`cortex maintain`): what is left waits for the next event
        if store is not None:
            store.log(f"{name}: gave up waiting: {exc}")
    except Exception as exc:  # the person's session must never break because of cortex
        if store is not None:
            store.log(f"{name}: {exc!r}")
        else:
            with contextlib.suppress(Exception):
                Store.locate(Path.cwd()).log(f"{name}: {exc!r}")
    return 0


def claude_stop(raw: str) -> int:
    """Stop (and PreCompact): capture what is new in the transcript. Never blocks; prints nothing; exit 0."""

    def body(store: Store, payload: dict[str, Any]) -> None:
        from cortex import events
        from cortex.capture import capture
        from cortex.gitops import head_commit
        from cortex.index import Indexes

        transcript = _transcript(payload)
        if transcript is None:
            store.log(f"stop: no transcript at {payload.get('transcript_path')!r}")
            return
        indexes = Indexes()
        # Claude Code and Codex name the last reply last_assistant_message; Gemini's AfterAgent prompt_response.
        last = payload.get("last_assistant_message") or payload.get("prompt_response")
        report = capture(store, transcript, session=payload.get("session_id") or payload.get("conversation_id"),
                         last_message=str(last) if last else None, commit=head_commit(store.worktree),
                         indexes=indexes)
        # Projections, AGENTS.md, staging; links, daily gc and consolidation detached (project and global).
        events.capture_done(store, report, indexes, stage=True, upkeep="detached")
        store.log(f"stop: {report.records} records, wrote {len(report.written)}, updated {len(report.updated)}, "
                  f"duplicates {report.duplicates}, redacted {report.redacted}")

    return _claude_hook("stop", raw, body)


def _transcript(payload: dict[str, Any]) -> Path | None:
    """The transcript a hook payload names (Cursor's CLI sends none: it is found by conversation id)."""
    given = payload.get("transcript_path")
    if given and Path(str(given)).is_file():
        return Path(str(given))
    if not given and payload.get("conversation_id"):
        from cortex import cursor

        return cursor.transcript_for(payload)
    return None


def _store_at(cwd: Path) -> Store | None:
    from cortex.errors import NotInitialised
    from cortex.gitops import scrubbed_git_env

    scrubbed_git_env()
    try:
        store = Store.locate(cwd)
    except NotInitialised:
        return None
    return store if store.label == "project" else None


def claude_session_start(raw: str) -> int:
    """SessionStart (startup, resume, clear, compact): print the briefing as additionalContext; retry queued jobs."""

    def body(store: Store, payload: dict[str, Any]) -> None:
        from cortex import briefing
        from cortex.layout import queued_jobs
        from cortex.spawn import start_server

        shown = briefing.get(store)
        if payload.get("session_id"):  # the briefing is as the store is now: nothing for a prompt to catch up on
            from cortex.layout import catch_up_file

            Path(catch_up_file(str(store.root), str(payload["session_id"]))).unlink(missing_ok=True)
        emit(event_name(payload, "SessionStart"), shown.text)
        note_injected(str(store.root), payload, "SessionStart", "", shown.ids)
        if queued_jobs(str(store.root)):
            from cortex.capture import spawn_worker

            spawn_worker(store)
        start_server(str(store.root))  # prompt-time recall from a warm process

    return _claude_hook("session-start", raw, body)


def claude_prompt(raw: str) -> int:
    """UserPromptSubmit without a resident `cortex serve` (the fast path asks it first): recall in this process."""

    def body(store: Store, payload: dict[str, Any]) -> None:
        from cortex.events import prompt_context, take_catch_up
        from cortex.index import Indexes

        prompt = payload_prompt(payload)
        if prompt and not prompt.startswith("/"):
            catch_up = take_catch_up(store, str(payload.get("session_id") or ""))  # once, whatever is answered
            text = prompt_context(store, prompt, Indexes(), catch_up)
            if text:
                emit(event_name(payload, "UserPromptSubmit"), text)
                note_injected(str(store.root), payload, "UserPromptSubmit", text)

    return _claude_hook("prompt", raw, body)


def claude_pre_tool_use(raw: str) -> int:
    """PreToolUse that no server answered: a sub-agent's task recorded, or the memories bound to the files an
    edit changes looked up in this process (`cortex.hotpath.edit`)."""

    def body(store: Store, payload: dict[str, Any]) -> None:
        from cortex.hotpath import edit, pre_tool_use

        if payload.get("tool_name") in ("Task", "Agent"):
            pre_tool_use(raw)
        else:
            edit(payload, store)

    return _claude_hook("pre-tool-use", raw, body)


def claude_session_end(raw: str) -> int:
    """SessionEnd (1.5 s budget): hand the last capture of the transcript to a detached process and return."""

    def body(store: Store, payload: dict[str, Any]) -> None:
        from cortex.spawn import detached

        transcript = _transcript(payload)
        if transcript is None:
            return
        detached(["hook", "stop"], str(store.state_dir), cwd=str(store.root.parent),
                 stdin=json.dumps(payload | {"transcript_path": str(transcript)}).encode())

    return _claude_hook("session-end", raw, body)


def claude_subagent_start(raw: str) -> int:
    """SubagentStart: a briefing scoped to the sub-agent's task and the files it names (`cortex.subagents`)."""

    def body(store: Store, payload: dict[str, Any]) -> None:
        from cortex import subagents

        session, agent = str(payload.get("session_id") or ""), str(payload.get("agent_id") or "")
        kind = str(payload.get("agent_type") or "")
        task = subagents.claim_task(store, session, agent, kind) if session else None
        scoped = subagents.briefing_for(store, task, agent_type=kind)
        emit("SubagentStart", scoped.text)
        note_injected(str(store.root), payload, "SubagentStart", "", scoped.ids)

    return _claude_hook("subagent-start", raw, body)


def claude_subagent_stop(raw: str) -> int:
    """SubagentStop: judge whether the sub-agent used the memories it was shown, from its own transcript."""

    def body(store: Store, payload: dict[str, Any]) -> None:
        from cortex import salience
        from cortex.capture import Event, events, read_new_records

        session, agent = str(payload.get("session_id") or ""), str(payload.get("agent_id") or "")
        path = payload.get("agent_transcript_path")
        items: list[Any] = []
        if path and Path(str(path)).is_file():
            records, _skipped, _cursor = read_new_records(store, Path(str(path)), from_start=True)
            items = events(records)
        last = payload.get("last_assistant_message")
        if isinstance(last, str) and last.strip():
            items.append(Event("text", last, sidechain=True))
        from cortex.subagents import task_of

        task = task_of(store, session, agent) if session and agent else None
        if task:  # what the sub-agent was asked proves nothing about what it was shown
            items.insert(0, Event("human", f"{task.get('description', '')}\n{task.get('prompt', '')}"))
        verdict = salience.judge_quietly(store, session, items, agent=agent or None)
        if verdict.used or verdict.ignored:
            store.log(f"subagent-stop: {agent}: used {sorted(verdict.used)}, ignored {sorted(verdict.ignored)}")
        _capture_subagent_tags(store, session, agent, str(payload.get("agent_type") or ""), items)

    return _claude_hook("subagent-stop", raw, body)


def _capture_subagent_tags(store: Store, session: str, agent: str, kind: str, items: list[Any]) -> None:
    """Save the `[MEMORY: …]` tags of a sub-agent's own transcript, which the parent's Stop never reads."""
    from cortex import events
    from cortex.capture import CaptureReport, self_report, write_candidates
    from cortex.gitops import head_commit
    from cortex.index import Indexes

    tagged = list(self_report(items))
    if not tagged:
        return
    for candidate in tagged:
        candidate.origin = {"agent": agent or None, "agent_type": kind or "general-purpose"}
    report, indexes = CaptureReport(), Indexes()
    write_candidates(store, tagged, session or "subagent", head_commit(store.worktree), report, indexes)
    events.capture_done(store, report, indexes, stage=True, upkeep="detached")
    store.log(f"subagent-stop: {agent}: wrote {len(report.written)} tagged memories")
