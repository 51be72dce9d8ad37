"""Codex, Gemini and Cursor transcripts read as Claude Code's records (each record's format told by its keys),
so capture runs the same layers on them. docs/assistants.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import IO, Any, Iterator

from cortex.text import without_injected

CODEX_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "world_state", "compacted",
               "token_usage_record"}
# What Codex adds to the conversation as user messages: context, not the person's words.
CODEX_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions for", "<hook_prompt",
                 "<turn_aborted>", "<skills_instructions>", "<user_shell_command>", "<permissions instructions>")
CODEX_SUMMARY_LEAD = "use the information in this summary to assist with your own analysis:"
HOOK_CONTEXT = re.compile(r"<hook_context>.*?</hook_context>\s*", re.S)
UNTRUSTED = re.compile(r"</?untrusted_context>")
USER_QUERY = re.compile(r"<user_query>\s*(.*?)\s*</user_query>", re.S)
TIMESTAMP = re.compile(r"^\s*<timestamp>.*?</timestamp>\s*", re.S)
PATCH_FILE = re.compile(r"(?m)^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$")
EXIT_CODE = re.compile(r"(?m)^Process exited with code (-?\d+)")


MAX_LINE_BYTES = 16 * 1024 * 1024  # a longer transcript line (a newline-free file, a huge paste) is skipped unread
MAX_DUMP_BYTES = 4 * MAX_LINE_BYTES  # a JSON-array dump is parsed whole: a bigger one is not read
CHUNK = 1024 * 1024


class Lines:
    """The complete lines of a transcript from byte `offset` on, a line over `limit` bytes skipped, never held.

    After iterating: `end` is where the next read starts, `skipping` whether that is inside an over-long line
    (pass it back in), `skipped` how many over-long lines were met.
    """

    def __init__(self, handle: IO[bytes], offset: int, skipping: bool = False, limit: int = MAX_LINE_BYTES) -> None:
        self.handle, self.end, self.skipping, self.limit = handle, offset, skipping, limit
        self.skipped = 0

    def __iter__(self) -> Iterator[bytes]:
        self.handle.seek(self.end)
        base = self.end  # the file offset of `chunk`
        part = bytearray()  # the line read so far, at most `limit` bytes
        skipping = self.skipping
        while chunk := self.handle.read(CHUNK):
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                if not skipping and len(part) + newline - start <= self.limit:
                    line = bytes(part) + chunk[start:newline]
                    part.clear()
                    self.end = base + newline + 1
                    yield line
                else:
                    if not skipping:  # counted once, when it is found too long
                        self.skipped += 1
                    skipping = False
                    part.clear()
                    self.end = base + newline + 1
                start = newline + 1
            if not skipping:
                part += chunk[start:]
                if len(part) > self.limit:
                    self.skipped += 1
                    skipping = True
                    part.clear()
            base += len(chunk)
        if skipping:  # the file ends inside an over-long line: never read it again
            self.end = base
        self.skipping = skipping


def kind_of(record: dict[str, Any]) -> str:
    """Which assistant wrote this record: "codex", "gemini", "cursor" or "claude"."""
    if "payload" in record and record.get("type") in CODEX_TYPES:
        return "codex"
    if "$set" in record or ("sessionId" in record and "projectHash" in record):
        return "gemini"
    if record.get("type") in ("user", "gemini", "info", "error", "warning") and "message" not in record \
            and "id" in record and "content" in record:
        return "gemini"
    if "role" in record and "message" in record and "type" not in record:
        return "cursor"
    if record.get("type") in ("turn_ended", "metadata") and "uuid" not in record:
        return "cursor"
    return "claude"


def strip_hook_context(text: str) -> str:
    """Text without Gemini CLI's `<hook_context>` blocks (cortex's own go first, whole)."""
    text = without_injected(text)
    return HOOK_CONTEXT.sub("", text).strip() if "<hook_context>" in text else text.strip()


def normalise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as Claude Code's: Codex, Gemini and Cursor records converted, Claude Code's unchanged."""
    kinds = [kind_of(r) for r in records]
    if all(k == "claude" for k in kinds):
        return records
    if "gemini" in kinds:
        records, kinds = _upserted(records, kinds)
    out: list[dict[str, Any]] = []
    state: dict[str, Any] = {}
    for record, kind in zip(records, kinds):
        if kind == "codex":
            out += _codex(record, state)
        elif kind == "gemini":
            out += _gemini(record, state)
        elif kind == "cursor":
            out += _cursor(record, state)
        else:
            out.append(record)
    summaries = {r["message"]["content"] for r in out if r.get("isCompactSummary") and "codex" in kinds}
    if summaries:  # Codex records the compaction call's answer as an assistant message too: the summary, once
        out = [r for r in out if not (r.get("type") == "assistant" and text_of(r["message"]["content"]) in summaries)]
    return out


