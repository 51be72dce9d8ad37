"""The memory record and its file format (DESIGN.md §2; reading and writing: docs/store.md).

A small fast reader takes the YAML subset cortex writes and hands anything else to ruamel.yaml, the authority;
any text raises `MalformedMemory` and nothing else."""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import os
import re
import unicodedata
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cortex.errors import MalformedMemory

TYPES = ("architecture", "decision", "pattern", "gotcha", "context", "progress", "plan", "code_description", "code")
CAPTURE_TYPES = TYPES[:7]  # what capture and the LLM may write: code memories come from `cortex index-code` only
STATUSES = ("active", "superseded", "archived", "proposed")  # proposed: captured, waiting in `cortex inbox`
SCOPES = ("project", "global")
# "because" is a person's: this memory's reason (a decision's rationale, an open problem's answer) is the other
RELATIONS = ("relates_to", "derived_from", "contradicts", "exemplifies", "refines", "supersedes", "source_of", "because")
# Key order of a file cortex writes; unknown keys a person adds are kept.
KEYS = ("id", "type", "title", "summary", "status", "confidence", "priority", "pinned", "scope", "project", "branch",
        "tags", "files", "created", "updated", "source", "links")
ID_RE = re.compile(r"^[0-9a-f]{12}$")
TITLE_MAX = 200
SUMMARY_MAX = 160  # characters of the one-line `summary` cortex fills in


@dataclass
class Link:
    rel: str
    to: str
    strength: float | None = None
    created: str | None = None  # when the link was made (older files have none)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rel": self.rel, "to": self.to}
        if self.strength is not None:
            out["strength"] = self.strength
        if self.created:
            out["created"] = self.created
        return out


def link_problems(memory_id: str, links: list[Link]) -> tuple[list[Link], list[str]]:
    """The links worth keeping and why the others were left out: a repeated link would count twice in centrality."""
    kept: list[Link] = []
    seen: set[tuple[str, str]] = set()
    dropped: list[str] = []
    for link in links:
        if link.to == memory_id:
            dropped.append(f"a {link.rel} link to itself ({memory_id})")
        elif (link.rel, link.to) in seen:
            dropped.append(f"a duplicate {link.rel} link to {link.to}")
        else:
            seen.add((link.rel, link.to))
            kept.append(link)
    return kept, dropped


@dataclass
class Memory:
    """One memory, as read from (or about to be written to) its file."""

    id: str
    type: str
    title: str
    body: str = ""
    summary: str = ""  # one line for short renderings and the briefing; older files have none
    status: str = "active"
    confidence: float = 0.8
    priority: int = 5
    pinned: bool = False
    scope: str = "project"
    project: str | None = None  # the project a global memory was captured in
    branch: str | None = None
    tags: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    created: str = ""
    updated: str = ""
    source: dict[str, Any] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # keys cortex does not know, kept as read
    path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what `--json` prints)."""
        from copy import deepcopy

        # Not `dataclasses.asdict`: only the free-form `source` and `extra` nest, so only they are copied deeply.
        out = {name: getattr(self, name) for name in _FIELD_NAMES}
        out["tags"], out["files"] = list(self.tags), list(self.files)
        out["source"], out["extra"] = deepcopy(self.source), deepcopy(self.extra)
        out["links"] = [link.as_dict() for link in self.links]
        out["path"] = str(self.path) if self.path is not None else None
        if not self.extra:
            del out["extra"]
        return out

    def one_line(self) -> str:
        """The summary, or for a memory without one the start of its body (what short renderings show)."""
        return self.summary or summary_from(self.body, self.title)


_FIELD_NAMES = tuple(f.name for f in fields(Memory))


def new_id() -> str:
    """12 random hex characters, unique across clones; never one YAML would read as a number."""
    import secrets  # lazily: a hook that writes nothing never needs it

    while True:
        candidate = secrets.token_hex(6)
        if not _YAML_NUMBER.match(candidate):
            return candidate


def now_epoch() -> float:
    """Now in epoch seconds; `$CORTEX_NOW` fixes it (decay, lifecycle and new timestamps all follow it)."""
    fixed = os.environ.get("CORTEX_NOW", "").strip()
    if not fixed:
        import time

        return time.time()
    try:
        return float(fixed)
    except ValueError:
        return epoch(iso_timestamp(fixed))


@functools.lru_cache(maxsize=100_000)  # a briefing reads thousands of stamps
def epoch(stamp: str) -> float:
    """Epoch seconds of a stamp as written in files (`2026-11-21T20:50:00Z`); 0 for an empty one."""
    if not stamp:
        return 0.0
    return _dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc).timestamp()


def iso(moment: float) -> str:
    """Epoch seconds as written in files."""
    return _dt.datetime.fromtimestamp(moment, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_iso() -> str:
    """Now, as written in files; `$CORTEX_NOW` (epoch seconds or an ISO timestamp) fixes the clock."""
    return iso(now_epoch())


def slugify(title: str, max_len: int = 48) -> str:
    """A short readable file-name slug: ascii, lowercase, words joined by '-'."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_title.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_len:
            break
        slug = candidate
    return slug or (words[0][:max_len] if words else "memory")


