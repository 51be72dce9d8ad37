"""Installing cortex into Claude Code: hook entries in `.claude/settings.json` and the memory rules file.

Only cortex's own entries are added or removed, idempotently; the files are committed, so they name no path
of this machine (a clone without cortex skips with one line). docs/claude-code.md.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from cortex.errors import CortexError
from cortex.files import atomic_write

HOOK_EVENTS = {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "Stop": "stop", "PreCompact": "pre-compact",
               "SessionEnd": "session-end", "PreToolUse": "pre-tool-use", "SubagentStart": "subagent-start",
               "SubagentStop": "subagent-stop"}
# PreToolUse only for the tools that start a sub-agent (it records the task for the sub-agent's briefing) and
# those that change a file (the memories bound to it: `cortex.bypath`).
HOOK_MATCHERS = {"PreToolUse": "Task|Agent|Edit|Write|MultiEdit|NotebookEdit"}
MCP_NAME = "cortex"
RULES = """# cortex: project memory

This repository keeps its memory in `.cortex/` (markdown files, committed with
the code). cortex captures what each turn decided and learned when the turn
ends. Help it:

- When you make or learn something a teammate should know next week, say it
  in one tag in your reply, on its own line:

      [MEMORY: decision: We keep the cache in SQLite, not Postgres: no server to run]
      [MEMORY: gotcha priority=8 tags=ci: The CI image has SQLite 3.31, without DROP COLUMN]

  Types: architecture, decision, pattern, gotcha, context, progress, plan.
  Say why; name rejected alternatives. Never put secrets in a tag.
  What cortex captures without a tag is only proposed: it waits in
  `cortex inbox` for the user; accept or reject one only when they ask.
- Before deciding something that may already be decided, look:
  `cortex recall "your question"` (add `--json` for details),
  `cortex show <id>` for one memory, `.cortex/decisions.md` for all decisions
  (or the MCP tools `cortex_search`, `cortex_search_decisions`, `cortex_get_memory`).
- To correct memory: `cortex forget <id>` (archive) or
  `cortex forget <old> --replaced-by <new>`.
"""


_EVENT_NAMES = "|".join(HOOK_EVENTS.values())
# This version's command, whatever its message says; and the two shapes older versions wrote.
_PORTABLE = re.compile(rf"command -v cortex >/dev/null 2>&1 \|\| \{{ .* \}}; exec cortex hook ({_EVENT_NAMES})")
_OLDER = re.compile(rf'(?:cortex|"(?:[^"]*[/\\])?python[^"/\\]*" -m cortex) hook ({_EVENT_NAMES})')


def hook_command(event: str, config: str = ".claude/settings.json") -> str:
    """The hook's shell command (run with `sh -c`): `cortex hook EVENT` when cortex is on PATH, else one line on
    stderr naming the file `config` to edit, and exit 0. `exec` hands cortex the hook's stdin and its exit status."""
    missing = f"cortex: not installed; skipping the {event} hook (install cortex-git-memory, or remove the cortex " \
              f"hooks from {config})"
    return f"command -v cortex >/dev/null 2>&1 || {{ echo '{missing}' >&2; exit 0; }}; exec cortex hook {event}"


def _hook_event(handler: Any) -> str | None:
    """The cortex event a settings handler runs, when cortex wrote it (this version or an older one)."""
    if not isinstance(handler, dict):
        return None
    command = str(handler.get("command", ""))
    match = _PORTABLE.fullmatch(command) or _OLDER.fullmatch(command)
    return match.group(1) if match else None


def _mcp_server() -> dict[str, Any]:
    """`cortex mcp` from PATH; no `${CLAUDE_PROJECT_DIR}`: Claude Code passes it in the environment instead."""
    return {"type": "stdio", "command": "cortex", "args": ["mcp"]}


def is_our_server(entry: Any) -> bool:
    """What `_mcp_server` writes, or what older versions wrote: `cortex mcp`, or `<a python> -m cortex mcp`."""
    if not isinstance(entry, dict) or not isinstance(entry.get("args"), list):
        return False
    command, args = str(entry.get("command", "")), [str(a) for a in entry["args"]]
    name = command.rsplit("/", 1)[-1]
    return (name == "cortex" and args == ["mcp"]) or (name.startswith("python") and args == ["-m", "cortex", "mcp"])


