"""Git facts cortex needs, through pygit2, imported inside each function (a hook cannot afford the import).

The lean readers a hook uses are `cortex.gitfacts`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterable, NamedTuple


def find_worktree_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds `.git` (a dir or a worktree file)."""
    from cortex.gitfacts import worktree_root

    found = worktree_root(str(start))
    return Path(found) if found is not None else None


def head_commit(worktree_root: Path | None) -> str | None:
    """The HEAD commit id (hex) from the ref files; None outside git or before the first commit."""
    from cortex.gitfacts import branch_and_head

    return branch_and_head(str(worktree_root) if worktree_root is not None else None)[1]


HOOK_MARK = "# cortex-managed hook"
HOOK_NAMES = ("pre-push", "post-merge", "post-checkout", "post-rewrite")
CHAINED_SUFFIX = ".pre-cortex"
MERGE_DRIVER = "cortex-projection"  # the custom driver of older versions: its config is removed, its attributes replaced


def scrubbed_git_env() -> None:
    """From inside a git hook: forget the hook's GIT_DIR/GIT_INDEX_FILE/GIT_WORK_TREE before opening repositories."""
    for name in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE", "GIT_PREFIX"):
        os.environ.pop(name, None)


def open_repository(start: Path) -> Any:
    """The pygit2 repository containing `start`; raises NotARepository."""
    import pygit2

    from cortex.errors import NotARepository

    found = pygit2.discover_repository(str(start))
    if found is None:
        raise NotARepository(f"{start} is not inside a git repository")
    return pygit2.Repository(found)


def hooks_dir(repo: Any) -> Path:
    """core.hooksPath when set (relative to the worktree), else <common dir>/hooks (shared by every worktree)."""
    from cortex.gitfacts import common_dir

    common = Path(common_dir(repo.path)).resolve()
    try:
        configured = repo.config["core.hooksPath"]
    except KeyError:
        return common / "hooks"
    path = Path(configured).expanduser()
    return path if path.is_absolute() else Path(repo.workdir or common) / path


_HOOK_SCRIPT = """#!/bin/sh
{mark}: installed by `cortex init --git-hooks`, removed by `cortex uninstall --git-hooks`.
# A hook that was here before is kept as {chained} and runs first.
HOOK_DIR=$(dirname "$0")
{read}if [ -x "$HOOK_DIR/{chained}" ]; then
    {pipe}"$HOOK_DIR/{chained}" "$@" || exit $?
fi
if [ -x "{python}" ] && [ -f "{package}" ]; then
    CORTEX="{python} -m cortex"
elif command -v cortex >/dev/null 2>&1; then
    CORTEX="cortex"
else
    echo "cortex: not installed any more; skipping its {name} hook (reinstall cortex, or run: cortex uninstall --git-hooks)" >&2
    exit 0
fi
{pipe}$CORTEX hook git-{name} "$@"
"""


def _hook_script(name: str, python: str) -> str:
    """The hook: the chained one first, then cortex, found by a file test (no second Python start per hook)."""
    import cortex  # its __file__: where this interpreter imports cortex from, gone once it is uninstalled

    stdin = name == "pre-push"
    return _HOOK_SCRIPT.format(mark=HOOK_MARK, name=name, chained=f"{name}{CHAINED_SUFFIX}", python=python,
                               package=cortex.__file__, read="INPUT=$(cat)\n" if stdin else "",
                               pipe="printf '%s\\n' \"$INPUT\" | " if stdin else "")


def is_cortex_hook(path: Path) -> bool:
    try:
        return HOOK_MARK in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def install_git_hooks(start: Path, python: str | None = None) -> list[str]:
    """Install cortex's git hooks (and the pages' union attributes); returns what was done, a line each."""
    from cortex.files import atomic_write

    repo = open_repository(start)
    folder = hooks_dir(repo)
    folder.mkdir(parents=True, exist_ok=True)
    python = python or sys.executable
    done = []
    for name in HOOK_NAMES:
        path = folder / name
        if path.exists() and not is_cortex_hook(path):
            chained = folder / f"{name}{CHAINED_SUFFIX}"
            if not chained.exists():
                os.replace(path, chained)
                done.append(f"kept your existing {name} hook as {chained.name}; it still runs first")
        atomic_write(path, _hook_script(name, python))
        path.chmod(0o755)
        done.append(f"installed {path}")
    _drop_merge_driver(repo)
    workdir = Path(repo.workdir) if repo.workdir else None  # type: ignore[attr-defined]
    if workdir is not None and (workdir / ".cortex").is_dir():
        done += union_attributes(workdir / ".cortex")
    return done