def file_name(memory: Memory) -> str:
    """`<slug of the title>-<id>.md`; a secret in the title is named, never spelled (names are shown and pushed)."""
    from cortex.guard import redacted

    return f"{slugify(redacted(memory.title))}-{memory.id}.md"


def title_from_text(text: str, limit: int = 80) -> str:
    """The first line or sentence of `text`, cut at a word near `limit` chars."""
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    first = re.sub(r"\*\*|__|^#+\s*", "", first).strip()  # markdown emphasis and heading marks are not words
    sentence = re.split(r"(?<!\b\d\.)(?<=[.!?])\s", first, maxsplit=1)[0].rstrip()
    if len(sentence) <= limit:
        return sentence.rstrip(".")
    cut = sentence[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"


def summary_from(body: str, title: str = "", limit: int = SUMMARY_MAX) -> str:
    """One line saying what `body` holds: its first sentences, less a first one that only repeats the title,
    folded to one line and cut at a word near `limit` characters; "" for an empty body."""
    text = " ".join(re.sub(r"\*\*|__|^#+\s*|^[-*]\s+", "", line).strip() for line in body.strip().splitlines())
    text = " ".join(text.split())
    if not text:
        return ""
    head = title_from_text(text, 10 * limit).rstrip("…")
    if title and head.casefold().rstrip(".") == title.casefold().rstrip(".") and len(text) > len(head) + 2:
        text = text[len(head):].lstrip(" .!?:;")  # the body opens with the title: the summary says what follows
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"


_CANONICAL_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")


def iso_timestamp(value: Any) -> str:
    """Normalise a YAML timestamp (datetime, date or ISO string) to `YYYY-MM-DDTHH:MM:SSZ`."""
    if isinstance(value, str) and _CANONICAL_STAMP.match(value):
        try:  # the pattern lets 2026-02-30 through; later readers (decay, epoch) would fail on it
            _dt.datetime.fromisoformat(value[:-1])
        except ValueError:
            raise ValueError(f"not a timestamp: {value!r}") from None
        return value
    if isinstance(value, _dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
    elif isinstance(value, _dt.date):
        moment = _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.timezone.utc)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "T", 1) if len(value.strip()) > 10 else value.strip()
        text = re.sub(r"[Zz]$", "+00:00", text)
        text = re.sub(r"T?([+-]\d\d)$", r"\1:00", text) if re.search(r"\d[+-]\d\d$", text) else text
        try:
            parsed = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not a timestamp: {value!r}") from None
        moment = parsed if parsed.tzinfo else parsed.replace(tzinfo=_dt.timezone.utc)
    else:
        raise ValueError(f"not a timestamp: {value!r}")
    return moment.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_front_matter(text: str, path: Path | None = None) -> tuple[str, str]:
    """Return (front matter YAML, body); the delimiter lines are not included."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if not (text.startswith("---\n") or text.startswith("---\r\n")):
        raise MalformedMemory(path, "no front matter (the file must start with a '---' line)")
    start = text.index("\n") + 1
    pos = start
    while True:
        end = text.find("\n", pos)
        line = text[pos:] if end == -1 else text[pos:end]
        if line.rstrip("\r") in ("---", "..."):
            body = "" if end == -1 else text[end + 1 :]
            return text[start:pos], body
        if end == -1:
            raise MalformedMemory(path, "front matter is not closed (no second '---' line)")
        pos = end + 1


class _NotSimple(Exception):
    """The front matter needs the full YAML parser."""


_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?: +(.*))?$")
# What YAML 1.2 (ruamel's resolver) would read as a number or timestamp; the fast
# reader converts only the plainest of these itself and leaves the rest to ruamel.
_YAML_NUMBER = re.compile(
    r"[-+]?0b[0-1_]+$|[-+]?0o?[0-7_]+$|[-+]?[0-9_]+$|[-+]?0x[0-9a-fA-F_]+$"
    r"|[-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+]?[0-9]+)?$|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"
    r"|[-+]?\.[0-9_]+([eE][-+][0-9]+)?$|[-+]?\.(inf|Inf|INF)$|\.(nan|NaN|NAN)$"
)
_INT = re.compile(r"-?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"-?(0|[1-9][0-9]*)\.[0-9]+$")
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}$"
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(\.[0-9]*)?([ \t]*(Z|[-+][0-9]{1,2}(:[0-9]{2})?))?$"
)
_PLAIN_BAD_START = set("-?:,[]{}#&*!|>'\"%@`")
# The words YAML reads as null, true or false.
_WORDS = {word: value for words, value in (("null Null NULL ~", None), ("true True TRUE", True),
                                           ("false False FALSE", False)) for word in words.split()} | {"": None}


# Plain text that YAML can only read as a string: the common case, checked first.
_OBVIOUS_TEXT = re.compile(r"[A-Za-z_/][^:#'\"\[\]{},\t]*$")


def _plain(token: str, in_flow: bool) -> Any:
    if token in _WORDS:
        return _WORDS[token]
    if _OBVIOUS_TEXT.match(token):
        return token
    first = token[0]
    if first in _PLAIN_BAD_START or ": " in token or " #" in token or token.endswith(":"):
        raise _NotSimple
    if "\t" in token or (in_flow and any(c in token for c in ",[]{}")):
        raise _NotSimple
    if _YAML_NUMBER.match(token):
        if _INT.match(token):
            return int(token)
        if _FLOAT.match(token):
            return float(token)
        raise _NotSimple  # a rarer number form: ruamel decides
    if _TIMESTAMP.match(token):
        return iso_timestamp(token)
    if token in ("=", "<<"):
        raise _NotSimple
    return token


def _scalar(token: str, in_flow: bool = False) -> Any:
    token = token.strip()
    if not token:
        return None
    if token[0] == "'":
        if len(token) < 2 or token[-1] != "'":
            raise _NotSimple
        inner = token[1:-1]
        if "'" in inner.replace("''", ""):
            raise _NotSimple
        return inner.replace("''", "'")
    if token[0] == '"':
        if len(token) < 2 or token[-1] != '"':
            raise _NotSimple
        try:
            value = json.loads(token)
        except ValueError:
            raise _NotSimple from None
        if not isinstance(value, str) or ("\\u" in token and not _encodable(value)):
            raise _NotSimple
        return value
    return _plain(token, in_flow)


def _encodable(text: str) -> bool:
    """False for a string holding a lone surrogate (`"\\ud800"`): it cannot be written, hashed or indexed."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _flow_items(inner: str) -> list[str]:
    if any(c in inner for c in '[]{}"'):
        raise _NotSimple
    parts = [part.strip() for part in inner.split(",")] if inner.strip() else []
    if "'" in inner:
        for part in parts:
            quoted = part.rpartition(": ")[2] if not part.startswith("'") else part
            if "'" in part and not (quoted.startswith("'") and quoted.endswith("'") and "'" not in quoted[1:-1]):
                raise _NotSimple  # a quoted scalar holding commas or quotes
    return parts


