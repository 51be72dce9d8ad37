"""Installing cortex into Google Gemini CLI: `.gemini/settings.json` and GEMINI.md.

Hooks (PreCompress left alone: it fires before every model call and AfterAgent misses nothing), the MCP
server, and the rules in a marked section of GEMINI.md; every other setting kept. docs/assistants.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cortex.assistants import check_section, hook_command, load_json, merge_hooks, merge_server, object_at, \
    prune, remove_hooks, remove_section, remove_server, save_or_remove, write_json, write_section
from cortex.errors import CortexError

HOOKS = {"SessionStart": ("session-start", 30000), "BeforeAgent": ("prompt", 30000), "AfterAgent": ("stop", 60000),
         "SessionEnd": ("session-end", 5000), "AfterTool": ("pre-tool-use", 10000)}
# BeforeTool cannot add context: the memories bound to a file come with the result of its first edit (AfterTool).
MATCHERS = {"AfterTool": "^(replace|write_file)$"}
MCP_SERVER = {"command": "cortex", "args": ["mcp"]}
TRUST_NOTE = "note: Gemini CLI reads a project's .gemini/settings.json only in a trusted folder (it asks once)"


def _paths(project_root: Path) -> tuple[Path, Path]:
    return project_root / ".gemini" / "settings.json", project_root / "GEMINI.md"


def _handler(event: str, timeout: int) -> dict[str, object]:
    return {"type": "command", "name": f"cortex-{event}", "command": hook_command(event, ".gemini/settings.json"),
            "timeout": timeout}


def _check(path: Path, context: Path) -> dict[str, Any]:
    data = load_json(path)
    for key in ("hooks", "mcpServers"):
        if not isinstance(data.get(key, {}), dict):
            raise CortexError(f"{path}: {key} is not a JSON object; fix it and run again")
    check_section(context)
    return data


def install(project_root: Path) -> list[str]:
    """Merge cortex's hooks, MCP server and rules into the project's Gemini CLI configuration; returns what changed."""
    settings_path, context = _paths(project_root)
    data = _check(settings_path, context)  # a broken file stops the install before anything is written
    done = merge_hooks(settings_path, object_at(settings_path, data, "hooks"),
                       {event: _handler(name, timeout) for event, (name, timeout) in HOOKS.items()}, matchers=MATCHERS)
    done += merge_server(settings_path, object_at(settings_path, data, "mcpServers"), dict(MCP_SERVER))
    if done:
        write_json(settings_path, data)
    done += write_section(context)
    return (done or ["Gemini CLI integration already installed"]) + [TRUST_NOTE]


def uninstall(project_root: Path) -> list[str]:
    settings_path, context = _paths(project_root)
    data = _check(settings_path, context)
    done = remove_hooks(settings_path, data)
    done += remove_server(settings_path, data)
    done = save_or_remove(settings_path, data, done)
    done += remove_section(context)
    prune(settings_path.parent)
    return done or ["no Gemini CLI integration was installed"]
