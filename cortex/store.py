"""The store: memory files on disk, for a project (`.cortex/`) or globally (`$CORTEX_HOME`).

Readers never write tracked files; writers hold `state/write.lock` and replace files atomically. docs/store.md.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import stat as _stat
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from cortex import memory as fmt
from cortex.errors import AmbiguousId, CortexError, MalformedMemory, MemoryNotFound, NotInitialised
from cortex.files import atomic_write, file_lock, is_temp_name, lock_wait, read_json
from cortex.layout import STORE_DIRNAME, global_root, linked_folder
from cortex.memory import Link, Memory

STALE_TEMP_SECONDS = 600
CODE_IGNORED = ("# code outlines (`cortex index-code`): derived from the code at any commit, never committed\n"
                "memories/code/\nmemories/code_description/\n")
GITIGNORE = ("# derived and private state: rebuilt by cortex, never committed\ncache/\nstate/\n"
             "# a write in progress (`.<name>.<random>.tmp`): never for git\n.*.tmp\n" + CODE_IGNORED)
# The pages merge with git's built-in union driver: no local config, so a host's merge button uses it too.
GITATTRIBUTES = ("# cortex: generated pages merge without conflicts anywhere (git's built-in union driver; docs/git.md)\n"
                 "decisions.md merge=union\ndecisions-archive.md merge=union\nactive-plan.md merge=union\n")
MIN_PREFIX = 4
MAX_MEMORY_BYTES = 262144  # the default of `store.max_memory_bytes` (cortex.config)
SYMLINK = "is a symbolic link; memory files must be regular files"
NOT_REGULAR = "is not a regular file"


@dataclass
class Problem:
    """Something wrong in a store that does not stop the rest of it working."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class Scan:
    memories: list[Memory] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


# state folder -> (store, ids read) while a resident process defers its access counts (`defer_access`)
_DEFERRED_ACCESS: dict[str, tuple[Store, list[str]]] | None = None


def defer_access() -> None:
    """Hold `Store.record_access` writes until `flush_access`: a resident server answers first, counts after."""
    global _DEFERRED_ACCESS
    if _DEFERRED_ACCESS is None:
        _DEFERRED_ACCESS = {}


def flush_access(stop: bool = False) -> None:
    """Write the counts held since the last flush; with `stop`, later counts are written as they come."""
    global _DEFERRED_ACCESS
    held, _DEFERRED_ACCESS = _DEFERRED_ACCESS, None
    try:
        for store, ids in (held or {}).values():
            store.record_access(ids)
    finally:
        _DEFERRED_ACCESS = None if stop or held is None else {}


def global_home() -> Path:
    return Path(global_root())


def _cache_folder(root: Path) -> Path:
    """The store's cache folder (see `Store.cache_dir`)."""
    import hashlib

    from cortex.files import private_folder

    own = root / "cache"
    if os.access(own if own.is_dir() else root, os.W_OK) or not root.is_dir():
        return own
    try:
        folder = Path(private_folder("cache"), hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24])
        folder.mkdir(exist_ok=True)
    except OSError:
        return own  # nowhere to write: the cache is read as it is, what changed parsed in memory
    return folder


def _refuse_links(root: Path) -> None:
    """CortexError naming the store folder or its own folder that is a symbolic link (`layout.linked_folder`)."""
    linked = linked_folder(str(root))
    if linked is not None:
        raise CortexError(f"{linked} is a symbolic link: cortex reads and writes only the store's own folders, "
                          f"never through a link a repository may commit; remove it")