def _value(text: str) -> Any:
    text = text.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise _NotSimple
        return [_scalar(item, in_flow=True) for item in _flow_items(text[1:-1])]
    if text.startswith("{"):
        if not text.endswith("}"):
            raise _NotSimple
        out: dict[str, Any] = {}
        for item in _flow_items(text[1:-1]):
            key, sep, val = item.partition(": ")
            if not sep:
                if item.endswith(":"):
                    key, val = item[:-1], ""
                else:
                    raise _NotSimple
            out[_scalar(key, in_flow=True)] = _scalar(val, in_flow=True)
        return out
    return _scalar(text)


def _read_simple(yaml_text: str) -> dict[str, Any]:
    data: dict[str, Any] = {}
    open_key: str | None = None  # the last `key:` that had nothing after it
    for raw in yaml_text.split("\n"):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if line[0] in " -":
            stripped = line.lstrip(" ")
            if open_key is None or not stripped.startswith("- "):
                raise _NotSimple
            if data[open_key] is None:
                data[open_key] = []
            data[open_key].append(_value(stripped[2:]))
            continue
        match = _KEY_LINE.match(line)
        if not match:
            raise _NotSimple
        key, rest = match.group(1), match.group(2)
        if key in data:
            raise _NotSimple  # duplicate key: let the full parser complain
        if rest is None or not rest.strip():
            open_key = key
            data[key] = None  # YAML reads `key:` alone as null, a list once items follow
        else:
            open_key = None
            data[key] = _value(rest)
    return data