def _drop_merge_driver(repo: Any) -> None:
    """An older version's merge driver configuration, removed (its attributes are replaced by `union_attributes`)."""
    for key in (f"merge.{MERGE_DRIVER}.name", f"merge.{MERGE_DRIVER}.driver"):
        with contextlib.suppress(KeyError):
            del repo.config[key]


def union_attributes(store_root: Path) -> list[str]:
    """`.cortex/.gitattributes` naming git's built-in union driver for the pages; returns what was done."""
    from cortex.files import atomic_write
    from cortex.store import GITATTRIBUTES

    attributes = store_root / ".gitattributes"
    current = attributes.read_text(encoding="utf-8") if attributes.exists() else ""
    if "merge=union" in current:
        return []
    kept = "".join(line for line in current.splitlines(keepends=True)
                   if f"merge={MERGE_DRIVER}" not in line and "cortex: projections merge" not in line)
    atomic_write(attributes, kept + ("\n" if kept and not kept.endswith("\n") else "") + GITATTRIBUTES)
    return [f"wrote {attributes} (commit it: every clone, and a host's merge button, then merges the pages)"]


def uninstall_git_hooks(start: Path) -> list[str]:
    """Remove only cortex's hooks (restoring a chained one) and an older version's merge driver config."""
    repo = open_repository(start)
    folder = hooks_dir(repo)
    done = []
    for name in HOOK_NAMES:
        path = folder / name
        if path.exists() and is_cortex_hook(path):
            path.unlink()
            done.append(f"removed {path}")
            chained = folder / f"{name}{CHAINED_SUFFIX}"
            if chained.exists():
                os.replace(chained, path)
                done.append(f"restored your {name} hook")
    _drop_merge_driver(repo)
    return done or ["no cortex git hooks were installed"]


def write_index(repo: Any, index: Any = None, seconds: float = 5.0) -> None:
    """Write `index` (default `repo.index`), waiting up to `seconds` while another git process holds `index.lock`."""
    import pygit2

    index = repo.index if index is None else index
    deadline = time.monotonic() + seconds
    while True:
        try:
            index.write()
            return
        except pygit2.GitError as exc:
            if "locked" not in str(exc):
                raise
            if time.monotonic() > deadline:
                from cortex.errors import CortexError

                raise CortexError(f"{Path(repo.path) / 'index.lock'}: held by another git process for "
                                  f"{seconds:.0f} s; if none runs, remove it") from exc
            time.sleep(0.02)


def signature(repo: Any, role: str) -> Any:
    """Who commits, as git decides: GIT_<ROLE>_NAME/EMAIL, then user.name/email, then a stand-in."""
    import pygit2

    found = {}
    for key, fallback in (("name", "cortex"), ("email", "cortex@localhost")):
        value = os.environ.get(f"GIT_{role}_{key.upper()}")
        if not value:
            try:
                value = repo.config[f"user.{key}"]
            except KeyError:
                value = fallback
        found[key] = value
    return pygit2.Signature(found["name"], found["email"])


FIELDS = ("title", "type", "status", "confidence", "priority", "pinned", "tags", "files", "links", "body")


def parse_blob(data: bytes) -> Any:
    """A memory file's bytes from git as a `Memory`; None when they do not parse."""
    from cortex import memory as fmt

    try:
        return fmt.parse(data.decode("utf-8"))
    except Exception:
        return None


def changed_fields(old: Any, new: Any) -> list[str]:
    """The `FIELDS` two versions of a memory differ in."""
    return [key for key in FIELDS if getattr(old, key) != getattr(new, key)]


