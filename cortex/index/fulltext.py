"""The Whoosh full-text index: BM25F over title, tags and body, scored by Whoosh.

BM25F weights a term's frequency in each field before saturating it:
tf = 3·tf(title) + 2·tf(tags) + tf(body). cortex indexes exactly that, one
`text` field holding the title three times, the tags twice and the body, and
searches it with Whoosh's own `scoring.BM25F` (B 0.75, K1 1.2: Whoosh's
defaults) through its public API: one posting list per query word instead of
three (closer to BM25F proper, which sums weighted frequencies, not scores).

Questions in plain language work because cortex's analyzer (`terms`)
lowercases, drops stop words and question words ("how do we…"), keeps an
identifier or a file name whole as well as its parts (`cortex/index.py`,
`useEffect`, `X-CSRFToken`), and stems lightly ("databases?" finds
"database", but "logged in" does not find "logging"). The query goes
through the same analyzer and becomes plain `Term` queries, so punctuation
and Whoosh's own query syntax (AND, *, field:) cannot break it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = "3"  # 3: cortex's own analyzer (identifiers whole, light stemming, question words)
TITLE_BOOST = 3  # times the title is repeated in the indexed text
TAGS_BOOST = 2


# Words that carry no meaning in a question or a memory: Whoosh's English stop words, question words, and the
# filler of how people ask ("how do we…", "what should I use…"). Dropped on both sides.
STOP_WORDS = frozenset(
    "a about after all also am an and any are as at be been being but by can could did do does doing done each for "
    "from get gets got had has have having how i if in into is it its just me my no not of on or our ours should so "
    "some than that the their them then there these they this those to too us use used uses using was we were what "
    "when where which while who whom whose why will with would yet you your tbd may might must".split())
_TOKEN = r"\w+(?:[./\-]\w+)*"  # an identifier or a file name is one token: snake_case, a.b.c, src/x.py, X-CSRF-Token
_PARTS = re.compile(r"[./\-_]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def light_stem(word: str) -> str:
    """A light English stemmer for developers' text: plurals, -ed and -ing, a final e or y, so "databases",
    "deployed" and "caching" find "database", "deploy" and "cache". Unlike Porter it keeps a word whose
    suffix follows a doubled consonant ("logged", "logging": "logged in" is not about logging) and never
    cuts a stem under four letters."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            base = word[: -len(suffix)]
            if base[-1] == base[-2] and base[-1] not in "lsz":
                return word  # logged, stopped, planning: the doubled consonant makes the stem ambiguous
            word = base
            break
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 4 and word.endswith("y"):
        word = word[:-1] + "i"
    return word


def terms(text: str) -> list[str]:
    """The index terms of a text, in order: each identifier or file name whole (lowercased) and its parts
    (split at . / - _ and camelCase), every word stemmed by `light_stem`, stop words dropped."""
    out: list[str] = []
    seen = _TERMS_OF
    if len(seen) > 200_000:  # a bound on the memo for a long-lived process
        seen.clear()
    for token in _TOKEN_RE.findall(text):
        found = seen.get(token)
        if found is None:
            found = seen[token] = _token_terms(token)
        out += found
    return out


_TOKEN_RE = re.compile(_TOKEN)
_TERMS_OF: dict[str, tuple[str, ...]] = {}  # token -> its terms: words repeat, and a reindex meets each ~100 times


def _token_terms(token: str) -> tuple[str, ...]:
    parts = [p for chunk in _PARTS.split(token) for p in _CAMEL.split(chunk) if p]
    out = [token.lower()] if len(parts) > 1 else []
    for part in parts:
        lower = part.lower()
        if lower not in STOP_WORDS and (len(lower) > 1 or lower.isdigit()):
            out.append(light_stem(lower))
    return tuple(out)


class _Analyzer:
    """A Whoosh analyzer (tokenizer and filters in one) over `terms`: picklable, so the index's schema can
    name it."""

    def __call__(self, value: str, positions: bool = False, chars: bool = False, keeporiginal: bool = False,
                 removestops: bool = True, start_pos: int = 0, start_char: int = 0, tokenize: bool = True,
                 mode: str = "", **kwargs: Any) -> Any:
        from whoosh.analysis import Token

        token = Token(positions, chars, removestops=removestops, mode=mode, **kwargs)
        words = terms(value) if tokenize else [value]
        for pos, word in enumerate(words):
            token.text = word
            token.boost = 1.0
            token.stopped = False
            if keeporiginal:
                token.original = word
            if positions:
                token.pos = start_pos + pos
            if chars:
                token.startchar = start_char
                token.endchar = start_char + len(word)
            yield token

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Analyzer)

    def __hash__(self) -> int:
        return hash("cortex-analyzer")

    def has_morph(self) -> bool:
        return True

    def clean(self) -> None:
        pass


def _schema() -> Any:
    from whoosh.fields import ID, KEYWORD, TEXT, Schema  # noqa: F401

    analyzer = _Analyzer()
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
    """Delete paths and add (a bulk build) or replace documents in one commit."""
    writer = ix.writer(limitmb=128 if bulk else 64)
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
    """Whoosh's BM25F search of the query's terms, any of them, filtered by status, type and branch; returns
    (path, score) best first. Pass an open `searcher` to reuse it (`ix.searcher()` scores with Whoosh's default
    weighting, the same BM25F as `_weighting`)."""
    from whoosh import query as q

    wanted = list(dict.fromkeys(terms(text)))  # what the schema's analyzer makes of it
    if not wanted:
        return []
    parsed = q.Or([q.Term("text", term) for term in wanted])
    filters: list[Any] = [q.Or([q.Term(field, value) for value in values])
                          for field, values in (("status", list(statuses)), ("type", list(types))) if values]
    if branch is not None:
        filters.append(q.Term("branch", branch))
    allow = q.And(filters) if filters else None
    if searcher is not None:
        try:
            return _hits(searcher, parsed, limit, allow)
        except Exception:
            pass  # a writer replaced the index under this searcher, or a segment is damaged: look again
    try:
        with ix.searcher(weighting=_weighting()) as own:  # reads the latest table of contents
            return _hits(own, parsed, limit, allow)
    except Exception as exc:
        folder = getattr(getattr(ix, "storage", None), "folder", None)
        if folder and not isinstance(exc, OSError):  # a missing file is a writer's commit racing us, not damage
            mark_damaged(Path(folder))  # unreadable on a fresh look too: the next sync rebuilds it
        raise


def _weighting() -> Any:
    from whoosh import scoring

    return scoring.BM25F(B=0.75, K1=1.2)  # Whoosh's defaults, as an `ix.searcher()` without arguments scores


def _hits(searcher: Any, parsed: Any, limit: int, allow: Any) -> list[tuple[str, float]]:
    return [(hit["path"], float(hit.score)) for hit in searcher.search(parsed, limit=limit, filter=allow)]


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