class _Unsupported(Exception):
    """A YAML value a memory file cannot hold (binary, set)."""


def _to_plain(value: Any) -> Any:
    """ruamel/YAML objects → plain Python (timestamps as ISO strings)."""
    if isinstance(value, (_dt.datetime, _dt.date)):
        return iso_timestamp(value)
    if isinstance(value, dict):
        return {_to_plain(str(k)): _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        if not _encodable(value):
            raise _Unsupported("text with a lone surrogate escape (\\ud800-\\udfff)")
        return str(value)
    raise _Unsupported(f"a {type(value).__name__} value (a memory holds text, numbers, lists and mappings)")


def no_alias_yaml() -> Any:
    """ruamel.yaml (safe, pure) refusing anchors and aliases as it composes, before anything is expanded ("billion
    laughs": 700 bytes to gigabytes). Raises `AnchorFound`."""
    from ruamel.yaml import YAML
    from ruamel.yaml.composer import Composer
    from ruamel.yaml.events import AliasEvent

    class NoAliasComposer(Composer):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.parser.peek_event()
            if isinstance(event, AliasEvent) or getattr(event, "anchor", None) is not None:
                raise AnchorFound
            return super().compose_node(parent, index)

    yaml = YAML(typ="safe", pure=True)
    yaml.Composer = NoAliasComposer
    return yaml


MAX_FLOW_DEPTH = 64  # ruamel's scanner is quadratic in `[`/`{` depth; ~400 deep it fails anyway


def _flow_depth(yaml_text: str) -> int:
    """How deep `[` and `{` nest (quotes not considered: an over-estimate), counted only when there are many."""
    if yaml_text.count("[") + yaml_text.count("{") <= MAX_FLOW_DEPTH:
        return 0
    depth = deepest = 0
    for char in yaml_text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest


class AnchorFound(Exception):
    """The front matter uses a YAML anchor or alias."""


def load_front_matter(yaml_text: str, path: Path | None = None) -> dict[str, Any]:
    """Front matter as plain data, by the fast reader or ruamel.yaml (no anchors); raises `MalformedMemory` only."""
    with contextlib.suppress(_NotSimple, ValueError):  # ValueError: a timestamp-shaped non-date; ruamel decides
        return _read_simple(yaml_text)
    from ruamel.yaml.error import YAMLError

    if _flow_depth(yaml_text) > MAX_FLOW_DEPTH:
        raise MalformedMemory(path, "front matter is nested too deeply")
    try:
        data = no_alias_yaml().load(yaml_text)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise MalformedMemory(path, "front matter must be a mapping of keys to values")
        return dict(_to_plain(data))
    except AnchorFound:
        raise MalformedMemory(path, "YAML anchors and aliases are not allowed in a memory file") from None
    except YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise MalformedMemory(path, f"front matter is not valid YAML: {problem}{where}") from None
    except RecursionError:
        raise MalformedMemory(path, "front matter is nested too deeply") from None
    except _Unsupported as exc:
        raise MalformedMemory(path, f"front matter holds {exc}") from None
    except ValueError as exc:  # a constructor refusing a value (a date that does not exist, ...)
        raise MalformedMemory(path, f"front matter is not valid YAML: {exc}") from None


def _text_list(data: dict[str, Any], key: str, path: Path | None) -> list[str]:
    value = data.get(key)
    if value is None:
        return []
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list):
        raise MalformedMemory(path, f"{key}: expected a list of strings")
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise MalformedMemory(path, f"{key}: expected a list of strings, got {item!r}")
        out.append(str(item))
    return out


