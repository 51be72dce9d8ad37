"""Pull-request review of memory: what a branch changes in the store, read from git objects (no checkout, so it
runs in CI), and the one comment `post` keeps up to date. docs/review.md."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from cortex import gitops
from cortex.errors import CortexError, MalformedMemory
from cortex.memory import Memory, parse
from cortex.projections import is_decision, split_rejected

MARKER = "<!-- cortex-review -->"
LIMIT = 5  # items shown per list in the markdown; `--json` has them all
RATIONALE_CHARS = 220
MAX_COMMENT_CHARS = 60_000  # GitHub refuses a comment over 65,536 characters
OVERLAP = 0.3  # content-word overlap at which two decisions are about one thing (then their claims are compared)


@dataclass
class _Version:
    path: str
    memory: Memory | None  # None: the file does not parse
    problem: str = ""


def _read(path: str, data: bytes) -> _Version:
    try:
        return _Version(path, parse(data.decode("utf-8"), Path(path)))
    except MalformedMemory as exc:
        return _Version(path, None, exc.reason)
    except UnicodeDecodeError:
        return _Version(path, None, "not UTF-8 text")


class _Side:
    """The memory files at one commit, each parsed the first time it is asked for (a big store parses little)."""

    def __init__(self, repo: Any, blobs: dict[str, tuple[str, Any]], read: dict[Any, _Version]) -> None:
        self.repo = repo
        self.blobs = blobs  # id -> (path, blob id)
        self._read = read  # (path, blob id) -> _Version, shared: a file the same on both sides is read once

    def data(self, memory_id: str) -> bytes:
        return bytes(self.repo[self.blobs[memory_id][1]].data)

    def get(self, memory_id: str) -> _Version | None:
        found = self.blobs.get(memory_id)
        if found is None:
            return None
        if found not in self._read:
            self._read[found] = _read(found[0], self.data(memory_id))
        return self._read[found]

    def memory(self, memory_id: str) -> Memory | None:
        version = self.get(memory_id)
        return version.memory if version is not None else None

    def active(self, memory_id: str) -> Memory | None:
        memory = self.memory(memory_id)
        return memory if memory is not None and memory.status == "active" else None

    def active_where(self, wanted: Any) -> dict[str, Memory]:
        """The active memories whose file bytes pass `wanted` (a cheap filter before parsing)."""
        out = {}
        for memory_id in self.blobs:
            if wanted(self.data(memory_id)):
                memory = self.active(memory_id)
                if memory is not None:
                    out[memory_id] = memory
        return out


def build(repo: Any, base_rev: str, head_rev: str, store_prefix: str) -> dict[str, Any]:
    """What `head_rev` changes in the store at `store_prefix` since it forked from `base_rev` (`--json`'s data)."""
    head = gitops.resolve(repo, head_rev)
    base = gitops.resolve(repo, base_rev)
    fork_id = repo.merge_base(base.id, head.id)
    fork = repo[fork_id] if fork_id is not None else base
    memories_prefix = f"{store_prefix}/memories" if store_prefix else "memories"
    read: dict[Any, _Version] = {}
    old = _Side(repo, gitops.memory_blobs_at(repo, fork, memories_prefix), read)
    new = _Side(repo, gitops.memory_blobs_at(repo, head, memories_prefix), read)
    changed_ids = sorted(mid for mid in set(old.blobs) | set(new.blobs)
                         if (old.blobs.get(mid) or ("", None))[1] != (new.blobs.get(mid) or ("", None))[1])
    replaced_by = _replaced_by_map(old, new, changed_ids)
    report: dict[str, Any] = {
        "base": str(base.id), "head": str(head.id), "merge_base": str(fork.id), "store": store_prefix or ".",
        "store_found": not store_prefix or any(gitops.path_at(repo, commit, store_prefix) for commit in (fork, head)),
        "decisions": {"added": [], "changed": [], "superseded": [], "archived": [], "removed": []},
        "gotchas": [], "conventions": [], "architecture": [],
        "plan": {"added": [], "changed": [], "closed": []}, "progress": [],
        "proposed": [],  # capture's proposals on the branch: for the reviewer to accept or reject
        "other": {}, "warnings": [], "config": _config_changes(repo, fork, head, store_prefix), "pins": [],
    }
    for mid in changed_ids:
        _sort_change(report, old.get(mid), new.get(mid), lambda i: new.memory(i) or old.memory(i), replaced_by)
    for rows in _lists(report):
        rows.sort(key=lambda row: (row["title"].lower(), row["id"]))
    report["pins"] = _pin_changes(old, new, changed_ids)
    paths = gitops.path_changes(repo, fork, head)
    report["warnings"] = (
        [{"kind": "malformed", "path": v.path, "reason": v.problem}
         for v in map(new.get, changed_ids) if v is not None and v.memory is None]
        + _contradictions(old, new, changed_ids, _cleared(repo, head, store_prefix))
        + _deleted_files(repo, fork, head, new, paths)
        + _made_stale(repo, fork, head, new, paths, memories_prefix)
        + _secrets(repo, head, store_prefix, paths)
    )
    from cortex.guard import redacted_data

    # A hand-committed memory skipped the write guard: the review names each secret, never shows it.
    return redacted_data(report)


def _replaced_by_map(old: _Side, new: _Side, changed_ids: list[str]) -> dict[str, list[str]]:
    """id -> the changed memories (at either revision) with a `supersedes` link to it, for changed ids."""
    wanted = set(changed_ids)
    out: dict[str, list[str]] = {}
    for side in (old, new):
        for memory_id in wanted.intersection(side.blobs):  # a supersedes link is made in this branch
            if b"supersedes" not in side.data(memory_id):
                continue
            memory = side.memory(memory_id)
            for link in memory.links if memory is not None else ():
                if link.rel == "supersedes" and link.to in wanted and memory_id not in out.get(link.to, []):
                    out.setdefault(link.to, []).append(memory_id)
    return out


def _kind(before: _Version | None, after: _Version | None) -> str:
    if before is None:
        return "added"
    if after is None:
        return "removed"
    old_status = before.memory.status if before.memory else None
    new_status = after.memory.status if after.memory else None
    if new_status != old_status and new_status in ("superseded", "archived"):
        return new_status
    return "changed"


def _sort_change(report: dict[str, Any], before: _Version | None, after: _Version | None,
                 known: Callable[[str], Memory | None], replaced_by: dict[str, list[str]]) -> None:
    """Put one changed memory in its section of the report."""
    kind = _kind(before, after)
    version = after if after is not None and after.memory is not None else before
    memory = version.memory if version is not None else None
    if memory is None:
        return  # unparsable on both sides: the warnings say so
    row = _row(memory, version.path, known, replaced_by)  # type: ignore[union-attr]
    if after is not None and after.memory is not None and after.memory.status == "proposed":
        report["proposed"].append(row)
        return
    if kind == "changed" and before is not None and before.memory is not None and after is not None \
            and after.memory is not None:
        row["fields"] = gitops.changed_fields(before.memory, after.memory)
        if before.memory.status not in ("active", "proposed") and after.memory.status == "active":
            row["restored"] = True
    if is_decision(memory):
        report["decisions"][kind].append(row)
    elif memory.type == "plan":
        bucket = "closed" if kind in ("superseded", "archived", "removed") or memory.status != "active" else kind
        report["plan"][bucket].append(row)
    elif memory.type == "progress" and kind == "added":
        report["progress"].append(row)
    elif kind == "added" and memory.type in ("gotcha", "pattern", "architecture") and memory.status == "active":
        section = {"gotcha": "gotchas", "pattern": "conventions", "architecture": "architecture"}[memory.type]
        report[section].append(row)
    else:
        counts = report["other"].setdefault(kind, {})
        counts[memory.type] = counts.get(memory.type, 0) + 1


def _row(memory: Memory, path: str, known: Callable[[str], Memory | None],
         replaced_by: dict[str, list[str]]) -> dict[str, Any]:
    rationale, rejected = split_rejected(memory.body)
    row: dict[str, Any] = {"id": memory.id, "type": memory.type, "title": memory.title, "status": memory.status,
                           "path": path, "tags": list(memory.tags), "files": list(memory.files),
                           "rationale": rationale, "rejected": rejected}
    supersedes = [link.to for link in memory.links if link.rel == "supersedes"]
    if supersedes:
        row["supersedes"] = [_ref(mid, known) for mid in supersedes]
    if memory.id in replaced_by:
        row["superseded_by"] = [_ref(mid, known) for mid in sorted(set(replaced_by[memory.id]))]
    return row


def _ref(memory_id: str, known: Callable[[str], Memory | None]) -> dict[str, str]:
    found = known(memory_id)
    return {"id": memory_id, "title": found.title if found is not None else ""}


def _config_changes(repo: Any, fork: Any, head: Any, store_prefix: str) -> list[dict[str, Any]]:
    """Each `config.yaml` setting the branch adds, changes or removes (key, old, new; None: not set)."""
    path = f"{store_prefix}/config.yaml" if store_prefix else "config.yaml"
    before, after = gitops.blob_at(repo, fork, path), gitops.blob_at(repo, head, path)
    if before == after:
        return []
    old, new = _settings(before), _settings(after)
    keys = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))
    return [{"key": key, "old": _plain(old.get(key)), "new": _plain(new.get(key)), "path": path} for key in keys]