# ---------------------------------------------------------------- shared


def _user(text: str, uuid: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"type": "user", "uuid": uuid, "sessionId": state.get("session"), "cwd": state.get("cwd"),
            "message": {"role": "user", "content": text}}


def _assistant(blocks: list[dict[str, Any]], uuid: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant", "uuid": uuid, "sessionId": state.get("session"), "cwd": state.get("cwd"),
            "message": {"id": uuid, "role": "assistant", "content": blocks}}


def _result(tool_id: str, text: str, failed: bool, state: dict[str, Any]) -> dict[str, Any]:
    return {"type": "user", "uuid": "", "sessionId": state.get("session"),
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": text,
                                                     "is_error": failed}]}}


def _shell(command: str, tool_id: str) -> list[dict[str, Any]]:
    """A shell command as Claude Code's Bash call, plus an Edit per file when it applies a Codex patch."""
    blocks = [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": command}}]
    if "*** Begin Patch" in command:
        blocks += _patch_edits(command, tool_id)
    return blocks


def _patch_edits(patch: str, tool_id: str) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": f"{tool_id}#{n}", "name": "Edit", "input": {"file_path": path}}
            for n, path in enumerate(dict.fromkeys(PATCH_FILE.findall(patch)), 1)]


def text_of(content: Any, kinds: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    """The text of a message's content: a string, or its text blocks (`kinds`) joined by lines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and (block.get("type") in kinds or ("text" in block and "type" not in block)):
            parts.append(str(block.get("text") or ""))
    return "\n".join(p for p in parts if p)


# ---------------------------------------------------------------- Codex CLI


def _codex(record: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    kind, payload = record.get("type"), record.get("payload")
    if not isinstance(payload, dict):
        return []
    if kind == "session_meta":
        state["session"] = payload.get("id") or payload.get("session_id")
        state["cwd"] = payload.get("cwd")
        return []
    if kind == "turn_context":
        state["cwd"] = payload.get("cwd") or state.get("cwd")
        return []
    if kind == "compacted":
        summary = str(payload.get("message") or "")
        summary = summary.split(CODEX_SUMMARY_LEAD, 1)[-1].strip()
        return [{"type": "user", "isCompactSummary": True, "uuid": "", "sessionId": state.get("session"),
                 "message": {"role": "user", "content": summary}}] if summary else []
    if kind != "response_item":
        return []  # event_msg repeats the response items; the rest is bookkeeping
    item = payload.get("type")
    uuid = str(payload.get("id") or "")
    if item == "message":
        role, text = payload.get("role"), text_of(payload.get("content")).strip()
        if role == "assistant" and text:
            return [_assistant([{"type": "text", "text": text}], uuid, state)]
        if role == "user" and text and not text.startswith(CODEX_CONTEXT):
            return [_user(text, uuid, state)]
        return []  # developer messages: instructions, permissions, hook context (cortex's own included)
    if item in ("function_call", "custom_tool_call"):
        return [_assistant(_codex_call(payload), uuid or str(payload.get("call_id") or ""), state)]
    if item in ("function_call_output", "custom_tool_call_output"):
        output = payload.get("output")
        text = text_of(output) if not isinstance(output, dict) else str(output.get("content") or output)
        code = EXIT_CODE.search(text)
        failed = bool(code and code.group(1) != "0")
        if isinstance(output, dict) and output.get("success") is False:
            failed = True
        return [_result(str(payload.get("call_id") or ""), text, failed, state)]
    return []


def _codex_call(payload: dict[str, Any]) -> list[dict[str, Any]]:
    name, tool_id = str(payload.get("name") or ""), str(payload.get("call_id") or "")
    raw = payload.get("arguments") if "arguments" in payload else payload.get("input")
    try:
        args = json.loads(raw) if isinstance(raw, str) and raw.strip().startswith("{") else raw
    except ValueError:
        args = raw
    if name == "apply_patch" and isinstance(args, str):
        return [{"type": "tool_use", "id": tool_id, "name": "apply_patch", "input": {"patch": args[:2000]}}] + \
            _patch_edits(args, tool_id)
    if not isinstance(args, dict):
        args = {"input": args}
    if name in ("exec_command", "shell", "local_shell", "shell_command"):
        command = args.get("cmd") if "cmd" in args else args.get("command")
        if isinstance(command, list):  # the older `shell` tool: an argv, usually ["bash", "-lc", "<script>"]
            command = command[-1] if len(command) >= 3 and command[1] in ("-lc", "-c") else " ".join(map(str, command))
        return _shell(str(command or ""), tool_id)
    namespace = payload.get("namespace")
    full = f"{namespace}__{name}" if namespace else name
    return [{"type": "tool_use", "id": tool_id, "name": full, "input": args}]


# ---------------------------------------------------------------- Gemini CLI


def _upserted(records: list[dict[str, Any]], kinds: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Gemini writes a message again, completed, under the same id: keep its last version at its first place."""
    latest: dict[str, int] = {}
    for n, (record, kind) in enumerate(zip(records, kinds)):
        if kind == "gemini" and isinstance(record.get("id"), str):
            latest[record["id"]] = n
    kept, kept_kinds, placed = [], [], set()
    for record, kind in zip(records, kinds):
        key = record.get("id") if kind == "gemini" else None
        if isinstance(key, str):
            if key in placed:
                continue
            placed.add(key)
            record = records[latest[key]]
        kept.append(record)
        kept_kinds.append(kind)
    return kept, kept_kinds


GEMINI_TOOLS = {"run_shell_command": "Bash", "write_file": "Write", "replace": "Edit"}


def _gemini(record: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    if "sessionId" in record and "projectHash" in record:
        state["session"] = record.get("sessionId")
        return []
    kind, uuid = record.get("type"), str(record.get("id") or "")
    content = record.get("content")
    if kind == "user":
        if isinstance(content, list) and any(isinstance(p, dict) and "functionResponse" in p for p in content):
            return []  # tool results: read from the model's record, where each call has its result
        text = strip_hook_context(text_of(content))
        if not text or text.startswith("<session_context>"):
            return []
        return [_user(text, uuid, state)]
    if kind != "gemini":
        return []  # info, warning and error lines are the CLI's own
    blocks: list[dict[str, Any]] = []
    text = text_of(content).strip()
    if text:
        blocks.append({"type": "text", "text": text})
    results = []
    for n, call in enumerate(record.get("toolCalls") or []):
        if not isinstance(call, dict):
            continue
        tool_id = str(call.get("id") or f"{uuid}#{n}")
        name, args = str(call.get("name") or ""), given if isinstance(given := call.get("args"), dict) else {}
        mapped = GEMINI_TOOLS.get(name, name)
        if mapped == "Bash":
            blocks += _shell(str(args.get("command") or ""), tool_id)
        else:
            given = dict(args)
            if mapped in ("Write", "Edit") and "file_path" not in given and given.get("path"):
                given["file_path"] = given["path"]
            blocks.append({"type": "tool_use", "id": tool_id, "name": mapped, "input": given})
        output = _gemini_output(call.get("result"))
        failed = call.get("status") in ("error", "cancelled") or bool(EXIT_CODE.search(output)
                                                                       and "exited with code 0" not in output)
        results.append(_result(tool_id, output, failed, state))
    if not blocks:
        return []
    return [_assistant(blocks, uuid, state)] + results


def _gemini_output(result: Any) -> str:
    parts = []
    for part in result if isinstance(result, list) else []:
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict):
            value = response.get("output", response.get("error", ""))
            parts.append(value if isinstance(value, str) else json.dumps(value))
    return UNTRUSTED.sub("", strip_hook_context("\n".join(parts))).strip()


# ---------------------------------------------------------------- Cursor


CURSOR_TOOLS = {"Shell": "Bash", "run_terminal_cmd": "Bash", "StrReplace": "Edit", "search_replace": "Edit",
                "edit_file": "Edit", "MultiEdit": "Edit", "Write": "Write", "write": "Write", "Delete": "Edit",
                "delete_file": "Edit"}


def _cursor(record: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    role, message = record.get("role"), record.get("message")
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    # Cursor's lines carry no id: one from the line itself keeps a request's memory keyed the same on a re-read.
    uuid = "cursor-" + hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    if role == "user":
        text = TIMESTAMP.sub("", text_of(content))
        query = USER_QUERY.search(text)
        text = (query.group(1) if query else text).strip()
        return [_user(text, uuid, state)] if text else []
    if role != "assistant":
        return []
    blocks: list[dict[str, Any]] = []
    for n, block in enumerate(content if isinstance(content, list) else [{"type": "text", "text": content}]):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and str(block.get("text") or "").strip():
            blocks.append({"type": "text", "text": str(block["text"])})
        elif block.get("type") == "tool_use":
            given = dict(given) if isinstance(given := block.get("input"), dict) else {}
            name = str(block.get("name") or "")
            tool_id = str(block.get("id") or f"{uuid}#{n}")
            mapped = CURSOR_TOOLS.get(name, name)
            if mapped == "Bash":
                blocks += _shell(str(given.get("command") or ""), tool_id)
                continue
            if mapped in ("Write", "Edit"):
                given.setdefault("file_path", given.get("path") or given.get("target_file") or "")
                if "contents" in given:
                    given.setdefault("content", given["contents"])
            blocks.append({"type": "tool_use", "id": tool_id, "name": mapped, "input": given})
    return [_assistant(blocks, uuid, state)] if blocks else []