# What a memory may not hold: C0 controls (a NUL makes git call the file binary; an ESC drives a terminal), DEL
# and C1 controls. A field may hold tabs and line ends (title and summary: one line, checked below); a body
# form feeds too (source code has them).
_FIELD_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BODY_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")


def control_problem(data: dict[str, Any], body: str) -> str | None:
    """Why a memory is not text (`field: holds control character U+001B`), or None: the first control character
    in any front-matter value (nested ones too) or the body."""
    found = _BODY_CONTROL.search(body)
    if found:
        return f"body: holds control character U+{ord(found.group()):04X} (a memory is text: remove it)"
    for key, value in data.items():
        char = _control_in(value)
        if char is None and isinstance(key, str):
            char = _control_in(key)
        if char is not None:
            name = _FIELD_CONTROL.sub("?", str(key))  # the message names the key, never prints its controls
            return f"{name}: holds control character U+{ord(char):04X} (a memory is text: remove it)"
    return None


def _control_in(value: Any) -> str | None:
    """The first control character in a string, or in the strings of a list or mapping (keys included)."""
    if isinstance(value, str):
        found = _FIELD_CONTROL.search(value)
        return found.group() if found else None
    if isinstance(value, dict):
        value = [part for pair in value.items() for part in pair]
    if isinstance(value, list):
        return next((char for char in map(_control_in, value) if char is not None), None)
    return None


def _one_line(value: Any, key: str, expected: str, path: Path | None) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise MalformedMemory(path, f"{key}: expected {expected}")
    if "\n" in str(value) or "\r" in str(value):
        raise MalformedMemory(path, f"{key}: must be a single line")
    return str(value)


