"""Lifecycle (`cortex gc`): archive what has faded or landed, remove what stayed archived, drop dangling links.

Decay is computed at read time; what gc writes depends on tracked files and history alone (`archived:` is the
day a memory became due), and only a file whose exact bytes are in HEAD is removed. docs/graph.md.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cortex.files import atomic_write
from cortex.gitfacts import default_branch, path_inside
from cortex.guard import scan_text
from cortex.memory import epoch, iso
from cortex.memory import now_epoch as now
from cortex.store import Store

DAY = 86400.0


@dataclass
class Action:
    kind: str  # archive | remove | keep | unlink
    id: str
    title: str
    path: Path
    reason: str
    stamp: float = 0.0  # an archive's `archived:` time, a function of the memory and history (never the clock)
    gone: tuple[str, ...] = ()  # unlink: the ids its links name that no memory file has

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.kind, "id": self.id, "title": self.title, "path": str(self.path), "reason": self.reason}


HALF_LIVES = {"progress": 7.0, "context": 30.0, "gotcha": 45.0, "pattern": 60.0}  # days; other types never decay


def half_life(memory: Any, access: int, centrality: float) -> float | None:
    """Days to halve this memory's confidence (twice as many when read often or central), or None."""
    base = HALF_LIVES.get(memory.type)
    if base is None or memory.pinned:
        return None
    return base * 2 if access > 10 or centrality > 0.5 else base


def decayed_confidence(memory: Any, now: float, access: int = 0, centrality: float = 0.0) -> float:
    """`confidence × 0.5^(days since updated / half_life)`, computed at read time (never written back)."""
    life = half_life(memory, access, centrality)
    if life is None:
        return float(memory.confidence)
    days = max(0.0, (now - epoch(memory.updated or memory.created)) / DAY)
    return float(memory.confidence) * 0.5 ** (days / life)


def below_since(memory: Any, threshold: float, access: int, centrality: float) -> float | None:
    """The moment the decayed confidence went (or will go) under `threshold`; None if it never does."""
    life = half_life(memory, access, centrality)
    if life is None or threshold <= 0:
        return None
    start = epoch(memory.updated or memory.created)
    if memory.confidence < threshold:
        return start
    return start + life * math.log2(memory.confidence / threshold) * DAY


def _merged_branches(store: Store) -> tuple[Any, Any, str | None]:
    """(repo, default branch tip, default branch name), or Nones outside git."""
    if store.worktree is None:
        return None, None, None
    name = default_branch(str(store.worktree))
    if name is None:
        return None, None, None
    try:
        import pygit2

        repo = pygit2.Repository(str(store.worktree))
        return repo, repo.branches.local[name].peel(pygit2.Commit).id, name
    except Exception:
        return None, None, None


def _is_merged(repo: Any, default_tip: Any, branch: str, commit: str | None, created: float, path: Path
               ) -> float | None:
    """The commit time of the branch's tip when it is in the default branch and holds the memory's file (or is
    the branch's own, made after it); None otherwise."""
    import pygit2

    try:
        ref = repo.branches.local.get(branch)
        if ref is not None:
            tip = ref.peel(pygit2.Commit)
        elif commit:
            tip = repo.revparse_single(commit).peel(pygit2.Commit)
        else:
            return None
        if not (tip.id == default_tip or repo.descendant_of(default_tip, tip.id)):
            return None
        try:
            tip.tree[path.resolve().relative_to(Path(repo.workdir).resolve()).as_posix()]
            return float(tip.commit_time)  # the work and its memory were committed on the branch, and that is in main
        except (KeyError, ValueError):  # a tip that is main's own (a fast-forwarded branch) is no landed work
            landed = tip.id != default_tip and tip.commit_time > created
            return float(tip.commit_time) if landed else None
    except Exception:
        return None


def _committed_as_is(repo: Any, path: Path) -> bool:
    """True when HEAD holds exactly this file's bytes (so removing it loses nothing)."""
    try:
        rel = path.resolve().relative_to(Path(repo.workdir).resolve()).as_posix()
        blob = repo.revparse_single("HEAD").peel(1).tree[rel]
        return bool(blob.data == path.read_bytes())
    except Exception:
        return False


