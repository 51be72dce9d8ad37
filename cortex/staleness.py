"""Memories made possibly stale by later commits, from git alone (docs/recall.md, "Stale from git").

A memory that names files (`files:`) was written about those files as they were in the commit that last
changed the memory. When a later commit on the first-parent line deleted such a file, or removed or rewrote
at least half of the lines it had then, the memory is *possibly stale*, with that reason. A memory not yet
committed, or changed since its last commit, is as fresh as the working tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from cortex.files import atomic_write, read_json
from cortex.gitfacts import branch_and_head
from cortex.store import Store

SHARE = 0.5  # a file is changed substantially when at least this share of its lines was removed or rewritten
MIN_LINES = 5  # ... and at least this many, or all of a shorter file's (a two-line file losing one is not news)
MAX_COMMITS = 5000  # how far back the first-parent line is walked for the commit that last changed a memory
CACHE = "stale.json"  # in state/: the answer for one HEAD and one memories tree


def reasons(store: Store, items: list[Any]) -> dict[str, str]:
    """id -> why, for the memories among `items` (objects with `id`, `path`, `files`) made possibly stale by
    commits after their own, as of HEAD (the working tree decides what is uncommitted). The answer kept for
    HEAD is read without pygit2 (what a recall of a few hits costs)."""
    items = [item for item in items if item.files and item.path is not None]
    root = store.worktree
    if not items or root is None:
        return {}
    try:
        workdir = root.resolve()
        rels = {item.id: Path(item.path).resolve().relative_to(workdir).as_posix() for item in items}
        found = _cached(store, branch_and_head(str(root))[1], rels)
        if found is None:
            import pygit2

            repo = pygit2.Repository(str(root))
            if repo.head_is_unborn:
                return {}
            head = repo.head.peel(pygit2.Commit)
            folder = store.memories_dir.resolve().relative_to(workdir).as_posix()
            why = at(repo, head, folder, {item.id: (rels[item.id], list(item.files)) for item in items})
            found = {memory_id: (reason, str(_blob(head.tree, rels[memory_id]).id))
                     for memory_id, reason in why.items()}
            _keep(store, str(head.id), rels, found)
        # a memory edited since its commit was written about the files as they are now
        return {memory_id: why for memory_id, (why, blob) in found.items()
                if _blob_id(workdir / rels[memory_id]) == blob}
    except Exception as exc:  # a broken or shallow repository: nothing is called stale
        store.log(f"staleness: not worked out: {exc!r}")
        return {}


def _blob_id(path: Path) -> str | None:
    """The id git gives the file's content (a blob's sha1), None when it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def mark(stores: list[Store], hits: list[Any]) -> None:
    """Set `stale` on the hits (`cortex.recall.Hit`) of stores in a git working tree that later commits made
    possibly stale."""
    for store in stores:
        mine = [hit for hit in hits if hit.store == store.label and hit.memory.files]
        if mine:
            found = reasons(store, [hit.memory for hit in mine])
            for hit in mine:
                hit.stale = found.get(hit.memory.id)


def at(repo: Any, head: Any, folder: str, wanted: dict[str, tuple[str, list[str]]]) -> dict[str, str]:
    """id -> why, as of the commit `head`, for the memories `wanted` (id -> (path in the repository, files)) under
    `folder` (the memories folder, relative to the repository)."""
    base = _last_commits(repo, head, folder, {rel for rel, _files in wanted.values()})
    out: dict[str, str] = {}
    for memory_id, (rel, files) in sorted(wanted.items()):
        commit = base.get(rel)
        if commit is None:
            continue  # not committed as of `head`
        for name in files:
            then, now = _blob(commit.tree, name), _blob(head.tree, name)
            if then is None or (now is not None and now.id == then.id):
                continue  # not there when written (a file to come), or unchanged
            short = str(commit.id)[:7]
            if now is None:
                out[memory_id] = f"{name} deleted since {short}"
                break
            if then.is_binary or now.is_binary:
                continue
            lines = then.data.count(b"\n") + (not then.data.endswith(b"\n") and bool(then.data))
            removed = repo.diff(then, now).line_stats[2]
            if removed >= min(MIN_LINES, lines) and removed >= SHARE * lines:
                out[memory_id] = f"{name} changed ({removed} of {lines} lines) since {short}"
                break
    return out


def _last_commits(repo: Any, head: Any, folder: str, rels: set[str]) -> dict[str, Any]:
    """The newest commit on `head`'s first-parent line that changed each memory file (or its first commit): the
    memories folder's trees are compared, and diffed only where they differ."""
    out: dict[str, Any] = {}
    todo = {rel for rel in rels if _blob(head.tree, rel) is not None}
    commit = head
    for _ in range(MAX_COMMITS):
        if not todo:
            break
        parent = commit.parents[0] if commit.parents else None
        mine = _tree(commit.tree, folder)
        theirs = _tree(parent.tree, folder) if parent is not None else None
        if theirs is None or mine is None:
            changed = set(todo)  # the folder came (or went) with this commit
        elif theirs.id == mine.id:
            changed = set()
        else:
            changed = {f"{folder}/{path}" for delta in theirs.diff_to_tree(mine).deltas
                       for path in (delta.old_file.path, delta.new_file.path)}
        for rel in todo & changed:
            out[rel] = commit
        todo -= changed
        if parent is None:
            break
        commit = parent
    return out


def _tree(tree: Any, name: str) -> Any:
    """The folder at `name` in `tree`, None when there is none."""
    import pygit2

    return _entry(tree, name, pygit2.Tree)


def _blob(tree: Any, name: str) -> Any:
    """The blob at `name` in `tree`, None when there is none (or it is a folder)."""
    import pygit2

    return _entry(tree, name, pygit2.Blob)


def _entry(tree: Any, name: str, kind: type) -> Any:
    try:
        found = tree[name]
    except (KeyError, ValueError):
        return None
    return found if isinstance(found, kind) else None


def _cached(store: Store, head: str | None, rels: dict[str, str]) -> dict[str, tuple[str, str]] | None:
    """The kept answer for `head` (id -> (why, the memory file's blob then)), when it covers every one asked."""
    data = read_json(store.state_dir / CACHE, {})
    if head is None or data.get("head") != head or not set(rels) <= set(data.get("checked", [])):
        return None
    return {memory_id: (why, blob) for memory_id, (why, blob) in data.get("reasons", {}).items() if memory_id in rels}


def _keep(store: Store, head: str, rels: dict[str, str], found: dict[str, tuple[str, str]]) -> None:
    """Keep the answer for this HEAD, with what an earlier call for it found."""
    data = read_json(store.state_dir / CACHE, {})
    if data.get("head") != head:
        data = {}
    checked = sorted(set(data.get("checked", [])) | set(rels))
    kept = {**data.get("reasons", {}), **found}
    with contextlib.suppress(OSError):
        store.state_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(store.state_dir / CACHE, json.dumps({"head": head, "checked": checked, "reasons": kept}))