def from_data(data: dict[str, Any], body: str, path: Path | None = None) -> Memory:
    """Validate front-matter data and build a `Memory`; raises `MalformedMemory`."""
    problem = control_problem(data, body)
    if problem is not None:
        raise MalformedMemory(path, problem)
    for key in ("id", "title", "type"):
        if data.get(key) in (None, ""):
            raise MalformedMemory(path, f"missing required field '{key}'")
    memory_id = str(data["id"])
    if not ID_RE.match(memory_id):
        raise MalformedMemory(path, f"id: {memory_id!r} is not 12 lowercase hex characters")
    memory_type = data["type"]
    if memory_type not in TYPES:
        raise MalformedMemory(path, f"type: unknown type {memory_type!r} (one of: {', '.join(TYPES)})")
    title = _one_line(data["title"], "title", "text", path)
    summary = _one_line("" if data.get("summary") is None else data["summary"], "summary", "one line of text", path)
    project = data.get("project")
    if project is not None and (isinstance(project, bool) or not isinstance(project, (str, int, float))):
        raise MalformedMemory(path, "project: expected a project name")
    status = data.get("status") or "active"
    if status not in STATUSES:
        raise MalformedMemory(path, f"status: unknown status {status!r} (one of: {', '.join(STATUSES)})")
    confidence = data.get("confidence", 0.8)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
        raise MalformedMemory(path, f"confidence: {confidence!r} is outside 0..1")
    priority = data.get("priority", 5)
    if isinstance(priority, float) and priority.is_integer():
        priority = int(priority)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 10:
        raise MalformedMemory(path, f"priority: {priority!r} is outside 1..10 (a whole number)")
    pinned = False if data.get("pinned") is None else data["pinned"]
    if not isinstance(pinned, bool):
        raise MalformedMemory(path, f"pinned: expected true or false, got {pinned!r}")
    scope = data.get("scope") or "project"
    if scope not in SCOPES:
        raise MalformedMemory(path, f"scope: unknown scope {scope!r} (one of: {', '.join(SCOPES)})")
    branch = data.get("branch")
    branch = None if branch is None else str(branch)
    stamps = {}
    for key in ("created", "updated"):
        value = data.get(key)
        if value is None or value == "":
            stamps[key] = ""
            continue
        try:
            stamps[key] = iso_timestamp(value)
        except ValueError:
            raise MalformedMemory(path, f"{key}: {value!r} is not a timestamp like 2026-11-21T20:50:00Z") from None
    source = data.get("source") or {}
    if not isinstance(source, dict):
        raise MalformedMemory(path, "source: expected a mapping such as {kind: manual}")
    links = []
    raw_links = data.get("links") or []
    if not isinstance(raw_links, list):
        raise MalformedMemory(path, "links: expected a list of {rel, to} mappings")
    for item in raw_links:
        if not isinstance(item, dict) or "rel" not in item or "to" not in item:
            raise MalformedMemory(path, f"links: each link needs 'rel' and 'to', got {item!r}")
        if item["rel"] not in RELATIONS:
            raise MalformedMemory(
                path, f"links: unknown relation {item['rel']!r} (one of: {', '.join(RELATIONS)})"
            )
        strength = item.get("strength")
        if strength is not None and (isinstance(strength, bool) or not isinstance(strength, (int, float))):
            raise MalformedMemory(path, f"links: strength {strength!r} is not a number")
        created = item.get("created")
        if created is not None and created != "":
            try:
                created = iso_timestamp(created)
            except ValueError:
                raise MalformedMemory(path, f"links: created {created!r} is not a timestamp like "
                                            f"2026-11-21T20:50:00Z") from None
        links.append(Link(str(item["rel"]), str(item["to"]), None if strength is None else float(strength),
                          created or None))
    extra = {k: v for k, v in data.items() if k not in KEYS}
    return Memory(id=memory_id, type=memory_type, title=title, body=body, summary=summary, status=status,
                  confidence=float(confidence), priority=priority, pinned=pinned, scope=scope,
                  project=None if project is None else str(project), branch=branch,
                  tags=_text_list(data, "tags", path), files=_text_list(data, "files", path),
                  created=stamps["created"], updated=stamps["updated"], source=source, links=links, extra=extra,
                  path=path)


def parse(text: str, path: Path | None = None) -> Memory:
    """Parse a memory file's text; raises `MalformedMemory` with the path and reason."""
    yaml_text, body = split_front_matter(text, path)
    data = load_front_matter(yaml_text, path)
    return from_data(data, body, path)


def validate(memory: Memory) -> Memory:
    """Check a `Memory` built in code the same way a file is checked."""
    return from_data(_front_matter_data(memory), memory.body, memory.path)


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold long titles
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.allow_unicode = True
    return yaml


def _timestamp_node(iso: str) -> Any:
    """A ruamel timestamp that dumps as `2026-11-21T20:50:00Z`, unquoted."""
    return _yaml().load(f"t: {iso}\n")["t"]


def _flow(node: Any) -> Any:
    """A ruamel sequence or mapping written on one line (`[a, b]`, `{kind: manual}`)."""
    node.fa.set_flow_style()
    return node


def _front_matter_data(memory: Memory) -> dict[str, Any]:
    data: dict[str, Any] = {key: getattr(memory, key) for key in KEYS}  # in KEYS order: the file's key order
    data.update(tags=list(memory.tags), files=list(memory.files), source=dict(memory.source),
                links=[link.as_dict() for link in memory.links])
    data.update(memory.extra)
    return data


def _safe_scalar(value: Any) -> Any:
    """Quote strings that start with a YAML indicator or hold a character YAML reads as a line break or will not take
    plain (NEL, line and paragraph separators, controls, a BOM): ruamel's emitter writes some of them plain where its
    reader then sees syntax or folds them, so quoting keeps round trips exact."""
    if not isinstance(value, str) or not value:
        return value
    awkward = any(ord(c) < 32 and c != "\t" or c in "\x7f\x85\u2028\u2029\ufeff" for c in value)
    if value[0] in _PLAIN_BAD_START or awkward:
        from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

        return DoubleQuotedScalarString(value) if awkward else SingleQuotedScalarString(value)
    return value