def memory_blobs_at(repo: Any, commit: Any, prefix: str) -> dict[str, tuple[str, Any]]:
    """id -> (path, blob id) of every memory file under `prefix` (e.g. '.cortex/memories') in a commit."""
    out: dict[str, tuple[str, Any]] = {}
    try:
        node = commit.tree[prefix] if prefix else commit.tree
    except KeyError:
        return out
    stack = [(prefix, repo[node.id])]
    while stack:
        base, subtree = stack.pop()
        for entry in subtree:
            if entry.name in (".", "..") or "/" in entry.name or "\\" in entry.name:
                continue  # a crafted tree's name git refuses to check out: `--at` would write out of its folder
            path = f"{base}/{entry.name}" if base else entry.name
            if entry.type_str == "tree":
                stack.append((path, repo[entry.id]))
            elif entry.name.endswith(".md"):
                match = re.search(r"-([0-9a-f]{12})\.md$", entry.name)
                # a renamed file: the id inside decides
                found = match.group(1) if match else getattr(parse_blob(repo[entry.id].data), "id", None)
                if found:
                    out[found] = (path, entry.id)
    return out


def store_prefix(repo: Any, store_root: Path) -> str:
    """The store's memories folder as a path inside the repository ('.cortex/memories')."""
    return (store_root / "memories").resolve().relative_to(Path(repo.workdir).resolve()).as_posix()


def resolve(repo: Any, rev: str) -> Any:
    import pygit2

    from cortex.errors import CortexError

    try:
        return repo.revparse_single(rev).peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        raise CortexError(f"unknown revision {rev!r}") from None


def memories_at(repo: Any, rev: str, prefix: str) -> dict[str, tuple[str, bytes]]:
    """id -> (path, file bytes) of every memory at a revision, read from git objects (no checkout)."""
    blobs = memory_blobs_at(repo, resolve(repo, rev), prefix)
    return {mid: (path, repo[oid].data) for mid, (path, oid) in blobs.items()}


