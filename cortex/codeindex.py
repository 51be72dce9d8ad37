"""Code indexing (`cortex index-code [PATH…] [--force]`): a prose description and the source of each file.

Two memories a file, linked `source_of` from prose to code (recall finds code through its description). They are
derived data, rebuilt from the code at any commit: `.cortex/.gitignore` keeps them out of git, and a changed file's
pair replaces the old one. An unchanged file (same git blob in `source.sha`) is skipped; binaries, large files,
secrets and non-source files are skipped and reported. docs/graph.md.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from cortex.errors import CortexError, MalformedMemory, SecretDetected
from cortex.gitfacts import path_inside
from cortex.gitops import tracked
from cortex.memory import Link, Memory
from cortex.store import CODE_IGNORED, Store

MAX_BYTES = 200_000
LANGUAGES = {".py": "python", ".js": "javascript", ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript",
             ".go": "go", ".rs": "rust", ".java": "java", ".kt": "kotlin", ".rb": "ruby", ".php": "php", ".c": "c",
             ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".cs": "csharp", ".swift": "swift", ".sh": "bash",
             ".md": "markdown", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".sql": "sql"}
DECLARATION = re.compile(
    r"^\s*(export\s+(default\s+)?(async\s+)?(function|class|const|let|interface|type|enum)\b"
    r"|(pub\s+)?(async\s+)?fn\s+\w|func\s+(\(\w+\s+\*?\w+\)\s*)?\w+\s*\(|(public|private|protected)?\s*(static\s+)?"
    r"(class|interface|enum|record)\s+\w|def\s+\w|class\s+\w|module\s+\w|(async\s+)?function\s+\w|CREATE\s+(TABLE|VIEW|INDEX)\b)",
    re.IGNORECASE,
)


@dataclass
class IndexReport:
    indexed: list[tuple[str, str, str]] = field(default_factory=list)  # (path, description id, code id)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    replaced: list[str] = field(default_factory=list)  # ids of the older pairs, whose files were removed
    notes: list[str] = field(default_factory=list)


def blob_sha(data: bytes) -> str:
    """The git blob id of these bytes (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _files(paths: list[Path], root: Path) -> Iterator[tuple[Path, bool]]:
    """(file, named by itself) under `paths`, recursing into directories (not hidden ones) and skipping what git
    ignores (and .git, .cortex)."""
    repo = None
    with contextlib.suppress(Exception):
        import pygit2

        repo = pygit2.Repository(str(root))

    def ignored(path: Path) -> bool:
        if path.name in (".git", ".cortex"):
            return True
        if repo is None:
            return False
        try:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return False
        return bool(repo.path_is_ignored(rel + ("/" if path.is_dir() else "")))

    for path in paths:
        if path.is_file():
            if not ignored(path):
                yield path, True  # named by the person: indexed whatever it is
            continue
        for folder, dirs, names in os.walk(path):
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs if not ignored(here / d) and not d.startswith("."))
            for name in sorted(names):
                if not ignored(here / name):
                    yield here / name, False


SOURCE_NAMES = frozenset({"Makefile", "Dockerfile", "Justfile", "Rakefile", "Gemfile", "CMakeLists.txt"})


def is_source(name: str) -> bool:
    """Whether a file found in a folder is source worth describing: a known language or a build file."""
    if name.startswith("."):
        return False
    return name in SOURCE_NAMES or Path(name).suffix.lower() in LANGUAGES


def outline(path: Path, text: str) -> str:
    """A deterministic description of a source file (see the module docstring)."""
    language = LANGUAGES.get(path.suffix.lower(), "text")
    lines: list[str] = []
    if language == "python":
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            tree = None
            lines.append(f"(Python that does not parse: line {exc.lineno}: {exc.msg})")
        if tree is not None:
            doc = ast.get_docstring(tree)
            if doc:
                lines.append(doc.strip().split("\n\n")[0].replace("\n", " "))
            seen: set[str] = set()
            for node in tree.body:
                lines.extend(_python_entry(node, "", seen))
    elif language == "markdown":
        lines.extend(line.strip() for line in text.splitlines() if line.startswith("#"))
    else:
        for line in text.splitlines():
            if DECLARATION.match(line):
                entry = "- `" + line.strip().rstrip("{").strip()[:120].replace("`", "'") + "`"
                if entry not in lines:
                    lines.append(entry)
    count = text.count("\n") + (0 if text.endswith("\n") else 1)
    head = f"{path.name}: {language}, {count} lines."
    return head + ("\n\n" + "\n".join(lines[:80]) if lines else "")


def _python_entry(node: ast.AST, indent: str, seen: set[str]) -> list[str]:
    """The outline lines of one definition; a name already listed at this level (an `@overload`, a property's
    setter, a redefinition) is not listed again."""
    name = getattr(node, "name", None)
    if name is None or f"{indent}{name}" in seen:
        return []
    seen.add(f"{indent}{name}")
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = ", ".join(a.arg for a in node.args.args if a.arg not in ("self", "cls"))
        doc = ast.get_docstring(node)
        first = f": {doc.strip().splitlines()[0]}" if doc else ""
        return [f"{indent}- `{node.name}({args})`{first}"]
    if isinstance(node, ast.ClassDef):
        doc = ast.get_docstring(node)
        out = [f"{indent}- class `{node.name}`" + (f": {doc.strip().splitlines()[0]}" if doc else "")]
        members: set[str] = set()
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not child.name.startswith("_"):
                out.extend(_python_entry(child, indent + "  ", members))
        return out
    return []


def _llm_summary(store: Store, rel: str, text: str) -> str | None:
    """The LLM's description of the file when `capture.llm` allows it (see `cortex.llm.ask`)."""
    from cortex.llm import ask

    prompt = (f"Describe the source file {rel} for a developer who has not read it: what it is for, its main "
              f"parts, and anything surprising. Plain prose, at most 150 words.\n\n{text[:60_000]}")
    return ask(store, prompt, "index-code")


