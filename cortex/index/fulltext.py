"""The Whoosh full-text index: BM25F over title, tags and body.

BM25F weights a term's frequency in each field before saturating it:
tf = 3·tf(title) + 2·tf(tags) + tf(body). cortex indexes exactly that, one
`text` field holding the title three times, the tags twice and the body, and
scores it with Whoosh's BM25 — one posting list per query word instead of
three, which makes a query ~3x faster than Whoosh's per-field boosts (and is
closer to BM25F proper, which sums weighted frequencies, not scores).

Questions in plain language work because the analyzer lowercases, drops
stop words and stems ("databases?" finds "database"), and the query is
reduced to words before Whoosh sees it, so punctuation and Whoosh's own
query syntax (AND, *, field:) cannot break it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = "2"
TITLE_BOOST = 3  # times the title is repeated in the indexed text
TAGS_BOOST = 2


def _schema() -> Any:
    from whoosh.analysis import StemmingAnalyzer
    from whoosh.fields import ID, KEYWORD, TEXT, Schema  # noqa: F401

    analyzer = StemmingAnalyzer()
    return Schema(
        path=ID(stored=True, unique=True),
        id=ID(stored=True),
        text=TEXT(analyzer=analyzer),
        type=ID(stored=True),
        branch=ID(stored=True),
        status=ID(stored=True),
        files=KEYWORD(commas=True),
    )


def _version_file(folder: Path) -> Path:
    return folder / "cortex-schema"


def open_index(folder: Path, create: bool = False) -> Any:
    """Open the index; None when missing, of another schema or broken (the caller rebuilds)."""
    from whoosh import index

    if create:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        ix = index.create_in(str(folder), _schema())
        _version_file(folder).write_text(SCHEMA_VERSION, encoding="utf-8")
        return ix
    try:
        if _version_file(folder).read_text(encoding="utf-8") != SCHEMA_VERSION:
            return None
        return index.open_dir(str(folder))
    except Exception:  # missing, truncated or garbage: Whoosh raises many kinds
        return None


def part_files(folder: Path) -> dict[str, Path] | None:
    """The index's files by name; None without an index folder. Whoosh's lock file is left out: taking the
    lock changes nothing."""
    try:
        with os.scandir(folder) as listing:
            return {entry.name: Path(entry.path) for entry in listing if "LOCK" not in entry.name}
    except OSError:
        return None


def readable(ix: Any) -> str | None:
    """Read every stored field and posting of the index; the reason it failed, or None (for `cortex verify`)."""
    try:
        with ix.searcher() as searcher:
            reader = searcher.reader()
            for _ in reader.all_stored_fields():
                pass
            for fieldname, text in reader.all_terms():
                for _ in reader.postings(fieldname, text).all_ids():
                    pass
    except Exception as exc:  # a damaged segment: struct.error, EOFError, zlib.error, ...
        return f"{type(exc).__name__}: {exc}"
    return None


def document(rel: str, meta: dict[str, Any], body: str) -> dict[str, Any]:
    return {
        "path": rel,
        "id": meta["id"],
        "text": "\n".join([meta["title"]] * TITLE_BOOST + [" ".join(meta.get("tags", []))] * TAGS_BOOST + [body]),
        "type": meta["type"],
        "branch": meta.get("branch") or "",
        "status": meta.get("status", "active"),
        "files": ",".join(meta.get("files", [])),
    }


def apply(ix: Any, deletes: Iterable[str], documents: Iterable[dict[str, Any]], bulk: bool = False) -> None:
    """Delete paths and add or replace documents in one commit."""
    writer = ix.writer(limitmb=256 if bulk else 64)
    try:
        for rel in deletes:
            writer.delete_by_term("path", rel)
        for doc in documents:
            if bulk:
                writer.add_document(**doc)
            else:
                writer.update_document(**doc)
    except BaseException:
        writer.cancel()
        raise
    writer.commit()


_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)


def query_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def search(ix: Any, text: str, limit: int, statuses: Iterable[str] = (), types: Iterable[str] = (),
           branch: str | None = None, searcher: Any = None) -> list[tuple[str, float]]:
    """BM25F search; returns (path, score) best first. Pass an open `searcher` to reuse it."""
    from whoosh import query as q

    analyzer = ix.schema["text"].analyzer
    terms = list(dict.fromkeys(token.text for token in analyzer(" ".join(query_words(text)))))
    if not terms:
        return []
    parsed = q.Or([q.Term("text", term) for term in terms])
    filters = []
    statuses, types = list(statuses), list(types)
    if statuses:
        filters.append(q.Or([q.Term("status", s) for s in statuses]))
    if types:
        filters.append(q.Or([q.Term("type", t) for t in types]))
    if branch is not None:
        filters.append(q.Term("branch", branch))
    allow = q.And(filters) if filters else None
    if searcher is not None:
        try:
            hits = searcher.search(parsed, limit=limit, filter=allow)
            return [(hit["path"], float(hit.score)) for hit in hits]
        except Exception:
            pass  # a writer replaced the index under this searcher, or a segment is damaged: look again
    try:
        with ix.searcher() as own:  # reads the latest table of contents
            hits = own.search(parsed, limit=limit, filter=allow)
            return [(hit["path"], float(hit.score)) for hit in hits]
    except Exception as exc:
        folder = getattr(getattr(ix, "storage", None), "folder", None)
        if folder and not isinstance(exc, OSError):  # a missing file is a writer's commit racing us, not damage
            mark_damaged(Path(folder))  # unreadable on a fresh look too: the next sync rebuilds it
        raise


def marked_damaged(folder: Path) -> bool:
    """An index folder without its schema stamp: `mark_damaged` was here (or a build never finished)."""
    return folder.is_dir() and not _version_file(folder).exists()


def mark_damaged(folder: Path) -> None:
    """Remove the schema stamp: the index no longer opens (searches answer from the vectors), and the next
    sync that uses it sees a changed index and rebuilds it. For a reader, which may not rebuild itself."""
    try:
        _version_file(folder).unlink()
    except OSError:
        pass