def memory_log(repo: Any, memory_id: str, prefix: str, limit: int = 0) -> list[dict[str, Any]]:
    """The commits that changed one memory, newest first, following renames (by id)."""
    import pygit2

    entries: list[dict[str, Any]] = []
    if repo.head_is_unborn:
        return entries
    walker = repo.walk(repo.head.target, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME)
    for commit in walker:
        mine = memory_blobs_at(repo, commit, prefix).get(memory_id)
        parent = commit.parents[0] if commit.parents else None
        before = memory_blobs_at(repo, parent, prefix).get(memory_id) if parent is not None else None
        if mine == before:
            continue
        change = "added" if before is None else "removed from the working tree" if mine is None else "changed"
        fields: list[str] = []
        if mine is not None and before is not None:
            if mine[0] != before[0]:
                fields.append(f"moved from {before[0]}")
            new, old = parse_blob(repo[mine[1]].data), parse_blob(repo[before[1]].data)
            if new is None or old is None:
                fields.append("(unparsable version)")
            else:
                fields += [key if key == "body" else f"{key}: {getattr(old, key)!r} -> {getattr(new, key)!r}"
                           for key in changed_fields(old, new)]
        when = dt.datetime.fromtimestamp(commit.commit_time, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        entries.append({
            "commit": str(commit.id), "author": f"{commit.author.name} <{commit.author.email}>", "date": when,
            "message": commit.message.strip().splitlines()[0] if commit.message.strip() else "",
            "change": change, "path": (mine or before)[0], "details": fields,  # type: ignore[index]
        })
        if limit and len(entries) >= limit:
            break
    return entries


def memory_diff(repo: Any, old_rev: str, new_rev: str, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Memories added, changed, archived, superseded and removed between two revisions, by kind of change."""
    old = memories_at(repo, old_rev, prefix)
    new = memories_at(repo, new_rev, prefix)
    result: dict[str, list[dict[str, Any]]] = {"added": [], "changed": [], "archived": [], "superseded": [], "removed": []}
    for mid in sorted(set(old) | set(new)):
        if mid in old and mid in new and old[mid][1] == new[mid][1]:
            continue
        before = parse_blob(old[mid][1]) if mid in old else None
        after = parse_blob(new[mid][1]) if mid in new else None
        item = after or before
        row = {"id": mid, "type": item.type if item else "?", "title": item.title if item else "(unparsable)",
               "path": (new.get(mid) or old[mid])[0]}
        if mid not in old:
            result["added"].append(row)
        elif mid not in new:
            result["removed"].append(row)
        elif after is not None and before is not None and after.status != before.status and after.status in ("archived", "superseded"):
            result[after.status].append(row)
        else:
            row["fields"] = list(FIELDS) if before is None or after is None else changed_fields(before, after)
            result["changed"].append(row)
    return result


class PathChange(NamedTuple):
    """One path a change between two commits touches: status 'A', 'M', 'D', 'R' (renamed), 'T' (type)."""

    status: str
    old_path: str
    new_path: str


def path_changes(repo: Any, old: Any, new: Any) -> list[PathChange]:
    """Every file that differs between two commits' trees, renames found as git finds them (50% alike)."""
    diff = repo.diff(old, new)
    diff.find_similar()
    return [PathChange(delta.status_char(), delta.old_file.path, delta.new_file.path) for delta in diff.deltas]


def path_at(repo: Any, commit: Any, path: str) -> bool:
    """Whether `path` (a file or a folder) is in `commit`'s tree."""
    try:
        commit.tree[path.strip("/")]
    except (KeyError, ValueError):
        return False
    return bool(path.strip("/"))


def blob_at(repo: Any, commit: Any, path: str) -> bytes | None:
    """A file's bytes in `commit`, or None when it is not there (or is a folder)."""
    try:
        entry = commit.tree[path]
    except KeyError:
        return None
    return repo[entry.id].data if entry.type_str == "blob" else None


def materialize_at(store_root: Path, rev: str) -> Path:
    """The store's memories as of `rev`, written once from git objects under `cache/at/<commit>/`; that folder."""
    from cortex.files import atomic_write

    repo = open_repository(store_root.parent)
    commit = resolve(repo, rev)
    target = store_root / "cache" / "at" / str(commit.id)
    done = target / ".complete"
    if done.exists():
        return target
    prefix = store_prefix(repo, store_root)
    for _mid, (path, data) in memories_at(repo, str(commit.id), prefix).items():
        atomic_write(target / "memories" / Path(path).relative_to(prefix), data, durable=False)
    config = blob_at(repo, commit, f"{Path(prefix).parent.as_posix()}/config.yaml")
    if config is not None:
        atomic_write(target / "config.yaml", config, durable=False)
    (target / "memories").mkdir(parents=True, exist_ok=True)
    done.touch()
    return target


ZERO_SHA = "0" * 40


class PushedFile(NamedTuple):
    """A file a push adds to the remote's history: the first pushed commit that added or changed it."""

    commit: str  # full hex sha
    path: str  # inside the repository, e.g. '.cortex/memories/context/x-3f9a1c07d2e4.md'
    data: bytes


def _pushed_commit(repo: Any, sha: str) -> Any:
    """The commit `sha` names (an annotated tag peeled), or None when this repository does not have one."""
    import pygit2

    try:
        return repo[sha].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def remote_tracking_tips(repo: Any, remote: str) -> list[Any]:
    """The commits `refs/remotes/<remote>/*` point at: what this clone knows the remote already has."""
    import pygit2

    prefix = f"refs/remotes/{remote}/"
    tips = []
    for name in repo.references:
        if remote and name.startswith(prefix):
            try:
                commit = _pushed_commit(repo, str(repo.references[name].resolve().target))
            except (KeyError, ValueError, pygit2.GitError):
                continue  # a dangling symbolic ref (origin/HEAD to a deleted branch)
            if commit is not None:
                tips.append(commit.id)
    return tips


def _subtree(repo: Any, tree: Any, prefix: str) -> Any:
    if not prefix:
        return tree
    try:
        entry = tree[prefix]
    except KeyError:
        return None
    return repo[entry.id] if entry.type_str == "tree" else None


def _added_under(repo: Any, commit: Any, prefix: str) -> list[tuple[str, Any]]:
    """(path, blob id) of each blob under `prefix` that `commit` adds or changes; a merge only its own changes."""
    import pygit2

    sub = _subtree(repo, commit.tree, prefix)
    if sub is None:
        return []
    parents = commit.parents
    parent_subs = [_subtree(repo, parent.tree, prefix) for parent in parents]
    if any(old is not None and old.id == sub.id for old in parent_subs):
        return []  # nothing under the prefix changed: the usual commit
    first = parent_subs[0] if parent_subs else None
    diff = first.diff_to_tree(sub) if first is not None else sub.diff_to_tree(swap=True)
    blob_modes = (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE)
    found = []
    for delta in diff.deltas:
        if delta.status_char() not in ("A", "M", "T", "R", "C") or delta.new_file.mode not in blob_modes:
            continue
        path = f"{prefix}/{delta.new_file.path}" if prefix else delta.new_file.path
        if not any(path in parent.tree and parent.tree[path].id == delta.new_file.id for parent in parents[1:]):
            found.append((path, delta.new_file.id))
    return found


def pushed_changes(repo: Any, push_lines: str, prefix: str, remote: str = "") -> list[PushedFile]:
    """Every file under `prefix` that a push adds to the remote's history (every new commit read), each blob once."""
    import pygit2

    out: list[PushedFile] = []
    known: list[Any] | None = None
    seen_commits: set[Any] = set()
    seen_blobs: set[Any] = set()
    for line in push_lines.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[1] == ZERO_SHA:
            continue
        _local_ref, local_sha, _remote_ref, remote_sha = parts
        tip = _pushed_commit(repo, local_sha)
        if tip is None:
            continue
        if known is None:
            known = remote_tracking_tips(repo, remote)
        hide = list(known)
        base = _pushed_commit(repo, remote_sha) if remote_sha != ZERO_SHA else None
        if base is not None:
            hide.append(base.id)
        # Nothing known of the remote (a new branch, a remote never fetched): every reachable commit is scanned.
        walker = repo.walk(tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        for oid in hide:
            walker.hide(oid)
        for commit in walker:
            if commit.id in seen_commits:
                continue
            seen_commits.add(commit.id)
            for path, blob_id in _added_under(repo, commit, prefix):
                if blob_id not in seen_blobs:
                    seen_blobs.add(blob_id)
                    out.append(PushedFile(str(commit.id), path, repo[blob_id].data))
    return out


def record_cortex_changes(store_root: Path, policy: str = "stage", paths: Iterable[Path] | None = None) -> list[str]:
    """Stage the new and changed `.cortex/` files (`git.on_stop`: `stage`, `off`; the old `commit` means `stage`)."""
    from cortex.files import file_lock

    with file_lock(store_root / "state" / "stage.lock"):  # git's own `index.lock` is waited for by `write_index`
        return _record(store_root, policy, paths)


def _record(store_root: Path, policy: str, only: Iterable[Path] | None = None) -> list[str]:
    import pygit2

    from cortex.files import is_temp_name

    if policy == "off":
        return []
    repo = open_repository(store_root.parent)
    workdir = Path(repo.workdir).resolve()
    prefix = store_root.resolve().relative_to(workdir).as_posix() + "/"
    changed = (pygit2.enums.FileStatus.WT_NEW | pygit2.enums.FileStatus.WT_MODIFIED | pygit2.enums.FileStatus.WT_DELETED
               | pygit2.enums.FileStatus.WT_RENAMED | pygit2.enums.FileStatus.WT_TYPECHANGE)
    wanted = None if only is None else {relative(p, workdir) for p in only}
    paths = sorted(path for path, flags in repo.status().items()
                   if (path.startswith(prefix) if wanted is None else path in wanted)
                   and not flags & pygit2.enums.FileStatus.IGNORED and flags & changed
                   and not is_temp_name(path.rsplit("/", 1)[-1]))
    if not paths:
        return []
    index = repo.index
    recorded = []
    for path in paths:
        try:
            if (workdir / path).is_file():
                index.add(path)
            elif path in index:
                index.remove(path)
            else:
                continue  # new, then gone again (another writer's file): nothing to record
        except (OSError, pygit2.GitError):  # it vanished between the check and the add (libgit2 says GitError)
            if path not in index:
                continue
            index.remove(path)
        recorded.append(path)
    write_index(repo, index)
    return recorded


def relative(path: Path, root: Path) -> str | None:
    """`path` inside `root`, links resolved, as a posix path; None outside it (never staged or committed)."""
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


def tracked(root: Path | str, names: list[str]) -> set[str]:
    """Those of `names` (paths relative to the worktree `root`) that git tracks (in the index); none outside git."""
    import pygit2

    try:
        index = pygit2.Repository(str(root)).index
    except (pygit2.GitError, KeyError, OSError):
        return set()
    return {name for name in names if name in index}