def plan(store: Store, at: float | None = None) -> list[Action]:
    """What gc would do now."""
    from cortex.index import Index

    at = now() if at is None else at
    config = store.config()
    below = float(config.get("gc.archive_below"))
    archive_after = float(config.get("gc.archive_after_days")) * DAY
    remove_after = float(config.get("gc.remove_after_days")) * DAY
    index = Index(store)
    index.sync(full=False, progress=False)
    central = index.centralities()
    repo, default_tip, default = _merged_branches(store)
    actions = []
    memories = sorted(index.scan().memories, key=lambda m: m.id)
    there = {item.id for item in memories} | store.ids_on_disk()  # names too: a malformed file's id is there
    for item in memories:
        assert item.path is not None
        gone = tuple(sorted({link.to for link in item.links if link.to not in there}))
        if gone:
            actions.append(Action("unlink", item.id, item.title, item.path,
                                  f"its links to {', '.join(gone)}: no such memory any more", gone=gone))
        if item.status == "active":
            if item.pinned:
                continue
            crossed = below_since(item, below, 0, central.get(item.id, 0.0))  # reads rank, never archive
            if crossed is not None and at - crossed >= archive_after:
                days = (at - crossed) / DAY
                actions.append(Action("archive", item.id, item.title, item.path,
                                      f"confidence under {below:g} for {days:.0f} days", crossed + archive_after))
                continue
            landed = None
            if item.type == "progress" and repo is not None and item.branch and item.branch != default:
                landed = _is_merged(repo, default_tip, item.branch, str(item.source.get("commit") or "") or None,
                                    epoch(item.created), item.path)
            if landed is not None:
                actions.append(Action("archive", item.id, item.title, item.path,
                                      f"branch {item.branch} is merged into {default}", landed))
        elif item.status == "archived":
            touched = max(epoch(str(item.extra.get("archived") or "")), epoch(item.updated))
            if at - touched < remove_after:
                continue
            days = (at - touched) / DAY
            if repo is not None and _committed_as_is(repo, item.path):
                actions.append(Action("remove", item.id, item.title, item.path,
                                      f"archived and untouched for {days:.0f} days (git history keeps it)"))
            else:
                actions.append(Action("keep", item.id, item.title, item.path,
                                      f"archived and untouched for {days:.0f} days, but not committed as is: kept"))
    return actions


def gc(store: Store, at: float | None = None, dry_run: bool = False) -> list[Action]:
    """Apply the plan (unless `dry_run`); returns the actions."""
    at = now() if at is None else at
    actions = plan(store, at)
    if dry_run:
        return actions
    repo = _merged_branches(store)[0] if any(a.kind == "remove" for a in actions) else None
    done = []
    with store.lock():  # the plan was made unlocked: each action is checked against the file again
        for action in actions:
            try:
                current = store.read(action.path)
            except Exception:
                continue  # gone or broken since the plan: leave it
            if current.id != action.id:
                continue
            if action.kind == "unlink":
                there = store.ids_on_disk()
                gone = set(action.gone) - there
                if gone and store.drop_links(action.id, lambda link: link.to in gone, action.path):
                    done.append(action)
            elif action.kind == "archive" and current.status == "active":
                store.update(action.id, {"status": "archived", "archived": iso(action.stamp)}, touch=False,
                             path=action.path)
                done.append(action)
            elif action.kind == "remove" and current.status == "archived" and repo is not None \
                    and _committed_as_is(repo, action.path):
                action.path.unlink(missing_ok=True)
                store.mark_changed()
                done.append(action)
    if done:
        store.log(f"gc: archived {sum(a.kind == 'archive' for a in done)}, removed {sum(a.kind == 'remove' for a in done)}"
                  f", dropped dangling links from {sum(a.kind == 'unlink' for a in done)}")
    return [a for a in actions if a.kind == "keep" or a in done]


def daily(store: Store) -> list[Action] | None:
    """gc at most once a day (what `cortex maintain` runs after capture); None when it ran recently."""
    if not gc_due(store):
        return None
    at = now()
    actions = gc(store, at)
    atomic_write(store.state_dir / "gc.stamp", str(at), durable=False)
    return actions


def gc_due(store: Store) -> bool:
    """Whether the day's gc has not run yet (`state/gc.stamp`; a stamp from the future, a fixed clock, is stale)."""
    try:
        return not 0 <= now() - float((store.state_dir / "gc.stamp").read_text(encoding="utf-8")) < DAY
    except (OSError, ValueError):
        return True