class Store:
    """One store folder and the operations on its memories."""

    def __init__(self, root: Path, label: str = "project") -> None:
        if label == "project":
            _refuse_links(root)
        self.root = root
        self.label = label
        self._config: Any = None
        self._cache_dir: Path | None = None

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, {self.label!r})"

    # ------------------------------------------------------------ locating

    @classmethod
    def locate(cls, start: Path | None = None, *, use_global: bool = False, directory: Path | str | None = None) -> Store:
        """Find the store to use: `directory`, `$CORTEX_DIR`, the global store, or `.cortex/` at or above `start`."""
        if directory is None and not use_global:
            directory = os.environ.get("CORTEX_DIR") or None
        if directory is not None:
            root = Path(directory).expanduser().resolve()
            if not root.is_dir():
                raise NotInitialised(root)
            return cls(root, "global" if root == global_home().resolve() else "project")
        if use_global:
            root = global_home()
            if not root.is_dir():
                cls.init(root, label="global")
            return cls(root.resolve(), "global")
        here = (start or Path.cwd()).resolve()
        home = global_home().resolve()
        for folder in (here, *here.parents):
            candidate = folder / STORE_DIRNAME
            if candidate.is_dir() and candidate.resolve() != home:
                return cls(candidate, "project")
        raise NotInitialised(here)

    @classmethod
    def init(cls, root: Path, label: str = "project") -> Store:
        """Create the store layout (config.yaml, .gitignore, memories/, cache/, state/); existing files are kept."""
        from cortex.config import TEMPLATE

        if label == "project":
            _refuse_links(root)  # before anything is made through one
        root.mkdir(parents=True, exist_ok=True)
        for folder in ("memories", "cache", "state"):
            (root / folder).mkdir(exist_ok=True)
        if not (root / "config.yaml").exists():
            atomic_write(root / "config.yaml", TEMPLATE)
        if not (root / ".gitignore").exists():
            atomic_write(root / ".gitignore", GITIGNORE)
        if label == "project" and not (root / ".gitattributes").exists():
            atomic_write(root / ".gitattributes", GITATTRIBUTES)
        return cls(root, label)

    # ------------------------------------------------------------ paths

    @property
    def memories_dir(self) -> Path:
        return self.root / "memories"

    @property
    def cache_dir(self) -> Path:
        """`cache/`; for a store this process cannot write (a read-only checkout or volume), a private
        per-user folder keyed by the store's path, so reads still get a full, current cache."""
        if self._cache_dir is None:
            self._cache_dir = _cache_folder(self.root)
        return self._cache_dir

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def worktree(self) -> Path | None:
        """The git worktree this store lives in (None for a global store or outside git)."""
        from cortex.gitfacts import worktree_root

        if self.label == "global":
            return None
        found = worktree_root(str(self.root.parent))
        return Path(found) if found is not None else None

    def current_branch(self) -> str | None:
        from cortex.gitfacts import branch_and_head

        root = self.worktree
        return branch_and_head(str(root) if root is not None else None)[0]

    def config(self) -> Any:
        if self._config is None:
            from cortex.config import load_config

            self._config = load_config(self.config_path)
        return self._config

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The store's write lock (`state/write.lock`): hold it to read-modify-write memory files.

        Taking it removes, at most every STALE_TEMP_SECONDS, the temp files a killed writer left under memories/.
        Held by another process longer than `lock_wait()` (10 s for a command, 5 s for a hook), it raises
        `LockBusy` naming the lock and its holder: nothing is written.
        """
        with file_lock(self.state_dir / "write.lock", timeout=lock_wait()):
            self._sweep_when_due()
            yield

    def _sweep_when_due(self) -> None:
        """`_remove_stale_temp_files` at most every STALE_TEMP_SECONDS (`state/swept`): it walks every folder."""
        stamp = self.state_dir / "swept"
        with contextlib.suppress(OSError):  # never swept
            if time.time() - stamp.stat().st_mtime < STALE_TEMP_SECONDS:
                return
        self._remove_stale_temp_files()
        with contextlib.suppress(OSError):  # a read-only state folder: the next writer sweeps again
            stamp.touch()

    def _remove_stale_temp_files(self) -> None:
        """Remove `atomic_write` temp files older than STALE_TEMP_SECONDS: a writer killed before its rename."""
        cutoff = time.time() - STALE_TEMP_SECONDS
        for dirpath, _dirnames, filenames in os.walk(self.memories_dir):
            for name in filenames:
                if not is_temp_name(name):
                    continue
                path = os.path.join(dirpath, name)
                with contextlib.suppress(OSError):  # gone already, or a read-only store: the next writer tries again
                    if os.lstat(path).st_mtime < cutoff:
                        os.unlink(path)

    def reload_config(self) -> None:
        """Read `config.yaml` again at the next `config()` (a resident process saw it change)."""
        self._config = None

    # ------------------------------------------------------------ reading

    def walk(self, keep: Callable[[str], bool] | None = None) -> tuple[list[Path], list[Problem]]:
        """(memory files, sorted; odd entries as problems): a file or folder that is a symbolic link, or a `.md`
        that is not a regular file (a FIFO would block a reader), is never read, written or descended into."""
        if not self.memories_dir.is_dir():
            return [], []
        files, odd = walk_memory_files(str(self.memories_dir), keep)
        files.sort()  # by (folder, name), as strings: sorting Paths is slow
        return [Path(folder, name) for folder, name, _, _ in files], [Problem(self.memories_dir / rel, reason)
                                                                      for rel, reason in sorted(odd)]

    def _paths_named(self, key: str) -> list[Path]:
        """Files whose name ends in -<id starting with key>.md (cortex's naming), without listing into Paths."""
        pattern = re.compile(rf"-{key}[0-9a-f]*\.md$")
        return self.walk(keep=lambda name: pattern.search(name) is not None)[0]

    def max_memory_bytes(self) -> int:
        """`store.max_memory_bytes`: the largest memory file written or read (the default when the config is broken)."""
        try:
            return int(self.config().get("store.max_memory_bytes"))
        except (CortexError, KeyError, TypeError, ValueError):
            return MAX_MEMORY_BYTES

    def read(self, path: Path) -> Memory:
        """Parse one file; raises `MalformedMemory` (a symbolic link, an oversized file and odd YAML included)."""
        raw, _ = read_memory_bytes(path, self.max_memory_bytes())
        return parse_bytes(raw, path, universal_newlines=True)

    def scan(self) -> Scan:
        """Read every memory; malformed files and files sharing an id (`duplicate_ids`) become problems."""
        result = Scan()
        paths, result.problems = self.walk()
        read: list[Memory] = []
        for path in paths:
            try:
                read.append(self.read(path))
            except MalformedMemory as exc:
                result.problems.append(Problem(path, exc.reason))
        shared = duplicate_ids((item.id, item.path) for item in read)
        for item in read:
            if item.id in shared:
                assert item.path is not None
                result.problems.append(Problem(item.path, duplicate_reason(item.id, item.path, shared[item.id])))
            else:
                result.memories.append(item)
        result.problems.sort(key=lambda problem: str(problem.path))
        revive_cycles(result.memories)
        return result

    def list(self, *, types: Iterable[str] = (), statuses: Iterable[str] = ("active",)) -> list[Memory]:
        """The memories of these types and statuses (an empty filter matches all)."""
        wanted_types, wanted_statuses = set(types), set(statuses)
        return [item for item in self.scan().memories
                if not (wanted_types and item.type not in wanted_types)
                and not (wanted_statuses and item.status not in wanted_statuses)]

    def get(self, id_or_prefix: str) -> Memory:
        """A memory by id or unique id prefix (at least 4 hex characters), as every reader takes it (status
        active when it is the memory of a supersession cycle that reads as active: `revive_cycles`)."""
        item = self._get(id_or_prefix)
        if item.status == "superseded" and any(link.rel == "supersedes" for link in item.links):
            group = {item.id: item}
            for ident in self._superseded_chain(item):
                try:
                    group[ident] = self._get(ident)
                except CortexError:
                    continue
            revive_cycles(builtins.list(group.values()))
        return item

    def _get(self, id_or_prefix: str) -> Memory:
        """`get`, the status as the file says."""
        key = id_or_prefix.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{%d,12}" % MIN_PREFIX, key):
            raise MemoryNotFound(f"{id_or_prefix!r} is not a memory id (4 to 12 hex characters)")
        # File names end in -<id>.md, so a glob usually finds it without parsing the store.
        by_name = self._paths_named(key)
        found: builtins.list[Memory] = []
        for path in by_name:
            try:
                item = self.read(path)
            except MalformedMemory:
                continue
            if item.id.startswith(key):
                found.append(item)
        shared = duplicate_ids((item.id, item.path) for item in found)
        matches = {item.id: item for item in found if item.id not in shared}
        if not matches and not shared:  # a person may have renamed the file: fall back to the ids inside
            scan = self.scan()
            matches = {m.id: m for m in scan.memories if m.id.startswith(key)}
            for problem in scan.problems if not matches else ():
                if problem.reason.startswith(f"duplicate id {key}"):
                    raise MemoryNotFound(f"{problem.path}: {problem.reason}")
        if not matches and shared:  # as every reader: files sharing an id are all left out (`duplicate_ids`)
            ident, holders = sorted(shared.items())[0]
            raise MemoryNotFound(f"{holders[0]}: {duplicate_reason(ident, holders[0], holders)}")
        if not matches:
            raise MemoryNotFound(f"no memory with id {id_or_prefix!r} in {self.root}")
        if len(matches) > 1:
            raise AmbiguousId(key, list(matches))
        return next(iter(matches.values()))

    # ------------------------------------------------------------ writing

    def _path_for(self, item: Memory) -> Path:
        return self.memories_dir / item.type / fmt.file_name(item)

    def ids_on_disk(self) -> set[str]:
        """The ids in the memory files' names (`<slug>-<id>.md`), from folder listings alone: what a link may point
        to (a link to an id not among them, its memory deleted, is skipped by readers and dropped by gc)."""
        files, odd = walk_memory_files(str(self.memories_dir))
        names = [name for _, name, _, _ in files] + [rel.rsplit("/", 1)[-1] for rel, _ in odd]
        return {name.rsplit("-", 1)[-1][:-3] for name in names if name.endswith(".md")}

    def create(self, item: Memory) -> Memory:
        """Write a new memory file. Fills in id, timestamps, branch and scope when empty."""
        with self.lock():
            if not item.id:  # 48 random bits: a clash is for `cortex status` to report, not worth a listing
                item.id = fmt.new_id()
            elif item.id in self.ids_on_disk():
                raise CortexError(f"a memory with id {item.id} already exists in {self.root}")
            stamp = fmt.now_iso()
            item.created = item.created or stamp
            item.updated = item.updated or item.created
            if not item.summary and item.type != "code":  # one line for short renderings (code has its outline)
                item.summary = fmt.summary_from(item.body, item.title)
            item.links, dropped = fmt.link_problems(item.id, item.links)
            for problem in dropped:
                self.log(f"{item.id}: ignored {problem}")
            item.links = [replace(link, created=link.created or stamp) for link in item.links]
            if item.branch is None and self.label == "project":
                item.branch = self.current_branch()
            if self.label == "global":
                item.scope = "global"
            path = self._path_for(item)
            if path.parent.is_symlink():  # writing through it would put the memory outside the repository
                raise CortexError(f"{path.parent}: {SYMLINK}; remove the link")
            fmt.validate(item)  # before it has a path: a refused memory's error names no file that was never written
            item.path = path
            text = fmt.render_new(item)
            self._check_size(text, path)
            guard_text(text, path)
            atomic_write(path, text)
            self.mark_changed()
        return self.read(path)

    def update(self, id_or_prefix: str, changes: dict[str, Any], body: str | None = None, touch: bool = True,
               path: Path | None = None) -> Memory:
        """Change fields of a memory in place (only their lines change); `path`, when known, skips the lookup."""
        with self.lock():
            current = self._current(id_or_prefix, path)
            assert current.path is not None
            text = current.path.read_text(encoding="utf-8")
            changes = dict(changes)
            if changes.get("links") is not None:  # None removes the key
                changes["links"] = [link.as_dict() if isinstance(link, Link) else link for link in changes["links"]]
            if touch:
                changes.setdefault("updated", fmt.now_iso())
            new_text = fmt.edit_text(text, changes, body, current.path)
            self._check_size(new_text, current.path)
            fmt.parse(new_text, current.path)  # validate before anything is written
            if body is not None or {"title", "tags", "files", "source"} & set(changes):
                guard_text(new_text, current.path)
            atomic_write(current.path, new_text)
            self.mark_changed()
        return self.read(current.path)

    def _current(self, memory_id: str, path: Path | None) -> Memory:
        """The memory as its file holds it now: read from `path` when that is still its file, else looked up."""
        current = self.read(path) if path is not None and path.is_file() else None
        return current if current is not None and current.id == memory_id else self.get(memory_id)

    def _check_size(self, text: str, path: Path) -> None:
        """Refuse a memory over `store.max_memory_bytes` (before the secret scan, which a 10 MB text would stall)."""
        limit = self.max_memory_bytes()
        size = len(text.encode("utf-8"))
        if size > limit:
            raise CortexError(f"{path.name}: not written: the memory {too_large(size, limit)}")

    def add_links(self, memory_id: str, links: builtins.list[Link], path: Path | None = None) -> Memory:
        """Add links a memory does not have yet, read and written under the lock (two writers lose none)."""
        with self.lock():
            current = self._current(memory_id, path)
            have = {(link.rel, link.to) for link in current.links}
            added = []
            stamp = fmt.now_iso()
            for link in links:
                if link.to == current.id:
                    self.log(f"{current.id}: ignored a {link.rel} link to itself")
                elif (link.rel, link.to) in have:
                    self.log(f"{current.id}: ignored a duplicate {link.rel} link to {link.to}")
                else:
                    have.add((link.rel, link.to))
                    added.append(replace(link, created=link.created or stamp))
            if not added:
                return current
            return self.update(current.id, {"links": current.links + added}, touch=False, path=current.path)

    def drop_links(self, memory_id: str, drop: Callable[[Link], bool], path: Path | None = None
                   ) -> builtins.list[Link]:
        """Remove (under the lock) and return the links of one memory that `drop` picks."""
        with self.lock():
            current = self._current(memory_id, path)
            dropped = [link for link in current.links if drop(link)]
            if dropped:
                kept = [link for link in current.links if not drop(link)]
                self.update(current.id, {"links": kept or None}, touch=False, path=current.path)
            return dropped

    def delete(self, ids: Iterable[str]) -> builtins.list[Memory]:
        """Remove memory files (`forget --delete`): every id is found first, so an unknown one removes nothing.
        Links other memories hold to them are left: every reader ignores them and gc drops them."""
        with self.lock():
            found: dict[str, Memory] = {}
            for ident in ids:
                item = self._get(ident)
                found[item.id] = item
            for item in found.values():
                assert item.path is not None
                item.path.unlink(missing_ok=True)
            if found:
                self.mark_changed()
        return builtins.list(found.values())

    def archive(self, id_or_prefix: str) -> Memory:
        """Status archived; the file stays (git history and `--all` still find it)."""
        return self.update(id_or_prefix, {"status": "archived", "archived": fmt.now_iso()})

    def restore(self, id_or_prefix: str) -> Memory:
        return self.update(id_or_prefix, {"status": "active", "archived": None})

    def supersede(self, old: str, new: str) -> tuple[Memory, Memory]:
        """`new` replaces `old`: old → superseded, new gains a `supersedes` link to old."""
        old_memory, new_memory = self.get(old), self.get(new)
        if old_memory.id == new_memory.id:
            raise CortexError("a memory cannot replace itself")
        if new_memory.id in self._superseded_chain(old_memory):  # a cycle would leave none of its memories active
            raise CortexError(f"{new_memory.id} cannot replace {old_memory.id}: {old_memory.id} already replaces "
                              f"{new_memory.id} (a supersedes link, directly or through others); remove that link "
                              f"from {old_memory.id}'s file first")
        links = [link for link in new_memory.links if not (link.rel == "supersedes" and link.to == old_memory.id)]
        links.append(Link("supersedes", old_memory.id, created=fmt.now_iso()))
        new_memory = self.update(new_memory.id, {"links": links})
        old_memory = self.update(old_memory.id, {"status": "superseded"})
        return old_memory, new_memory

    def _superseded_chain(self, start: Memory, most: int = 100) -> builtins.list[str]:
        """The ids `start` replaces, directly or through others (`supersedes` links followed, each id once)."""
        chain: builtins.list[str] = []
        todo = [link.to for link in start.links if link.rel == "supersedes"]
        while todo and len(chain) < most:
            ident = todo.pop(0)
            if ident in chain or ident == start.id:
                continue
            chain.append(ident)
            try:
                todo += [link.to for link in self._get(ident).links if link.rel == "supersedes"]
            except CortexError:
                continue  # gone, or not read: the chain ends there
        return chain

    # ------------------------------------------------------------ state

    def mark_changed(self) -> None:
        """Touch state/changed: tells readers trusting a `cortex watch` that cortex itself just wrote."""
        with contextlib.suppress(OSError):
            self.state_dir.mkdir(parents=True, exist_ok=True)
            (self.state_dir / "changed").touch()

    def access_counts(self) -> dict[str, int]:
        data = read_json(self.state_dir / "access.json", {})
        return {k: int(v.get("count", 0)) for k, v in data.items() if isinstance(v, dict)}

    def record_access(self, ids: Iterable[str]) -> None:
        """Count reads in state/access.json, best effort (deferred by a resident server: `defer_access`)."""
        ids = list(ids)
        if not ids:
            return
        if _DEFERRED_ACCESS is not None:
            _DEFERRED_ACCESS.setdefault(str(self.state_dir), (self, []))[1].extend(ids)
            return
        path = self.state_dir / "access.json"
        with contextlib.suppress(OSError), file_lock(self.state_dir / "access.lock"):  # a read-only store still reads
            data = read_json(path, {})
            stamp = fmt.now_iso()
            for memory_id in ids:
                entry = data.setdefault(memory_id, {"count": 0})
                entry["count"] = int(entry.get("count", 0)) + 1
                entry["last"] = stamp
            atomic_write(path, json.dumps(data, sort_keys=True), durable=False)  # private, best-effort: no fsync

    def log(self, message: str) -> None:
        """Append a line to state/cortex.log (best effort), secrets named, never written (`cortex.guard.redacted`)."""
        from cortex.guard import redacted

        message = redacted(message)
        with contextlib.suppress(OSError):
            self.state_dir.mkdir(parents=True, exist_ok=True)
            with open(self.state_dir / "cortex.log", "a", encoding="utf-8") as handle:
                handle.write(f"{fmt.now_iso()} {message}\n")


def status_of(store: Store, rows: list[tuple[str, str, str, str, bool, list[Any]]], problems: list[str]) -> dict[str, Any]:
    """Counts by type and status, paths and every problem found, from (path relative to memories/, id, type,
    status, pinned, [(rel, to, …)]) of each memory (the cache's columns) and the problems found."""
    by_type = Counter(row[2] for row in rows)
    by_status = Counter(row[3] for row in rows)
    problems = list(problems)
    warnings: list[str] = []
    for path, memory_id, _, _, _, links in rows:
        if not links:
            continue
        # a link to a memory that no longer exists (deleted, `git rm`) is no problem: readers skip it, gc drops it
        pairs = [(link[0], link[1]) for link in links]
        if len(set(pairs)) == len(pairs) and all(to != memory_id for _, to in pairs):
            continue  # nothing to say (the path is made only when something is)
        dropped = fmt.link_problems(memory_id, [fmt.Link(rel, to) for rel, to in pairs])[1]
        warnings += [f"{store.memories_dir / path}: {problem} (ignored; remove the line)" for problem in dropped]
    replaces: dict[str, list[str]] = {}
    for _, memory_id, _, _, _, links in rows:
        targets = [link[1] for link in links or () if link[0] == "supersedes"]
        if targets:
            replaces[memory_id] = targets
    for group in fmt.supersession_cycles(replaces):  # hand-edited: `forget --replaced-by` refuses to make one
        problems.append(f"supersession cycle: {', '.join(group)} replace each other; every reader takes only "
                        f"the most recently updated as active (remove one supersedes link)")
    try:
        warnings = list(store.config().warnings) + warnings
    except CortexError as exc:
        problems.append(str(exc))
    return {
        "store": store.label,
        "root": str(store.root),
        "memories_dir": str(store.memories_dir),
        "cache_dir": str(store.cache_dir),
        "state_dir": str(store.state_dir),
        "branch": store.current_branch() if store.label == "project" else None,
        "git": store.worktree is not None,
        "total": len(rows),
        "by_type": dict(sorted(by_type.items())),
        "by_status": dict(sorted(by_status.items())),
        "pinned": sum(1 for row in rows if row[4]),
        "problems": problems,
        "warnings": warnings,
    }

def revive_cycles(memories: builtins.list[Memory]) -> None:
    """Set active the memory of each supersession cycle that every reader takes as active (`revived_in_cycles`)."""
    replaces = {m.id: [link.to for link in m.links if link.rel == "supersedes"] for m in memories
                if any(link.rel == "supersedes" for link in m.links)}
    if not replaces:
        return
    by_id = {m.id: m for m in memories if m.id in replaces}
    for ident in fmt.revived_in_cycles(replaces, {i: m.status for i, m in by_id.items()},
                                       {i: m.updated for i, m in by_id.items()}):
        by_id[ident].status = "active"


def duplicate_ids(pairs: Iterable[tuple[str, Any]]) -> dict[str, builtins.list[Any]]:
    """{id: its files} of every id more than one file holds, from (id, file) pairs.

    Neither file is read: which one a reader picked would depend on file names, so a second file could speak under
    a trusted memory's id in one reader while another showed the original.
    """
    holders: dict[str, builtins.list[Any]] = {}
    for ident, where in pairs:
        holders.setdefault(ident, []).append(where)
    return {ident: found for ident, found in holders.items() if len(found) > 1}


def duplicate_reason(ident: str, path: Any, holders: builtins.list[Any]) -> str:
    """Why a file sharing an id with others is skipped, naming the others."""
    others = ", ".join(str(other) for other in holders if other != path)
    return (f"duplicate id {ident} (also in {others}); neither file is read until one is removed or given "
            f"a new id")


def guard_text(text: str, path: Path) -> None:
    """Refuse text holding a secret (`cortex.guard`); `path` only names the file, so no name changes the rules."""
    from cortex.errors import SecretDetected
    from cortex.guard import scan_text

    findings = scan_text(text)
    if findings:
        raise SecretDetected(path, findings[0].kind, findings[0].line)


Found = tuple[str, str, str, os.DirEntry[str]]  # a memory file: folder, name, its folder relative to the root, entry


def walk_memory_files(root: str, keep: Callable[[str], bool] | None = None) -> tuple[
        builtins.list[Found], builtins.list[tuple[str, str]]]:
    """The one walk over a memories folder (the store's and the manifest's): (folder, name, relative folder
    prefix, entry) of every regular `.md` file whose name `keep` accepts, and (relative path, reason) of every odd
    entry — a `.md` or folder that is a symbolic link, a `.md` that is not a regular file (a FIFO would block
    a reader). Hidden entries are skipped; odd ones are never read, written or descended into."""
    files: builtins.list[Found] = []
    odd: builtins.list[tuple[str, str]] = []
    _walk_folder(root, "", keep, files, odd, None)
    return files, odd


def walk_memory_stats(root: str) -> tuple[dict[str, os.stat_result], builtins.list[tuple[str, str]]]:
    """`walk_memory_files` with each file's stat as listed: {relative path: stat} and the odd entries."""
    stats: dict[str, os.stat_result] = {}
    odd: builtins.list[tuple[str, str]] = []
    _walk_folder(root, "", None, [], odd, stats)
    return stats, odd


def _walk_folder(folder: str, prefix: str, keep: Callable[[str], bool] | None, files: builtins.list[Found],
                 odd: builtins.list[tuple[str, str]], stats: dict[str, os.stat_result] | None) -> None:
    try:
        with os.scandir(folder) as listing:
            entries = list(listing)
    except OSError:
        return  # vanished or unreadable while we looked
    for entry in entries:  # the types come from the listing (d_type): no system call per regular file
        name = entry.name
        if name.startswith("."):
            continue
        if name.endswith(".md") and entry.is_file(follow_symlinks=False):  # the common case first
            if stats is not None:
                try:
                    stats[prefix + name] = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # vanished while we looked
            elif keep is None or keep(name):
                files.append((folder, name, prefix, entry))
        elif entry.is_symlink():
            if name.endswith(".md") or _points_to_folder(entry):
                odd.append((prefix + name, SYMLINK))
        elif entry.is_dir(follow_symlinks=False):
            _walk_folder(entry.path, f"{prefix}{name}/", keep, files, odd, stats)
        elif name.endswith(".md"):
            odd.append((prefix + name, NOT_REGULAR))


def _points_to_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def too_large(size: int, limit: int) -> str:
    return (f"is {size:,} bytes, over store.max_memory_bytes ({limit:,}); split or shorten it, "
            f"or raise the limit in config.yaml")


def read_memory_bytes(path: Path, max_bytes: int) -> tuple[bytes, os.stat_result]:
    """The bytes of one memory file and its stat; `MalformedMemory` for a symbolic link, anything but a
    regular file, or a file over `max_bytes` (not read: a 50 MB file would be parsed, indexed and embedded)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)  # NONBLOCK: a FIFO must not hang
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if path.is_symlink():  # O_NOFOLLOW's ELOOP
            raise MalformedMemory(path, SYMLINK) from None
        raise MalformedMemory(path, f"cannot read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not _stat.S_ISREG(info.st_mode):
            raise MalformedMemory(path, NOT_REGULAR)
        if info.st_size > max_bytes:
            raise MalformedMemory(path, too_large(info.st_size, max_bytes))
        chunks = [os.read(fd, info.st_size + 1)]
        size = len(chunks[0])
        while size > info.st_size and chunks[-1] and size <= max_bytes:  # it grew since the stat
            chunks.append(os.read(fd, max_bytes + 1 - size))
            size += len(chunks[-1])
    except OSError as exc:
        raise MalformedMemory(path, f"cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise MalformedMemory(path, too_large(size, max_bytes))
    return b"".join(chunks) if len(chunks) > 1 else chunks[0], info


def parse_bytes(raw: bytes, path: Path, universal_newlines: bool = False) -> Memory:
    """A memory file's bytes as a `Memory`; raises `MalformedMemory` (not UTF-8, conflict markers, bad front matter).

    `universal_newlines` reads `\\r\\n` and `\\r` as `\\n`, as `Path.read_text` does."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedMemory(path, "not UTF-8 text") from None
    if universal_newlines and "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\n<<<<<<< " in f"\n{text}" and "\n>>>>>>> " in text:
        raise MalformedMemory(path, "has git conflict markers; resolve the merge conflict")
    return fmt.parse(text, path)


def iter_stores(project: Store | None, include_global: bool = True) -> Iterator[Store]:
    """The project store first, then the global one when it exists."""
    if project is not None:
        yield project
    if include_global:
        home = global_home()
        if home.is_dir() and (project is None or home.resolve() != project.root.resolve()):
            yield Store(home.resolve(), "global")