def _link_node(item: dict[str, Any]) -> Any:
    """One link as a flow map, its `created` a bare timestamp like the memory's own."""
    from ruamel.yaml.comments import CommentedMap

    if item.get("created"):
        item = dict(item, created=_timestamp_node(item["created"]))
    return _flow(CommentedMap(item))


def _node(key: str, value: Any) -> Any:
    """The ruamel node cortex writes for a field: flow lists and maps, bare timestamps."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if key in ("created", "updated") and value:
        return _timestamp_node(value)
    if key == "links":
        return CommentedSeq([_link_node(item) for item in value])
    if isinstance(value, list):
        return _flow(CommentedSeq([_safe_scalar(item) for item in value]))
    if isinstance(value, dict):
        return _flow(CommentedMap({k: _safe_scalar(v) for k, v in value.items()}))
    return _safe_scalar(value)


def _dump(data: Any) -> str:
    import io

    buffer = io.StringIO()
    _yaml().dump(data, buffer)
    return buffer.getvalue()


def render_new(memory: Memory) -> str:
    """The text of a new memory file (validated first)."""
    from ruamel.yaml.comments import CommentedMap

    validate(memory)
    front = CommentedMap()
    for key, value in _front_matter_data(memory).items():
        if value is None and key in ("branch", "project") or not value and key in ("summary", "links"):
            continue
        front[key] = _node(key, value)
    body = memory.body
    if body and not body.endswith("\n"):
        body += "\n"
    return f"---\n{_dump(front)}---\n{body}"


def edit_text(text: str, changes: dict[str, Any], body: str | None = None, path: Path | None = None) -> str:
    """Apply field changes (None removes a key) and maybe a new body, round-trip: only the changed lines differ."""
    yaml_text, old_body = split_front_matter(text, path)
    yaml = _yaml()
    try:
        front = yaml.load(yaml_text)
    except Exception as exc:  # ruamel raises several unrelated types
        raise MalformedMemory(path, f"front matter is not valid YAML: {exc}") from None
    for key, value in changes.items():
        if value is None:
            front.pop(key, None)
            continue
        if key == "links" and key in front and isinstance(front[key], list):
            existing = front[key]
            while len(existing) > len(value):
                existing.pop()
            for i, item in enumerate(dict(each) for each in value):
                if i >= len(existing):
                    existing.append(_link_node(item))
                elif _to_plain(existing[i]) != item:
                    existing[i] = _link_node(item)
            continue
        if key in front and _to_plain(front[key]) == _to_plain(value):
            continue
        front[key] = _node(key, value)
    new_body = old_body if body is None else body
    head = text[: text.index("\n") + 1]
    if head.startswith("\ufeff"):
        head = head[1:]
    return f"{head}{_dump(front)}---\n{new_body}"


def supersession_cycles(replaces: dict[str, list[str]]) -> list[list[str]]:
    """The groups of memories that replace each other in a cycle (`supersedes` links, from each id to the ids it
    replaces; a target that is not a key is outside any cycle), each sorted, in order: Tarjan's strongly
    connected components of more than one memory, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(replaces):
        if root in index:
            continue
        work = [(root, iter(replaces[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in replaces:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(replaces[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def revived_in_cycles(replaces: dict[str, list[str]], status: dict[str, str], updated: dict[str, str]) -> set[str]:
    """The ids every reader takes as active although their files say superseded: in each supersession cycle
    (hand-edited links: `cortex forget --replaced-by` refuses to make one) where no memory is active, the most
    recently updated one (the greatest id on a tie), so that one of them still speaks."""
    out = set()
    for group in supersession_cycles(replaces):
        if any(status.get(ident) == "active" for ident in group):
            continue
        candidates = [ident for ident in group if status.get(ident) == "superseded"]
        if candidates:
            out.add(max(candidates, key=lambda ident: (updated.get(ident) or "", ident)))
    return out
