"""Installing cortex into Cursor's agent (the editor's Agent and the `cursor-agent` CLI): `.cursor/`.

Hooks, the MCP server and a rules file. `beforeSubmitPrompt` cannot add context, so there is no prompt-time
recall; payloads carry no `cwd` (the project is the first workspace root). Tested against published payloads
(tests/data/cursor/SOURCES.md). docs/assistants.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from cortex.assistants import hook_command, load_json, merge_hooks, merge_server, object_at, prune, \
    remove_hooks, remove_server, save_or_remove, write_json
from cortex.claude import RULES
from cortex.errors import CortexError
from cortex.files import atomic_write

HOOKS = {"sessionStart": "session-start", "stop": "stop", "preCompact": "pre-compact", "sessionEnd": "session-end"}
MCP_SERVER = {"command": "cortex", "args": ["mcp"], "env": {"CLAUDE_PROJECT_DIR": "${workspaceFolder}"}}
RULES_FILE = "cortex-memory.mdc"
RULES_MDC = "---\ndescription: cortex project memory (written by cortex init --cursor)\nalwaysApply: true\n---\n\n" + RULES


def _paths(project_root: Path) -> tuple[Path, Path, Path]:
    folder = project_root / ".cursor"
    return folder / "hooks.json", folder / "mcp.json", folder / "rules" / RULES_FILE


def _check(project_root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    hooks_path, mcp_path, _ = _paths(project_root)
    hooks, mcp = load_json(hooks_path), load_json(mcp_path)
    for path, data, key in ((hooks_path, hooks, "hooks"), (mcp_path, mcp, "mcpServers")):
        if not isinstance(data.get(key, {}), dict):
            raise CortexError(f"{path}: {key} is not a JSON object; fix it and run again")
    return hooks, mcp


def install(project_root: Path) -> list[str]:
    """Merge cortex's hooks, MCP server and rules into the project's `.cursor/`; returns what changed."""
    hooks_path, mcp_path, rules = _paths(project_root)
    hooks_data, mcp_data = _check(project_root)  # a broken file stops the install before anything is written
    hooks_data.setdefault("version", 1)
    done = merge_hooks(hooks_path, object_at(hooks_path, hooks_data, "hooks"),
                       {event: {"command": hook_command(name, ".cursor/hooks.json")} for event, name in HOOKS.items()},
                       grouped=False)
    if done:
        write_json(hooks_path, hooks_data)
    changed = merge_server(mcp_path, object_at(mcp_path, mcp_data, "mcpServers"), dict(MCP_SERVER))
    if changed and not changed[0].startswith("left"):
        write_json(mcp_path, mcp_data)
    done += changed
    if not rules.exists() or rules.read_text(encoding="utf-8") != RULES_MDC:
        atomic_write(rules, RULES_MDC)
        done.append(f"wrote {rules}")
    return done or ["Cursor integration already installed"]


def uninstall(project_root: Path) -> list[str]:
    hooks_path, mcp_path, rules = _paths(project_root)
    hooks_data, mcp_data = _check(project_root)
    removed = remove_hooks(hooks_path, hooks_data, grouped=False)
    if hooks_data == {"version": 1}:  # what install added beside the hooks
        hooks_data.clear()
    done = save_or_remove(hooks_path, hooks_data, removed)
    done += save_or_remove(mcp_path, mcp_data, remove_server(mcp_path, mcp_data))
    if rules.exists():
        rules.unlink()
        done.append(f"removed {rules}")
    prune(rules.parent, hooks_path.parent)
    return done or ["no Cursor integration was installed"]


def workspace_slug(path: str) -> str:
    """Cursor's folder name for a workspace under ~/.cursor/projects/: `/home/ana/app` → `home-ana-app`."""
    return re.sub(r"[^A-Za-z0-9]", "-", path.lstrip("/"))


def transcript_for(payload: dict[str, Any], home: Path | None = None) -> Path | None:
    """The agent transcript of a Cursor hook payload that names none (the CLI sends `transcript_path: null`)."""
    conversation = str(payload.get("conversation_id") or payload.get("session_id") or "")
    roots = payload.get("workspace_roots")
    if not conversation or not isinstance(roots, list) or not roots:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", conversation):
        return None  # never a path out of the transcripts folder
    base = (home or Path(os.path.expanduser("~"))) / ".cursor" / "projects" / workspace_slug(str(roots[0]))
    folder = base / "agent-transcripts"
    return next((path for path in (folder / f"{conversation}.jsonl", folder / conversation / f"{conversation}.jsonl")
                 if path.is_file()), None)
