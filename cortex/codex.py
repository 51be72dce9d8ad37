"""Installing cortex into OpenAI Codex CLI: `.codex/hooks.json`, `.codex/config.toml` and AGENTS.md.

The MCP table is appended with a marker, the rest of config.toml left byte for byte (no TOML writer in the
standard library would keep the person's comments). Codex skips untrusted hooks silently: `install` says
so. docs/assistants.md.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from cortex.assistants import check_section, cut, hook_command, load_json, merge_hooks, object_at, prune, \
    remove_hooks, remove_section, save_or_remove, write_json, write_section
from cortex.errors import CortexError
from cortex.files import atomic_write

HOOKS = {"SessionStart": ("session-start", 30), "UserPromptSubmit": ("prompt", 30), "Stop": ("stop", 60),
         "PreCompact": ("pre-compact", 60), "SessionEnd": ("session-end", 3), "PreToolUse": ("pre-tool-use", 10)}
# PreToolUse on Codex's file edits (`apply_patch`, the files named in the patch): the memories bound to them.
MATCHERS = {"PreToolUse": "apply_patch|Edit|Write"}
MCP_MARK = "# cortex: memory MCP server (added by `cortex init --codex`; `cortex uninstall --codex` removes it)"
# startup_timeout_sec: `cortex mcp` loads the MCP SDK, slow on a busy machine; Codex's default wait is 10 s.
MCP_TABLE = '[mcp_servers.cortex]\ncommand = "cortex"\nargs = ["mcp"]\ndefault_tools_approval_mode = "approve"\n' \
    'startup_timeout_sec = 30\n'
TRUST_NOTE = ("note: Codex runs project hooks only in a trusted project, with the hooks trusted: start `codex` here, "
              "trust the project, and trust cortex's hooks in /hooks (until then Codex skips them silently)")


def _paths(project_root: Path) -> tuple[Path, Path, Path]:
    folder = project_root / ".codex"
    return folder / "hooks.json", folder / "config.toml", project_root / "AGENTS.md"


def _handler(event: str, timeout: int) -> dict[str, object]:
    return {"type": "command", "command": hook_command(event, ".codex/hooks.json"), "timeout": timeout}


def _config(path: Path) -> tuple[str, dict[str, object]]:
    if not path.exists():
        return "", {}
    text = path.read_text(encoding="utf-8")
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CortexError(f"{path}: not valid TOML ({exc}); fix it and run again") from None


def _our_table(text: str) -> re.Match[str] | None:
    """cortex's table with its marker, up to the next table or the end."""
    return re.search(rf"(?ms)^{re.escape(MCP_MARK)}\n\[mcp_servers\.cortex\]\n.*?(?=^\s*\[|\Z)", text)


def _install_mcp(path: Path) -> list[str]:
    text, data = _config(path)
    servers = data.get("mcp_servers")
    existing = servers.get("cortex") if isinstance(servers, dict) else None
    block = f"{MCP_MARK}\n{MCP_TABLE}"
    ours = _our_table(text)
    if ours is not None:
        if ours.group(0).rstrip("\n") == block.rstrip("\n"):
            return []
        atomic_write(path, text[:ours.start()] + block + "\n" + text[ours.end():].lstrip("\n"))
        return [f"updated the cortex MCP server in {path}"]
    if existing is not None:
        return [f"left the other 'cortex' MCP server in {path} as it is (cortex's MCP server not added)"]
    atomic_write(path, (text.rstrip("\n") + "\n\n" if text.strip() else "") + block)
    return [f"added the cortex MCP server to {path}"]


def _uninstall_mcp(path: Path) -> list[str]:
    text, _data = _config(path)
    ours = _our_table(text)
    return [] if ours is None else cut(path, text, ours.start(), ours.end(), "the cortex MCP server")


def _check(project_root: Path) -> None:
    hooks_path, config_path, agents = _paths(project_root)
    hooks = load_json(hooks_path).get("hooks", {})
    if not isinstance(hooks, dict):
        raise CortexError(f"{hooks_path}: hooks is not a JSON object; fix it and run again")
    _config(config_path)
    check_section(agents)


def install(project_root: Path) -> list[str]:
    """Merge cortex's hooks, MCP server and rules into the project's Codex CLI configuration; returns what changed."""
    hooks_path, config_path, agents = _paths(project_root)
    _check(project_root)  # a broken file stops the install before anything is written
    data = load_json(hooks_path)
    done = merge_hooks(hooks_path, object_at(hooks_path, data, "hooks"),
                       {event: _handler(name, timeout) for event, (name, timeout) in HOOKS.items()}, matchers=MATCHERS)
    if done:
        write_json(hooks_path, data)
    done += _install_mcp(config_path)
    done += write_section(agents)
    return (done or ["Codex CLI integration already installed"]) + [TRUST_NOTE]


def uninstall(project_root: Path) -> list[str]:
    hooks_path, config_path, agents = _paths(project_root)
    _check(project_root)
    data = load_json(hooks_path)
    done = save_or_remove(hooks_path, data, remove_hooks(hooks_path, data))
    done += _uninstall_mcp(config_path)
    done += remove_section(agents)
    prune(hooks_path.parent)
    return done or ["no Codex CLI integration was installed"]