def _install_mcp(project_root: Path) -> list[str]:
    path = project_root / ".mcp.json"
    data = load_json(path)
    done = merge_server(path, object_at(path, data, "mcpServers"), _mcp_server(), MCP_NAME)
    if done and not done[0].startswith("left"):
        write_json(path, data)
    return done


def _uninstall_mcp(project_root: Path) -> list[str]:
    path = project_root / ".mcp.json"
    data = load_json(path)
    return save_or_remove(path, data, remove_server(path, data, name=MCP_NAME))


def load_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as exc:
        raise CortexError(f"{path}: not valid JSON ({exc}); fix it and run again") from None
    if not isinstance(data, dict):
        raise CortexError(f"{path}: expected a JSON object")
    return data


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def object_at(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    """`data[key]`, created empty when missing; a value that is not an object is an error naming the file."""
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise CortexError(f"{path}: {key} is not a JSON object; fix it and run again")
    return value


def merge_server(path: Path, servers: dict[str, Any], entry: dict[str, Any], name: str = "cortex") -> list[str]:
    if name in servers:
        if servers[name] == entry:
            return []
        if not is_our_server(servers[name]):
            return [f"left the other {name!r} server in {path} as it is (cortex's MCP server not added)"]
        servers[name] = entry
        return [f"updated the {name} MCP server in {path}"]
    servers[name] = entry
    return [f"added the {name} MCP server to {path}"]


def remove_server(path: Path, data: dict[str, Any], key: str = "mcpServers", name: str = "cortex") -> list[str]:
    servers = data.get(key)
    if not isinstance(servers, dict) or not is_our_server(servers.get(name)):
        return []
    del servers[name]
    if not servers:
        del data[key]
    return [f"removed the {name} MCP server from {path}"]


def save_or_remove(path: Path, data: dict[str, Any], done: list[str]) -> list[str]:
    """After an uninstall: write what is left, or delete the file when cortex's entries were all it held."""
    if not done:
        return done
    if data:
        write_json(path, data)
    else:
        path.unlink()
        done.append(f"removed {path} (nothing else was in it)")
    return done


def _check_shapes(project_root: Path) -> None:
    """Refuse before anything is written when a file cortex merges into has a shape it cannot merge into."""
    for path, key in ((project_root / ".claude" / "settings.json", "hooks"),
                      (project_root / ".mcp.json", "mcpServers")):
        if not isinstance(load_json(path).get(key, {}), dict):
            raise CortexError(f"{path}: {key} is not a JSON object; fix it and run again")


def merge_hooks(path: Path, hooks: dict[str, Any], wanted: dict[str, dict[str, Any]], grouped: bool = True,
                matchers: dict[str, str] | None = None, named: bool = True) -> list[str]:
    """Make `hooks[event]` hold one cortex handler for each of `wanted`'s events, rewritten in place (the person's
    own keys kept), others kept; `grouped`: as `remove_hooks`, in the group with `matchers[event]` when it has one.
    What was done, naming `path` unless not `named` (Claude Code's own settings, named by the command)."""
    done = []
    for event, handler in wanted.items():
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise CortexError(f"{path}: hooks.{event} is not a list; fix it and run again")
        mine, matcher = _hook_event(handler), (matchers or {}).get(event)
        found, changed = False, False

        def merged(handlers: list[Any], group: dict[str, Any] | None = None, handler: Any = handler,
                   mine: str | None = mine, matcher: str | None = matcher) -> list[Any]:
            nonlocal found, changed
            kept = []
            for existing in handlers:
                if _hook_event(existing) != mine:
                    kept.append(existing)
                elif not found and (group is None or matcher is None or group.get("matcher") == matcher
                                    or len(handlers) == 1):
                    moved = group is not None and matcher is not None and group.get("matcher") != matcher
                    found, changed = True, existing | handler != existing or moved
                    kept.append(existing | handler)
                    if moved and group is not None:
                        group["matcher"] = matcher  # an older install's narrower one (PreToolUse: `Task|Agent`)
                else:
                    changed = True  # a second cortex handler for the event (it would run twice), or one moved
            return kept

        if grouped:
            emptied = []
            for group in entries:
                if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                    kept = merged(group["hooks"], group)
                    if group["hooks"] and not kept:
                        emptied.append(group)
                    group["hooks"] = kept
            hooks[event] = [g for g in entries if not any(g is e for e in emptied)]
            if not found:
                hooks[event].append(({"matcher": matcher} if matcher is not None else {}) | {"hooks": [handler]})
        else:
            kept = merged(entries)
            hooks[event] = kept if found else kept + [handler]
        if not found:
            done.append(f"added the {event} hook" + (f" to {path}" if named else ""))
        elif changed:
            done.append(f"updated the {event} hook" + (f" in {path}" if named else ""))
    return done


def install(project_root: Path) -> list[str]:
    """Merge cortex's hooks into .claude/settings.json and write the rules file; returns what changed."""
    settings_path = project_root / ".claude" / "settings.json"
    _check_shapes(project_root)  # a broken file stops the install before anything is written
    settings = load_json(settings_path)
    done = merge_hooks(settings_path, settings.setdefault("hooks", {}), {
        event: {"type": "command", "command": hook_command(name)} for event, name in HOOK_EVENTS.items()},
        matchers=HOOK_MATCHERS, named=False)
    if done:
        write_json(settings_path, settings)
    done += _install_mcp(project_root)
    rules = project_root / ".claude" / "rules" / "cortex-memory.md"
    if not rules.exists() or rules.read_text(encoding="utf-8") != RULES:
        atomic_write(rules, RULES)
        done.append(f"wrote {rules}")
    return (done or ["Claude Code integration already installed"]) + _path_note()


def _path_note() -> list[str]:
    """A warning when this machine's own sessions would not find `cortex` (e.g. run from a venv not activated)."""
    if shutil.which("cortex"):
        return []
    here = Path(sys.executable).parent
    fix = f"put {here} on PATH" if (here / "cortex").exists() else "install cortex where PATH finds it (pipx)"
    return [f"note: `cortex` is not on PATH, so Claude Code here will skip its hooks and not start its MCP server; "
            f"{fix}"]


def remove_hooks(path: Path | None, settings: dict[str, Any], grouped: bool = True) -> list[str]:
    """Take every cortex handler out of `settings["hooks"]` (in place); events, groups and a `hooks` left empty are
    removed. `grouped`: Claude Code's shape, `[{"matcher"?, "hooks": [handler, …]}]`; otherwise a flat list
    (Cursor). `path` is named in what is said (None: Claude Code's own settings, named by the command)."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return []
    done = []
    said = f" from {path}" if path is not None else ""
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept_entries = []
        for entry in entries:
            if grouped and isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
                kept = [h for h in entry["hooks"] if _hook_event(h) is None]
                if len(kept) != len(entry["hooks"]):
                    done.append(f"removed the {event} hook{said}")
                if kept:
                    kept_entries.append(entry | {"hooks": kept})
            elif not grouped and _hook_event(entry) is not None:
                done.append(f"removed the {event} hook{said}")
            else:
                kept_entries.append(entry)
        if kept_entries:
            hooks[event] = kept_entries
        else:
            del hooks[event]
    if not hooks:
        del settings["hooks"]
    return done


def uninstall(project_root: Path) -> list[str]:
    settings_path = project_root / ".claude" / "settings.json"
    _check_shapes(project_root)  # nothing removed from one file when the other cannot be read
    settings = load_json(settings_path)
    done = remove_hooks(None, settings)
    if done:
        write_json(settings_path, settings)
    done += _uninstall_mcp(project_root)
    rules = project_root / ".claude" / "rules" / "cortex-memory.md"
    if rules.exists():
        rules.unlink()
        done.append(f"removed {rules}")
    return done or ["no Claude Code integration was installed"]