# `key: value` or `key = value` in a code span; in prose only KEY=, dotted.key= or snake_key= (a plain word is not).
_CODE_SPAN = re.compile(r"`([^`\n]{1,160})`")
_SPAN_SETTING = re.compile(r"^\s*([A-Za-z_][\w.-]{0,80})\s*(?:=|:)\s*(\S.*?)\s*$")
_PROSE_SETTING = re.compile(r"(?<![\w.`])([A-Z][A-Z0-9_]{2,80}|[a-z][a-z0-9_]*\.[a-z0-9_.]+|[a-z]+_[a-z0-9_]+)=([^\s,;`'\"]+)")
_VALUE = r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;#)}\]]+)"
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".env", ".json", ".properties")
MAX_SETTINGS = 10
MAX_CONFIG_BYTES = 262_144


def _plain_value(value: str) -> str:
    value = value.strip().rstrip(",;").strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value.strip().lower()


def named_settings(text: str) -> list[tuple[str, str]]:
    """The (key, value) settings a memory's text names (see `_SPAN_SETTING`, `_PROSE_SETTING`), at most 10."""
    found: dict[str, str] = {}
    for span in _CODE_SPAN.findall(text):
        match = _SPAN_SETTING.match(span)
        if match and not match.group(2).startswith(("=", ":", "/")):
            found.setdefault(match.group(1), _plain_value(match.group(2)))
    for key, value in _PROSE_SETTING.findall(_CODE_SPAN.sub(" ", text)):
        found.setdefault(key, _plain_value(value))
    return [(key, value) for key, value in found.items() if value][:MAX_SETTINGS]


def setting_drift(memory: Any, root: Path) -> str | None:
    """How the settings the memory names differ from its `files:` now ("`key` is 5 in app.yaml, not 3"), or None.
    A dotted key is looked for by its last part (`limit:` under `recall:` in YAML)."""
    present = [name for name in present_files(memory.files, root) if (root / name).is_file()]
    if not present:
        return None
    from cortex.gitops import tracked

    present = [name for name in present if name in tracked(root, present)]  # an untracked file is not read
    if not present:
        return None
    body = memory.body
    if not body and memory.path is not None:  # read from the cache's manifest: the body is not loaded
        from cortex.index.cache import read_body

        body = read_body(memory.path)
    settings = named_settings(f"{memory.title}\n{memory.summary}\n{body}")
    if not settings:
        return None
    texts = {}
    for name in present:
        path = root / name
        try:
            if path.stat().st_size <= MAX_CONFIG_BYTES:
                texts[name] = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    for key, claimed in settings:
        last = key.rsplit(".", 1)[-1]
        pattern = re.compile(r"(?<![\w.-])[\"']?" + re.escape(last) + r"[\"']?\s*[:=]\s*" + _VALUE)
        values = {name: [_plain_value(v) for v in pattern.findall(text)] for name, text in texts.items()}
        if any(claimed in found for found in values.values()):
            continue
        for name, found in sorted(values.items()):
            if found:
                if _secret_looking(last, found[0]) or _secret_looking(last, claimed):
                    return f"`{last}` in {name} holds another value (not shown: it looks like a secret)"
                return f"`{last}` is {found[0]} in {name}, not {claimed}"
        config_files = sorted(name for name in texts if name.endswith(CONFIG_SUFFIXES))
        if config_files:
            return f"`{last}` is no longer in {config_files[0]}"
    return None


def _secret_looking(key: str, value: str) -> bool:
    """Whether `key=value` reads as a secret (cortex.guard's rule): its value is named, never printed."""
    return bool(scan_text(f"{key}={value}")) or bool(scan_text(value))


def present_files(names: list[str], root: Path) -> list[str]:
    """A memory's `files:` that exist inside `root`, relative; none that climbs out or passes a symlink."""
    out = []
    for name in names:
        inside = path_inside(root, name)
        if inside is not None and os.path.exists(inside):
            out.append(os.path.relpath(inside, root).replace(os.sep, "/"))
    return out


KEEP_ALWAYS = (".lock", ".sock", "watch.ready")  # held by live processes (a running serve, watch or hook)
KEEP_UNLESS_HARD = ("cursors", "queue")  # how far each transcript was read, and LLM work not done yet


def reset(store: Store, hard: bool = False) -> list[Path]:
    """Remove the store's cache and local state (not the locks and socket live processes hold, nor, unless
    `hard`, the cursors and the LLM queue); returns what was removed."""
    removed: list[Path] = []
    with store.lock():
        for folder, keep in ((store.cache_dir, ()), (store.state_dir, () if hard else KEEP_UNLESS_HARD)):
            try:
                entries = sorted(folder.iterdir())
            except OSError:
                continue
            for entry in entries:
                if entry.name.endswith(KEEP_ALWAYS) or entry.name in keep:
                    continue
                try:
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
                except OSError:
                    continue
                removed.append(entry)
    return removed