def _plain(value: Any) -> Any:
    """A setting's value as JSON has it (a YAML date as text), a secret-looking one redacted."""
    from cortex.guard import redact

    value = json.loads(json.dumps(value, default=str))
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    clean = redact(text)[0]
    return value if clean == text else clean


def _settings(data: bytes | None) -> dict[str, Any]:
    """A config file's settings by dotted key (`capture.llm`); {} when there is none."""
    from ruamel.yaml.error import YAMLError

    from cortex.memory import AnchorFound, no_alias_yaml

    if data is None:
        return {}
    try:
        given = no_alias_yaml().load(data.decode("utf-8"))
    except (AnchorFound, UnicodeDecodeError, YAMLError) as exc:
        return {"config.yaml": f"not readable as settings ({type(exc).__name__})"}
    if given is None:
        return {}
    if not isinstance(given, dict):
        return {"config.yaml": "not a mapping of settings"}
    out: dict[str, Any] = {}

    def walk(node: dict[Any, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value

    walk(given, "")
    return out


def _pin_changes(old: _Side, new: _Side, changed_ids: list[str]) -> list[dict[str, Any]]:
    """The memories the branch pins or unpins (a new pinned memory too): what every briefing shows."""
    rows = []
    for memory_id in changed_ids:
        before, after = old.memory(memory_id), new.memory(memory_id)
        was, now = bool(before is not None and before.pinned), bool(after is not None and after.pinned)
        memory = after or before
        if was != now and memory is not None:
            found = new.blobs.get(memory_id) or old.blobs[memory_id]
            rows.append({"id": memory_id, "title": memory.title, "type": memory.type, "pinned": now,
                         "path": found[0]})
    return sorted(rows, key=lambda row: (row["title"].lower(), row["id"]))


def _setting_lines(report: dict[str, Any], limit: int) -> list[str]:
    """`config.yaml` changes (secret-looking values redacted) and pins, for the markdown."""
    def shown(value: Any) -> str:
        if value is None:
            return "(not set)"
        return _code((json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value)[:120])

    rows = report["config"]
    lines = [f"- {_code(row['key'])}: {shown(row['old'])} → {shown(row['new'])}"
             + (" — ignored: cortex runs only a command from each person's own config" if row["key"].endswith(
                 "_command") else "") for row in rows[:limit]]
    out = _more(lines, len(rows), limit) if rows else []
    pins = [f"- {'Pinned' if row['pinned'] else 'Unpinned'}: {_item(row)}" for row in report["pins"][:limit]]
    out += _more(pins, len(report["pins"]), limit) if pins else []
    return ["#### Settings and pins", *out, ""] if out else []


def _contradictions(old: _Side, new: _Side, changed_ids: list[str], cleared: set[tuple[str, str]]
                    ) -> list[dict[str, Any]]:
    """The suspects a branch introduces (`cortex.suspects`): a changed memory and an active one on one subject that
    cannot both hold (`claims.contradiction`), or a new `contradicts` link; pairs a person cleared are not."""
    from cortex.claims import contradiction, subject_words
    from cortex.suspects import pair
    from cortex.text import jaccard, words

    changed = {mid: m for mid in changed_ids if (m := new.active(mid)) is not None and m.type != "code"}
    keys = {word.encode() for m in changed.values() for word in subject_words(m.title) if len(word) > 3}
    # only memories whose text names two of the changed ones' title words are parsed
    pool = new.active_where(lambda data: sum(key in data.lower() for key in keys) >= 2) if keys else {}
    pool = {mid: m for mid, m in pool.items() if m.type != "code"}
    words_of = {mid: words(f"{m.title}\n{m.body}") for mid, m in {**pool, **changed}.items()}
    found: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set(cleared)
    for mid, memory in changed.items():
        before = old.memory(mid)
        earlier = {(link.rel, link.to) for link in before.links} if before is not None else set()
        for link in memory.links:
            target = new.active(link.to) if link.rel == "contradicts" else None
            if target is not None and (link.rel, link.to) not in earlier and pair(mid, link.to) not in seen:
                seen.add(pair(mid, link.to))
                found.append(_contradiction(memory, target, "a contradicts link"))
        if before is not None and (before.title, before.body) == (memory.title, memory.body):
            continue
        for other_id, other in pool.items():
            key = pair(mid, other_id)
            if other_id == mid or key in seen or jaccard(words_of[mid], words_of[other_id]) < OVERLAP:
                continue
            reason = contradiction(f"{memory.title}\n{memory.body}", f"{other.title}\n{other.body}")
            if reason:
                seen.add(key)
                found.append(_contradiction(memory, other, reason))
    return found


def _cleared(repo: Any, head: Any, store_prefix: str) -> set[tuple[str, str]]:
    """The pairs cleared at `head` (`.cortex/cleared/<id>-<id>.json`, `cortex.suspects`)."""
    from cortex.suspects import FOLDER, pair

    try:
        tree = head.tree[f"{store_prefix}/{FOLDER}" if store_prefix else FOLDER]
        names = [entry.name for entry in repo[tree.id]]
    except (KeyError, TypeError, AttributeError):
        return set()
    return {pair(*name.removesuffix(".json").split("-", 1)) for name in names
            if name.endswith(".json") and name.count("-") == 1}


def _contradiction(memory: Memory, other: Memory, reason: str) -> dict[str, Any]:
    return {"kind": "contradiction", "id": memory.id, "title": memory.title,
            "other": {"id": other.id, "title": other.title}, "reason": reason}


def _deleted_files(repo: Any, fork: Any, head: Any, new: _Side, changes: list[gitops.PathChange]
                   ) -> list[dict[str, Any]]:
    """Active memories at `head` naming a file or folder that was there at the fork and is gone at `head`."""
    removed = {change.old_path for change in changes if change.status in ("D", "R")}
    if not removed:
        return []
    # a removed file or a folder above one; only memories whose `files:` line names one of them are parsed
    candidates = {"/".join(parts[:n]) for path in removed for parts in [path.split("/")] for n in range(1, len(parts) + 1)}
    active = new.active_where(lambda data: _may_name(data, candidates))
    named = {path.strip("/").removeprefix("./") for m in active.values() for path in m.files}
    gone = {path for path in named if path and gitops.path_at(repo, fork, path) and not gitops.path_at(repo, head, path)}
    if not gone:
        return []
    moved = {change.old_path: change.new_path for change in changes if change.status == "R"}
    found = []
    for memory in sorted(active.values(), key=lambda m: (m.title, m.id)):
        paths = sorted({p.strip("/").removeprefix("./") for p in memory.files} & gone)
        if paths:
            found.append({"kind": "deleted-file", "id": memory.id, "title": memory.title, "files": paths,
                          "moved_to": {p: moved[p] for p in paths if p in moved}})
    return found


def _made_stale(repo: Any, fork: Any, head: Any, new: _Side, changes: list[gitops.PathChange], folder: str
                ) -> list[dict[str, Any]]:
    """Active memories at `head` that this branch's commits make possibly stale (`cortex.staleness`): a file
    they name rewritten (a deleted one is a `deleted-file` warning)."""
    from cortex import staleness

    modified = {change.new_path for change in changes if change.status == "M"}
    if not modified:
        return []
    active = new.active_where(lambda data: _may_name(data, modified))
    wanted = {mid: (new.blobs[mid][0], list(m.files)) for mid, m in active.items()}
    before = staleness.at(repo, fork, folder, wanted)
    found = []
    for mid, why in staleness.at(repo, head, folder, wanted).items():
        if mid not in before and " deleted since " not in why:
            found.append({"kind": "stale", "id": mid, "title": active[mid].title, "reason": why})
    return sorted(found, key=lambda row: (row["title"], row["id"]))


_FILES_LINE = re.compile(rb"^files:[ \t]*(.*?)[ \t]*\r?$", re.M)


def _may_name(data: bytes, paths: set[str]) -> bool:
    """Whether a memory file's `files:` line may name one of `paths` (a cheap look before parsing it)."""
    match = _FILES_LINE.search(data)
    if match is None:
        return False
    value = match.group(1)
    if not (value.startswith(b"[") and value.endswith(b"]")) or b"'" in value or b'"' in value:
        return True  # a block list or quoted names: parse to know
    names = value[1:-1].decode("utf-8", "replace").split(",")
    return any(name.strip().strip("/").removeprefix("./") in paths for name in names)


def _secrets(repo: Any, head: Any, store_prefix: str, changes: list[gitops.PathChange]) -> list[dict[str, Any]]:
    """Possible secrets in store files this branch adds or changes (the kind and line, never the text)."""
    from cortex.guard import scan_bytes

    inside = f"{store_prefix}/" if store_prefix else ""
    found = []
    for change in changes:
        if change.status == "D" or not change.new_path.startswith(inside):
            continue
        data = gitops.blob_at(repo, head, change.new_path)
        if data is None:
            continue
        for finding in scan_bytes(data):  # a file with NULs too: UTF-16/32 text is read as such
            found.append({"kind": "secret", "path": change.new_path, "line": finding.line, "rule": finding.kind})
    return found


def has_findings(report: dict[str, Any]) -> bool:
    """Whether the review has anything to say (a change or a warning)."""
    return bool(report["warnings"] or any(_lists(report)) or report["other"] or report["config"] or report["pins"])


def _lists(report: dict[str, Any]) -> list[Any]:
    return [*report["decisions"].values(), report["gotchas"], report["conventions"], report["architecture"],
            *report["plan"].values(), report["progress"], report["proposed"]]


_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#])")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _md(text: str, limit: int = 200) -> str:
    """One line of a memory's text as inert markdown: no HTML, links, mentions, emphasis or table breaks."""
    line = " ".join(_CONTROL.sub(" ", text).split())
    if len(line) > limit:
        line = line[:limit].rsplit(" ", 1)[0].rstrip(" ,;:.") + "…"
    line = _MD_SPECIAL.sub(r"\\\1", line)
    return _MENTION.sub("@\u200b", line)


def _code(text: str) -> str:
    """A path or id as inline code (backticks in it cannot close the span early)."""
    clean = " ".join(_CONTROL.sub(" ", text).split()).replace("`", "'")
    return f"`{clean}`"


def _item(row: dict[str, Any], strike: bool = False) -> str:
    title = _md(row["title"])
    title = f"~~{title}~~" if strike else f"**{title}**"
    return f"{title} ({_code(row['id'])})"


def _more(lines: list[str], total: int, limit: int) -> list[str]:
    return lines + ([f"- …and {total - limit} more (`cortex review --json` lists all)"] if total > limit else [])


def _decision_lines(kind: str, rows: list[dict[str, Any]], limit: int) -> list[str]:
    out = []
    for row in rows[:limit]:
        if kind == "superseded":
            by = _replaced_by(row)
            out.append(f"- {_item(row, strike=True)}" + (f" → replaced by {by}" if by else ""))
        elif kind in ("archived", "removed"):
            note = " — file deleted; `cortex forget` archives and keeps it findable" if kind == "removed" else ""
            out.append(f"- {_item(row, strike=True)}{note}")
        else:
            extra = ""
            if kind == "changed":
                fields = ", ".join(row.get("fields") or ["its file"])
                extra = " — restored" if row.get("restored") else f" — changed: {fields}"
            if row.get("supersedes"):
                extra += " — replaces " + ", ".join(f"~~{_md(r['title'] or r['id'])}~~" for r in row["supersedes"])
            if row["status"] != "active":
                by = _replaced_by(row)
                extra += f" — {row['status']} in this branch" + (f", replaced by {by}" if by else "")
            out.append(f"- {_item(row)}{extra}")
        if kind in ("added", "changed", "superseded") or (kind == "archived" and row["rationale"]):
            if row["rationale"] and kind != "superseded":
                out.append(f"  - Why: {_md(row['rationale'], RATIONALE_CHARS)}")
            if row["rejected"] and kind != "superseded":
                out.append(f"  - Rejected: {'; '.join(_md(r, 80) for r in row['rejected'][:3])}"
                           + (f" (+{len(row['rejected']) - 3})" if len(row["rejected"]) > 3 else ""))
    return _more(out, len(rows), limit)


def _replaced_by(row: dict[str, Any]) -> str:
    return ", ".join(f"**{_md(r['title'] or r['id'])}** ({_code(r['id'])})" for r in row.get("superseded_by", []))


def _warning_line(warning: dict[str, Any]) -> str:
    kind = warning["kind"]
    if kind == "contradiction":
        other = warning["other"]
        return (f"- **Contradiction:** **{_md(warning['title'])}** ({_code(warning['id'])}) vs the active "
                f"**{_md(other['title'])}** ({_code(other['id'])}): {_md(warning['reason'], 120)}. "
                f"Supersede one (`cortex forget OLD --replaced-by NEW`) or reconcile them.")
    if kind == "deleted-file":
        files = ", ".join(_code(p) + (f" (moved to {_code(warning['moved_to'][p])})" if p in warning["moved_to"] else "")
                          for p in warning["files"][:3])
        return (f"- **Deleted file:** **{_md(warning['title'])}** ({_code(warning['id'])}) names {files}, "
                f"which this branch deletes. Update its `files` or archive it.")
    if kind == "stale":
        return (f"- **Possibly stale:** **{_md(warning['title'])}** ({_code(warning['id'])}): "
                f"{_md(warning['reason'], 160)} on this branch. Check that it still holds; update or archive it.")
    if kind == "secret":
        return (f"- **Possible secret** ({_md(warning['rule'], 60)}) in {_code(warning['path'])} line "
                f"{warning['line']}. Remove it and rotate it: it stays in the branch's history.")
    return f"- **Unreadable memory:** {_code(warning['path'])}: {_md(warning.get('reason', ''), 160)}"


def _summary(report: dict[str, Any]) -> str:
    parts = []
    decisions = report["decisions"]
    counted = [f"{len(rows)} {kind}" for kind, rows in decisions.items() if rows]
    if counted:
        parts.append("decisions: " + ", ".join(counted))
    for key, word in (("gotchas", "gotcha"), ("conventions", "convention"), ("architecture", "architecture note")):
        if report[key]:
            parts.append(f"{len(report[key])} new {word}{'s' if len(report[key]) > 1 else ''}")
    if any(report["plan"].values()):
        parts.append("plan changed")
    if report["proposed"]:
        parts.append(f"{len(report['proposed'])} proposed by capture")
    if report["config"]:
        parts.append(f"config.yaml: {len(report['config'])} setting{'s' if len(report['config']) > 1 else ''} changed")
    if report["pins"]:
        parts.append(f"{len(report['pins'])} pin{'s' if len(report['pins']) > 1 else ''} changed")
    if report["warnings"]:
        parts.append(f"⚠️ {len(report['warnings'])} warning{'s' if len(report['warnings']) > 1 else ''}")
    return " · ".join(parts)


def render(report: dict[str, Any], limit: int = LIMIT) -> str:
    """The review as GitHub-flavoured markdown, starting with `MARKER`: at most `limit` items a list."""
    out = [MARKER, "### 🧠 cortex: memory changes in this pull request", ""]
    span = f"`{report['merge_base'][:7]}..{report['head'][:7]}`"
    if not has_findings(report):
        if not report["store_found"]:
            out += [f"No cortex store at {_code(report['store'])} in {span} (another folder? `--dir`).", ""]
        else:
            out += [f"No memory in {_code(report['store'])} changed in {span}.", ""]
        return "\n".join(out)
    out += [f"**{_summary(report) or 'memories changed'}**", ""]
    if report["warnings"]:
        out += ["#### ⚠️ Warnings", *_more([_warning_line(w) for w in report["warnings"][:limit]],
                                          len(report["warnings"]), limit), ""]
    out += _setting_lines(report, limit)
    if any(report["decisions"].values()):
        out.append("#### Decisions")
        for kind, rows in report["decisions"].items():
            if rows:
                out += [f"**{kind.capitalize()}**", "", *_decision_lines(kind, rows, limit), ""]
    for key, heading in (("gotchas", "New gotchas"), ("conventions", "New conventions"),
                         ("architecture", "New architecture notes")):
        rows = report[key]
        if rows:
            lines = [f"- {_item(r)}" + (f" — {_md(r['rationale'], 160)}" if r["rationale"] else "") for r in rows[:limit]]
            out += [f"#### {heading}", *_more(lines, len(rows), limit), ""]
    out += _plan_lines(report, limit)
    if report["proposed"]:  # not in any briefing until accepted: `cortex inbox accept|reject ID...`
        lines = [f"- {_item(r)} — {r['type']}" for r in report["proposed"][:limit]]
        out += ["#### Proposed by capture (not yet accepted)", *_more(lines, len(report["proposed"]), limit),
                "<sub>Accept or reject on the branch: `cortex inbox accept ID…` / `cortex inbox reject ID…`</sub>",
                ""]
    other = report["other"]
    if other:
        counts = ", ".join(f"{n} {memory_type} {kind}" for kind in sorted(other)
                           for memory_type, n in sorted(other[kind].items()))
        out += [f"<sub>Also: {counts}.</sub>", ""]
    out.append(f"<sub>`cortex review` of {span} in {_code(report['store'])} · `--json` lists everything</sub>")
    text = "\n".join(out) + "\n"
    if len(text) > MAX_COMMENT_CHARS:  # a guard: the caps above keep a review far below it
        text = text[:MAX_COMMENT_CHARS].rsplit("\n", 1)[0] + "\n\n…(cut: `cortex review --json` has it all)\n"
    return text


def _plan_lines(report: dict[str, Any], limit: int) -> list[str]:
    plan, progress = report["plan"], report["progress"]
    if not any(plan.values()) and not progress:
        return []
    out = ["#### Plan"]
    for kind, word in (("added", "New plan"), ("changed", "Plan updated"), ("closed", "Plan closed")):
        for row in plan[kind][:limit]:
            out.append(f"- {word}: {_item(row, strike=kind == 'closed')}")
            if kind != "closed" and row["rationale"]:
                out.append(f"  - {_md(row['rationale'], RATIONALE_CHARS)}")
        if len(plan[kind]) > limit:
            out.append(f"- …and {len(plan[kind]) - limit} more")
    if progress:
        titles = "; ".join(_md(r["title"], 80) for r in progress[:3])
        out.append(f"- {len(progress)} progress note{'s' if len(progress) > 1 else ''}: {titles}"
                   + ("; …" if len(progress) > 3 else ""))
    return out + [""]


def parse_range(revisions: str) -> tuple[str, str]:
    """'BASE..HEAD' or 'BASE...HEAD' (both: what HEAD adds since it forked from BASE), or 'BASE' (..HEAD)."""
    text = revisions.strip()
    base, sep, head = text.partition("...") if "..." in text else text.partition("..")
    if not base:
        raise CortexError(f"give a revision range as BASE..HEAD, e.g. main..feature (got {revisions!r})")
    return base, (head or "HEAD") if sep else "HEAD"


def store_prefix(repo: Any, directory: Path | None) -> str:
    """The store's folder in the repository: `directory`, $CORTEX_DIR, the one found here, else `.cortex`."""
    import os

    from cortex.errors import NotInitialised
    from cortex.store import STORE_DIRNAME, Store

    top = Path(repo.workdir).resolve() if repo.workdir else None
    if top is None:
        raise CortexError(f"{repo.path} has no working tree: run cortex review in a checkout")
    chosen = directory or (Path(os.environ["CORTEX_DIR"]) if os.environ.get("CORTEX_DIR") else None)
    if chosen is not None:
        root = chosen.expanduser().resolve()
    else:
        try:
            root = Store.locate().root.resolve()
        except NotInitialised:
            root = top / STORE_DIRNAME
    try:
        inside = root.relative_to(top).as_posix()
    except ValueError:
        raise CortexError(f"the store {root} is not inside the repository {top}") from None
    return "" if inside == "." else inside


@dataclass
class Target:
    """Where the review comment goes: a GitHub pull request or a GitLab merge request."""

    forge: str  # "GitHub" or "GitLab"
    comments_url: str  # GET (paged) lists the comments, POST adds one
    comment_url: str  # with {id}: where an update goes
    update_method: str
    headers: dict[str, str]
    hint: str  # what to check when the forge refuses
    user_url: str = ""  # GET: who the token posts as


def target(env: Mapping[str, str], number: int | None = None) -> Target:
    """The pull request (GitHub Actions) or merge request (GitLab CI) to comment on; `number` overrides it."""
    if env.get("GITLAB_CI") and not env.get("GITHUB_ACTIONS"):
        return _gitlab(env, number)
    token = env.get("GITHUB_TOKEN", "").strip()
    if not token:
        raise CortexError("--post needs GITHUB_TOKEN (in a workflow: env: GITHUB_TOKEN: ${{ github.token }})")
    repository = env.get("GITHUB_REPOSITORY", "").strip()
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise CortexError(f"--post needs GITHUB_REPOSITORY as owner/name (got {repository!r})")
    if number is None:
        number = _event_number(env.get("GITHUB_EVENT_PATH", ""))
    api = (env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
    return Target("GitHub", f"{api}/repos/{repository}/issues/{number}/comments",
                  f"{api}/repos/{repository}/issues/comments/{{id}}", "PATCH",
                  {"Accept": "application/vnd.github+json", "Authorization": f"Bearer {token}",
                   "X-GitHub-Api-Version": "2022-11-28"},
                  "the workflow needs permissions: pull-requests: write", f"{api}/user")


def _gitlab(env: Mapping[str, str], number: int | None) -> Target:
    token = (env.get("CORTEX_GITLAB_TOKEN") or env.get("GITLAB_TOKEN") or "").strip()
    if not token:
        raise CortexError("--post in GitLab CI needs CORTEX_GITLAB_TOKEN (a token with the api scope, as a masked "
                          "CI/CD variable)")
    api, project = env.get("CI_API_V4_URL", "").rstrip("/"), env.get("CI_PROJECT_ID", "").strip()
    if not api or not project:
        raise CortexError("--post in GitLab CI needs CI_API_V4_URL and CI_PROJECT_ID")
    if number is None:
        iid = env.get("CI_MERGE_REQUEST_IID", "").strip()
        if not iid.isdigit():
            raise CortexError("--post needs a merge request pipeline (CI_MERGE_REQUEST_IID), or give --pr N")
        number = int(iid)
    notes = f"{api}/projects/{project}/merge_requests/{number}/notes"
    return Target("GitLab", notes, f"{notes}/{{id}}", "PUT", {"PRIVATE-TOKEN": token},
                  "CORTEX_GITLAB_TOKEN needs the api scope and at least the Reporter role", f"{api}/user")


def _event_number(path: str) -> int:
    if not path:
        raise CortexError("--post needs the pull request: GITHUB_EVENT_PATH is not set (or give --pr N)")
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CortexError(f"{path}: cannot read the event ({exc})") from None
    for holder in (event.get("pull_request"), event.get("issue"), event) if isinstance(event, dict) else ():
        number = holder.get("number") if isinstance(holder, dict) else None
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    raise CortexError(f"{path}: not a pull request event (no pull_request.number); give --pr N")


class Refused(CortexError):
    """The forge answered with an HTTP error (`code`)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _request(where: Target, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode("utf-8") if body is not None else None
    headers = {**where.headers, "User-Agent": "cortex-review"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        try:
            answer = json.loads(exc.read())
            message = str(answer.get("message", "")) if isinstance(answer, dict) else ""
        except Exception:
            message = ""
        hint = f" ({where.hint})" if exc.code in (401, 403, 404) else ""
        raise Refused(f"{where.forge} refused {method} {url}: HTTP {exc.code} {message}".rstrip() + hint,
                      exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        raise CortexError(f"{method} {url}: {getattr(exc, 'reason', exc)}") from None
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        raise CortexError(f"{method} {url}: the answer is not JSON") from None


ACTIONS_BOT = "github-actions[bot]"  # who a workflow's GITHUB_TOKEN posts as (it may not read GET /user)


def identity(where: Target) -> tuple[str, str]:
    """Who the token posts as: ("login", name) on GitHub (`ACTIONS_BOT` when /user is refused), ("id", n) on GitLab."""
    try:
        user = _request(where, "GET", where.user_url)
    except Refused as exc:
        if where.forge == "GitHub" and exc.code in (403, 404):
            return "login", ACTIONS_BOT
        raise
    if not isinstance(user, dict):
        raise CortexError(f"GET {where.user_url}: expected the token's user")
    if where.forge == "GitLab":
        if not isinstance(user.get("id"), int):
            raise CortexError(f"GET {where.user_url}: the token's user has no id")
        return "id", str(user["id"])
    if not isinstance(user.get("login"), str) or not user["login"]:
        raise CortexError(f"GET {where.user_url}: the token's user has no login")
    return "login", str(user["login"])


def _author(where: Target, comment: dict[str, Any]) -> tuple[str, str]:
    """A comment's author, in `identity`'s terms."""
    if where.forge == "GitLab":
        author = comment.get("author")
        found = author.get("id") if isinstance(author, dict) else None
        return "id", str(found) if isinstance(found, int) and not isinstance(found, bool) else ""
    user = comment.get("user")
    login = user.get("login") if isinstance(user, dict) else None
    return "login", login if isinstance(login, str) else ""


def find_comment(where: Target) -> dict[str, Any] | None:
    """cortex's earlier review comment: starts with `MARKER` and written by the token's own identity; or None."""
    me: tuple[str, str] | None = None  # asked for only when a comment starts with the marker
    for page in range(1, 101):
        url = f"{where.comments_url}?per_page=100&page={page}"
        comments = _request(where, "GET", url)
        if not isinstance(comments, list):
            raise CortexError(f"GET {url}: expected a list of comments")
        for comment in comments:
            if isinstance(comment, dict) and str(comment.get("body") or "").lstrip().startswith(MARKER):
                me = me or identity(where)
                author = _author(where, comment)[1]
                if author and author.casefold() == me[1].casefold():  # GitHub logins ignore case; GitLab ids are digits
                    return comment
        if len(comments) < 100:
            return None
    return None


def post(markdown: str, env: Mapping[str, str], number: int | None = None, empty: bool = False) -> tuple[str, str]:
    """Add the review comment or update the earlier one (an empty review never starts one); (what was done, URL)."""
    where = target(env, number)
    existing = find_comment(where)
    if existing is not None:
        comment_id = existing.get("id")
        if not isinstance(comment_id, int) or isinstance(comment_id, bool):
            raise CortexError("the earlier review comment has no id")
        if existing.get("body") == markdown:
            return "unchanged", str(existing.get("html_url") or "")
        answer = _request(where, where.update_method, where.comment_url.format(id=comment_id), {"body": markdown})
    elif empty:
        return "skipped (nothing to say)", ""
    else:
        answer = _request(where, "POST", where.comments_url, {"body": markdown})
        return "created", str((answer or {}).get("html_url") or "") if isinstance(answer, dict) else ""
    return "updated", str(answer.get("html_url") or "") if isinstance(answer, dict) else ""