def index_code(store: Store, paths: list[Path], force: bool = False) -> IndexReport:
    """Index each file (see the module docstring)."""
    root = store.worktree or store.root.parent
    report = IndexReport()
    report.notes += _ignore_outlines(store)
    existing: dict[str, list[Memory]] = {}
    for item in store.list(types=("code",)):
        if item.files:
            existing.setdefault(item.files[0], []).append(item)
    descriptions = {link.to: item for item in store.list(types=("code_description",))
                    for link in item.links if link.rel == "source_of"}
    seen: set[str] = set()
    found = []
    for path, named in _files(paths, root):
        rel = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
        if rel in seen:
            continue  # named twice (a folder and a file in it): indexed once
        seen.add(rel)
        if rel == ".." or rel.startswith("../"):
            report.skipped.append((str(path), "outside the repository"))
        elif path_inside(root, rel) is None:
            report.skipped.append((rel, "a symlink: not followed"))
        else:
            found.append((path, named, rel))
    in_git = store.worktree is not None
    known = tracked(root, [rel for _path, _named, rel in found]) if in_git else None
    for path, named, rel in found:
        if known is not None and rel not in known:
            report.skipped.append((rel, "not tracked by git (git add it first)"))
            continue
        data = path.read_bytes()
        if len(data) > MAX_BYTES:
            report.skipped.append((rel, f"over {MAX_BYTES // 1000} kB"))
            continue
        if b"\0" in data[:8192]:
            report.skipped.append((rel, "binary"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            report.skipped.append((rel, "not UTF-8 text"))
            continue
        if not named and not is_source(path.name):
            report.skipped.append((rel, "not a source file"))
            continue
        sha = blob_sha(data)
        old = existing.get(rel, [])
        if old and not force and any(item.source.get("sha") == sha for item in old):
            report.unchanged.append(rel)
            continue
        language = LANGUAGES.get(path.suffix.lower(), "")
        fence = "````" if "```" in text else "```"
        try:
            code = store.create(Memory(id="", type="code", title=f"{rel} (source)", body=f"{fence}{language}\n{text}"
                                       f"{'' if text.endswith(chr(10)) else chr(10)}{fence}\n", files=[rel],
                                       confidence=1.0, source={"kind": "code-index", "sha": sha}))
        except SecretDetected as exc:
            report.skipped.append((rel, f"looks like it holds a secret ({exc.rule}, line {exc.line})"))
            continue
        except MalformedMemory as exc:  # not text (a control character): no memory can hold it
            report.skipped.append((rel, exc.reason))
            continue
        prose = _llm_summary(store, rel, text) or outline(path, text)
        try:
            description = store.create(Memory(id="", type="code_description", title=f"{rel}: {_summary_line(prose, rel)}",
                                              body=prose + "\n", files=[rel], confidence=0.9,
                                              source={"kind": "code-index", "sha": sha},
                                              links=[Link("source_of", code.id)]))
        except (SecretDetected, CortexError) as exc:
            assert code.path is not None
            code.path.unlink(missing_ok=True)
            report.skipped.append((rel, str(exc)))
            continue
        for item in old:  # derived data: the older pair is replaced, not kept beside the new one
            for each in (item, descriptions.get(item.id)):
                if each is not None and each.path is not None:
                    each.path.unlink(missing_ok=True)
                    report.replaced.append(each.id)
        report.indexed.append((rel, description.id, code.id))
        existing[rel] = [code]
        descriptions[code.id] = description
    return report


def _ignore_outlines(store: Store) -> list[str]:
    """`.cortex/.gitignore` names the outlines' folders (a store made before they were kept out of git)."""
    from cortex.files import atomic_write

    path = store.root / ".gitignore"
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if "memories/code/" in current:
        return []
    atomic_write(path, current + ("\n" if current and not current.endswith("\n") else "") + CODE_IGNORED)
    return [f"wrote {path}: code outlines stay out of git (commit it; `git rm -r --cached` outlines committed before)"]


def _summary_line(prose: str, rel: str) -> str:
    """What the file does, for its description's title: its prose's first sentence, else the names it defines. No
    backticks: a stray one breaks the markdown a title is shown in."""
    name = Path(rel).name
    defined = []
    for line in prose.splitlines():
        line = line.strip()
        if not line or line.startswith(name + ":"):
            continue
        if line.startswith("- "):
            found = re.search(r"`(?:(?:async\s+)?(?:def|fn|func|function|class)\s+)?([A-Za-z_][\w.]*)", line)
            if found and not found.group(1).startswith("_") and found.group(1) not in defined:
                defined.append(found.group(1))
            continue
        sentence = re.split(r"(?<=[.!?])\s", line.lstrip("# ").replace("`", ""), maxsplit=1)[0]
        return sentence[:100]
    if defined:
        return "defines " + ", ".join(defined[:4]) + (" and more" if len(defined) > 4 else "")
    return f"{LANGUAGES.get(Path(rel).suffix.lower(), 'text')} file"


def describe(report: IndexReport) -> list[str]:
    out = list(report.notes)
    out += [f"indexed {rel} (description {d}, code {c})" for rel, d, c in report.indexed]
    out += [f"unchanged {rel}" for rel in report.unchanged]
    out += [f"skipped {rel}: {why}" for rel, why in report.skipped]
    return out


def as_dict(report: IndexReport) -> dict[str, Any]:
    return {"indexed": [{"path": p, "description": d, "code": c} for p, d, c in report.indexed],
            "unchanged": report.unchanged, "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
            "replaced": report.replaced, "notes": report.notes}
