"""The Whoosh full-text index: BM25F over title, body and tags.

Title and tags are boosted; questions in plain language work because the
analyzer lowercases, drops stop words and stems ("databases?" finds
"database"), and the query text is reduced to words before parsing, so
punctuation and Whoosh's own query syntax (AND, *, field:) cannot break it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = "1"
TITLE_BOOST = 3.0
TAGS_BOOST = 2.0


def _schema() -> Any:
    from whoosh.analysis import StemmingAnalyzer
    from whoosh.fields import ID, KEYWORD, TEXT, Schema

    analyzer = StemmingAnalyzer()
    return Schema(
        path=ID(stored=True, unique=True),
        id=ID(stored=True),
        title=TEXT(analyzer=analyzer, field_boost=TITLE_BOOST),
        body=TEXT(analyzer=analyzer),
        tags=KEYWORD(lowercase=True, commas=True, scorable=True, field_boost=TAGS_BOOST),
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


def document(rel: str, meta: dict[str, Any], body: str) -> dict[str, Any]:
    return {
        "path": rel,
        "id": meta["id"],
        "title": meta["title"],
        "body": body,
        "tags": ",".join(meta.get("tags", [])),
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
           branch: str | None = None) -> list[tuple[str, float]]:
    """BM25F search; returns (path, score) best first."""
    from whoosh import query as q
    from whoosh.qparser import MultifieldParser, OrGroup

    words = query_words(text)
    if not words:
        return []
    parser = MultifieldParser(["title", "body", "tags"], schema=ix.schema, group=OrGroup.factory(0.9))
    parsed = parser.parse(" ".join(words))
    filters = []
    statuses, types = list(statuses), list(types)
    if statuses:
        filters.append(q.Or([q.Term("status", s) for s in statuses]))
    if types:
        filters.append(q.Or([q.Term("type", t) for t in types]))
    if branch is not None:
        filters.append(q.Term("branch", branch))
    allow = q.And(filters) if filters else None
    with ix.searcher() as searcher:
        hits = searcher.search(parsed, limit=limit, filter=allow)
        return [(hit["path"], float(hit.score)) for hit in hits]
