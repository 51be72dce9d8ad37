"""The Whoosh full-text index: BM25F over title, tags and body.

BM25F weights a term's frequency in each field before saturating it:
tf = 3·tf(title) + 2·tf(tags) + tf(body). cortex indexes exactly that, one
`text` field holding the title three times, the tags twice and the body, and
scores it with Whoosh's BM25 — one posting list per query word instead of
three, which makes a query ~3x faster than Whoosh's per-field boosts (and is
closer to BM25F proper, which sums weighted frequencies, not scores).

Questions in plain language work because cortex's analyzer (`terms`)
lowercases, drops stop words and question words ("how do we…"), keeps an
identifier or a file name whole as well as its parts (`cortex/index.py`,
`useEffect`, `X-CSRFToken`), and stems lightly ("databases?" finds
"database", but "logged in" does not find "logging"). The query goes
through the same analyzer and becomes plain terms, so punctuation and
Whoosh's own query syntax (AND, *, field:) cannot break it.
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


def _import_whoosh() -> None:
    """Import Whoosh without two modules it never uses here, which cost a hook's process ~35 ms between them:
    `whoosh.compat` imports `urllib.request` (and so `email`, `http.client`) for a download helper, and
    `whoosh.reading` the `cached_property` package, which imports `asyncio`. Stand-ins are in `sys.modules`
    only while Whoosh imports (the download helper then raises; `functools.cached_property` does the same
    job), so any later import of either module gets the real one."""
    import sys

    if "whoosh.reading" in sys.modules:
        return
    import functools
    import importlib
    import types

    def urlretrieve(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Whoosh's urlretrieve is not available in cortex")

    request, cached = types.ModuleType("urllib.request"), types.ModuleType("cached_property")
    request.urlretrieve = urlretrieve  # type: ignore[attr-defined]
    cached.cached_property = functools.cached_property  # type: ignore[attr-defined]
    stand_ins = {name: module for name, module in (("urllib.request", request), ("cached_property", cached))
                 if name not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        importlib.import_module("whoosh.compat")
        importlib.import_module("whoosh.reading")
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def open_index(folder: Path, create: bool = False) -> Any:
    """Open the index; None when missing, of another schema or broken (the caller rebuilds)."""
    _import_whoosh()
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


def apply(ix: Any, deletes: Iterable[str], documents: Iterable[dict[str, Any]], bulk: bool = False,
          procs: int = 1) -> None:
    """Delete paths and add or replace documents in one commit. A bulk build may use `procs` processes
    (Whoosh's multiprocessing writer, one segment each): 100,000 memories in 98 s instead of 155 s on 2 cores.
    Pools of 64 MB each: larger ones put such a build over 500 MB (256 MB: 0.76 GB)."""
    if bulk and procs > 1:
        writer = ix.writer(limitmb=64, procs=procs, multisegment=True)
    else:
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


def _lengths_at_once(reader: Any, count: int) -> Any:
    """`doc_field_length(n, "text", 1)` of documents 0..count-1 read from the whoosh3 codec's per-segment
    lengths columns (one byte a document, `byte_to_length` of it), or None for another layout."""
    import numpy as np
    from whoosh.codec.whoosh3 import LENGTHS_COLUMN, W3PerDocReader, _lenfield
    from whoosh.util.numeric import byte_to_length

    table = np.array([byte_to_length(code) for code in range(256)], dtype=np.float64)
    out = np.ones(count, dtype=np.float64)  # a segment with no lengths column: the default asked for, 1
    for leaf, base in reader.leaf_readers():
        perdoc = getattr(leaf, "_perdoc", None)
        if not isinstance(perdoc, W3PerDocReader):
            return None
        column = perdoc._cached_reader(_lenfield("text"), LENGTHS_COLUMN)
        docs = leaf.doc_count_all()
        if column is None:
            continue
        if getattr(column, "_fixedlen", None) != 1 or base + docs > count:
            return None
        stored = min(column._count, docs)
        codes = np.zeros(docs, dtype=np.uint8)  # past the stored ones: the column's default, 0
        codes[:stored] = np.frombuffer(column._dbfile.get(column._basepos, stored), dtype=np.uint8)
        out[base:base + docs] = table[codes]
    return out


def postings_walked(searcher: Any, field: str, text: str) -> tuple[Any, Any]:
    """(document numbers, weights) of a term's postings through Whoosh's public matcher, posting by posting
    (deleted documents are filtered out already): what `_postings_at_once` reads faster."""
    import numpy as np
    from whoosh.reading import TermNotFound

    ids: list[int] = []
    weights: list[float] = []
    try:
        matcher = searcher.postings(field, text)
        while matcher.is_active():
            ids.append(matcher.id())
            weights.append(matcher.weight())
            matcher.next()
    except TermNotFound:
        pass
    return np.asarray(ids, dtype=np.int64), np.asarray(weights, dtype=np.float64)


def _postings_at_once(reader: Any, field: str, text: str, dead: Any = None) -> tuple[Any, Any] | None:
    """(document numbers, weights) of a term's postings, deleted documents left out: what walking
    `searcher.postings(field, text)` one posting at a time gives (~4 µs a posting in Python: ~20 ms for a
    common word at 100,000 memories), read from the whoosh3 codec's postings file in one piece (`_blocks`).
    `dead`: every deleted document as a mask over the reader's numbers (`Postings`), else each segment's set is
    looked up (`np.isin`, ~0.1 ms a term). None for another layout."""
    import numpy as np
    from whoosh.codec.whoosh3 import W3TermsReader
    from whoosh.reading import SegmentReader, TermNotFound

    ids: list[Any] = []
    weights: list[Any] = []
    for leaf, base in reader.leaf_readers():
        if not isinstance(leaf, SegmentReader) or not isinstance(leaf._terms, W3TermsReader):
            return None
        if field not in leaf.schema:
            continue
        try:
            info = leaf._terms.term_info(field, leaf._text_to_bytes(field, text))
        except TermNotFound:
            continue
        if info._inlined is None:  # blocks in the postings file
            extent = info._length  # whoosh decodes it as a 1-tuple (`unpack_int` without its `[0]`)
            read = _blocks(leaf._terms._postfile.get(info._offset, extent[0] if isinstance(extent, tuple) else extent))
            if read is None:
                return None
            docs, each = read
        else:  # a term with one posting, kept in the term's own entry (a ListMatcher): posting by posting
            matcher = leaf._terms.matcher(field, leaf._text_to_bytes(field, text), leaf.schema[field].format)
            one: list[int] = []
            walked: list[float] = []
            while matcher.is_active():
                one.append(matcher.id())
                walked.append(matcher.weight())
                matcher.next()
            docs, each = np.asarray(one, dtype=np.int64), np.asarray(walked, dtype=np.float64)
        if dead is None:
            deleted = leaf.deleted_docs_set
            if deleted and len(docs):
                keep = ~np.isin(docs, np.fromiter(deleted, dtype=np.int64, count=len(deleted)))
                docs, each = docs[keep], each[keep]
        elif len(docs):
            keep = ~dead[docs + base]
            docs, each = docs[keep], each[keep]
        ids.append(docs + base)
        weights.append(each)
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    return np.concatenate(ids), np.concatenate(weights)


_SIZES = {75: 2, 77: 3, 74: 5}  # pickle's BININT1 ("K"), BININT2 ("M"), BININT: an int and its opcode's size
_BLOCK_LENGTH = None  # struct of a block's length (whoosh's `write_int`: big-endian int32), made on first use


def _blocks(raw: bytes) -> tuple[Any, Any] | None:
    """(document numbers, weights) of one segment's postings of a term, as whoosh3's `W3PostingsWriter` wrote
    them (`W3Bl`, then blocks: a length, negative for the last; a pickled info tuple; the pickled (delta-coded
    ids, weights, values), zlib-compressed when the info says so; weights None for all 1.0, one float for all
    alike). Each block's ids and weights are read from the start of its pickle (`_ids_and_weights`), its
    values (each posting's positions, unpickled one `_codecs.encode` call at a time) neither decompressed nor
    unpickled: a common word at 100,000 memories (25,000 postings, 196 blocks) in 3.8 ms, against 10.5 ms
    unpickling its blocks whole. A fresh server's first prompts read every word this way. None for another layout."""
    import io
    import pickle
    import struct
    import zlib

    import numpy as np

    global _BLOCK_LENGTH
    if _BLOCK_LENGTH is None:
        _BLOCK_LENGTH = struct.Struct("!i")
    if raw[:4] != b"W3Bl":
        return None
    stream = io.BytesIO(raw)
    ids: list[Any] = []
    weights: list[Any] = []
    counts: list[int] = []
    pos = 4
    while True:
        (length,) = _BLOCK_LENGTH.unpack_from(raw, pos)
        stream.seek(pos + 4)
        info = pickle.load(stream)
        count, compressed = info[0], info[3]
        end = pos + 4 + abs(length)
        data = raw[stream.tell():end]
        # At most 5 bytes an id and 9 a weight, and a few for the tuples' marks and memo entries.
        head = zlib.decompressobj().decompress(data, 14 * count + 32) if compressed else data
        read = _ids_and_weights(head, count)
        if read is None:  # a block of up to 3 postings (its tuples pickled another way), or another shape
            block_ids, block_weights, _values = pickle.loads(zlib.decompress(data) if compressed else data)
            read = np.asarray(block_ids, dtype=np.int64), block_weights
        block_ids, block_weights = read
        ids.append(block_ids)
        counts.append(len(block_ids))
        if block_weights is None or isinstance(block_weights, float):
            weights.append(np.full(len(block_ids), 1.0 if block_weights is None else block_weights))
        else:
            weights.append(np.asarray(block_weights, dtype=np.float64))
        if length < 0 or end >= len(raw):
            break
        pos = end
    summed = np.cumsum(np.concatenate(ids))  # each block's ids are deltas from its own first
    starts = np.cumsum([0] + counts[:-1])
    before = np.where(starts > 0, summed[np.maximum(starts - 1, 0)], 0)
    return summed - np.repeat(before, counts), np.concatenate(weights)


def _ids_and_weights(head: bytes, count: int) -> tuple[Any, Any] | None:
    """The delta-coded ids and the weights at the start of a postings block's pickle (protocol 2: a mark, the
    ids as ints of 1, 2 or 4 bytes, the tuple and its memo entry; the weights as None, one float, or a mark, an
    8-byte float each, the tuple), read with numpy where every id takes one byte, else an id at a time; None
    for any other shape (the caller unpickles the block)."""
    import numpy as np

    if count < 4 or head[:3] != b"\x80\x02(":
        return None
    raw = np.frombuffer(head, dtype=np.uint8)
    ids = np.empty(count, dtype=np.int64)
    first = _SIZES.get(head[3], 0)  # the first id is a document's number, the others deltas: mostly one byte
    end = 3 + first + 2 * (count - 1)
    if first and len(head) > end and head[end] == 116 and (raw[3 + first:end:2] == 75).all():  # "K" each, "t"
        ids[0] = int.from_bytes(head[4:3 + first], "little", signed=first == 5)  # "M" unsigned
        ids[1:] = raw[4 + first:end:2]
    else:  # some ids after the first take two bytes ("M") or four ("J")
        end = 3
        try:
            for k in range(count):
                op = head[end]
                if op == 75:
                    ids[k] = head[end + 1]
                    end += 2
                elif op == 77:
                    ids[k] = head[end + 1] | head[end + 2] << 8
                    end += 3
                elif op == 74:
                    ids[k] = int.from_bytes(head[end + 1:end + 5], "little", signed=True)
                    end += 5
                else:
                    return None
            if head[end] != 116:
                return None
        except IndexError:
            return None
    pos = end + 1
    pos += {b"q": 2, b"r": 5}.get(head[pos:pos + 1], 0)  # the ids tuple's memo entry
    kind = head[pos:pos + 1]
    if kind == b"N":
        return ids, None
    if kind == b"G" and len(head) >= pos + 9:
        return ids, float(np.frombuffer(head, dtype=">f8", count=1, offset=pos + 1)[0])
    if kind != b"(" or head[pos + 1 + 9 * count:pos + 2 + 9 * count] != b"t":
        return None
    if not (raw[pos + 1:pos + 1 + 9 * count:9] == 71).all():  # 71: BINFLOAT ("G")
        return None
    weights = np.ndarray((count,), dtype=">f8", buffer=head, offset=pos + 2, strides=(9,)).astype(np.float64)
    return ids, weights


def warm(searcher: Any) -> None:
    """Make a resident process's searcher ready for its next search: the in-memory postings scorer
    (`Postings`, used from a searcher's second search on) made now, with what every search reads."""
    memo = getattr(searcher, "_cortex_postings", None)
    if memo is None:
        memo = searcher._cortex_postings = Postings(searcher)
    memo._field_lengths()  # what every search reads
    memo._deleted()
    for leaf, _base in searcher.reader().leaf_readers():  # a hit's path: each segment's stored fields opened
        if leaf.doc_count_all():  # (~3.5 ms for a segment of 50,000 documents, at its first hit's path)
            try:
                leaf.stored_fields(0)
            except Exception:  # damaged: the search that reads it says so
                pass


def warm_paths(searcher: Any) -> None:
    """Read every document's path for a resident process's searcher, beside the requests (`Postings.paths`)."""
    memo = getattr(searcher, "_cortex_postings", None)
    if memo is not None:
        memo.read_paths()


def search(ix: Any, text: str, limit: int, statuses: Iterable[str] = (), types: Iterable[str] = (),
           branch: str | None = None, searcher: Any = None) -> list[tuple[str, float]]:
    """BM25F search; returns (path, score) best first. Pass an open `searcher` to reuse it."""
    from whoosh import query as q

    try:  # a searcher's schema is in memory; an index reads its table of contents for each `schema`
        analyzer = (searcher or ix).schema["text"].analyzer
    except OSError:  # a writer's commit replaced the table of contents as it was read: the new one
        analyzer = ix.schema["text"].analyzer
    wanted = list(dict.fromkeys(token.text for token in analyzer(text)))
    if not wanted:
        return []
    parsed = q.Or([q.Term("text", term) for term in wanted])
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
            memo = getattr(searcher, "_cortex_postings", None)
            if memo is not None:  # a searcher asked again (a resident process): BM25F over postings in memory
                return memo.search(wanted, limit, {"status": statuses, "type": types,
                                                   "branch": [branch] if branch is not None else []})
            searcher._cortex_postings = Postings(searcher)  # from the second search on
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


class Postings:
    """Whoosh's BM25F (the same idf, average length, B and K1, from its own scorer) computed with numpy over
    each term's postings, read once per searcher and kept: Whoosh scores every matching document in Python
    (~1,150 a query at 10,000 memories, 70 % of a warm recall; 85 % at 100,000), this adds one array per
    query term. Used by a searcher's second and later searches (a resident process); results equal Whoosh's,
    ties broken the same way (the lower document number first)."""

    def __init__(self, searcher: Any) -> None:
        import threading

        self.searcher = searcher
        self._terms: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._lengths: Any = None
        self._paths: dict[int, str] = {}
        # Every document's path by number (`read_paths`, beside the requests): a hit's path was read from its
        # stored fields the first time it came up, ~1 ms of each of a fresh server's first prompts at 10,000.
        self.paths: list[str | None] | None = None
        self._dead: Any = None  # every deleted document, as a mask over the document numbers
        self._scratch: tuple[Any, Any] | None = None  # the per-document totals and matches of `search`, reused
        self._scratch_lock = threading.Lock()

    def _postings(self, field: str, text: str) -> tuple[Any, Any]:
        """(document numbers, BM25F scores) of a term; the scores only for the text field."""
        key = (field, text)
        found = self._terms.get(key)
        if found is None:
            try:
                read = _postings_at_once(self.searcher.reader(), field, text, self._deleted())
            except Exception:  # another codec, or Whoosh's internals moved: the public way below
                read = None
            docs, tf = read if read is not None else postings_walked(self.searcher, field, text)
            scores = None
            if field == "text" and len(docs):
                scorer = self.searcher.weighting.scorer(self.searcher, field, text)
                length = self._field_lengths()[docs]
                scores = scorer.idf * ((tf * (scorer.K1 + 1)) /
                                       (tf + scorer.K1 * ((1 - scorer.B) + scorer.B * length / scorer.avgfl)))
            found = self._terms[key] = (docs, scores)
        return found

    def _field_lengths(self) -> Any:
        """Every document's length in the text field, as Whoosh's scorer reads it: from each segment's lengths
        column in one read (asked document by document, ~0.4 s at 100,000 memories: a served prompt's first
        search after each sync paid it), or one by one where the layout is not the one known."""
        if self._lengths is None:
            import numpy as np

            searcher = self.searcher
            count = searcher.doc_count_all()
            try:
                self._lengths = _lengths_at_once(searcher.reader(), count)
            except Exception:  # another codec, or Whoosh's internals moved: the public way
                self._lengths = None
            if self._lengths is None:
                self._lengths = np.fromiter((searcher.doc_field_length(n, "text", 1) for n in range(count)),
                                            dtype=np.float64, count=count)
        return self._lengths

    def search(self, terms: list[str], limit: int, filters: dict[str, list[str]]) -> list[tuple[str, float]]:
        import numpy as np

        # The per-document totals and matches are kept, and what a search set is zeroed after it: new arrays of
        # this size, or zeroing them whole, cost ~0.5 ms each a search at 100,000 memories (page faults, and
        # memory the static model's product is reading meanwhile). A search beside another makes its own.
        count = self.searcher.doc_count_all()
        mine = self._scratch_lock.acquire(blocking=False)
        try:
            if not mine:
                return self._search(terms, limit, filters, np.zeros(count), np.zeros(count, dtype=bool))
            if self._scratch is None or self._scratch[0].shape[0] != count:
                self._scratch = np.zeros(count), np.zeros(count, dtype=bool)
            total, matched = self._scratch
            try:
                return self._search(terms, limit, filters, total, matched)
            finally:
                for term in terms:  # each term's postings read so far: what it may have set
                    found = self._terms.get(("text", term))
                    if found is not None:
                        total[found[0]] = 0.0
                        matched[found[0]] = False
        finally:
            if mine:
                self._scratch_lock.release()

    def _search(self, terms: list[str], limit: int, filters: dict[str, list[str]], total: Any, matched: Any
                ) -> list[tuple[str, float]]:
        import numpy as np

        for term in terms:
            docs, scores = self._postings("text", term)
            if docs.size:
                total[docs] += scores
                matched[docs] = True
        for field, values in filters.items():
            if values:
                allowed = np.zeros(total.shape[0], dtype=bool)
                for value in values:
                    allowed[self._postings(field, value)[0]] = True
                matched &= allowed
        candidates = np.flatnonzero(matched)
        if candidates.size > limit:
            scores = total[candidates]
            keep = np.argpartition(-scores, limit - 1)[:limit]
            threshold = scores[keep].min()  # every document tied with the last kept one competes on its number
            candidates = candidates[scores >= threshold]
        order = sorted(candidates.tolist(), key=lambda n: (-total[n], n))[:limit]
        return [(self._path(n), float(total[n])) for n in order]

    def _deleted(self) -> Any:
        """A mask of the deleted documents over the searcher's document numbers (made once)."""
        if self._dead is None:
            import numpy as np

            dead = np.zeros(self.searcher.doc_count_all(), dtype=bool)
            for leaf, base in self.searcher.reader().leaf_readers():
                deleted = getattr(leaf, "deleted_docs_set", None)  # an index without documents: an EmptyReader
                if deleted:
                    dead[base + np.fromiter(deleted, dtype=np.int64, count=len(deleted))] = True
            self._dead = dead
        return self._dead

    def read_paths(self) -> None:
        """Read every live document's path from the stored fields (~46 ms at 10,000 memories, ~0.5 s at
        100,000) into `paths`, put in place whole once read. Through a reader of its own (this runs beside the
        searches, and a segment outside a compound file is read with a seek and a read), of the same
        generation as the searcher's, so the document numbers are the same; nothing when the index moved on."""
        ix = getattr(self.searcher, "_ix", None)
        if self.paths is not None or ix is None:
            return
        count = self.searcher.doc_count_all()
        paths: list[str | None] = [None] * count
        with ix.reader() as reader:
            if reader.generation() != self.searcher.reader().generation() or reader.doc_count_all() != count:
                return
            for leaf, base in reader.leaf_readers():
                deleted = getattr(leaf, "deleted_docs_set", None) or ()  # an EmptyReader has none
                for number in range(leaf.doc_count_all()):
                    if number not in deleted:
                        paths[base + number] = leaf.stored_fields(number)["path"]
        self.paths = paths

    def _path(self, docnum: int) -> str:
        known = self.paths
        if known is not None and known[docnum] is not None:
            return known[docnum]  # type: ignore[return-value]
        path = self._paths.get(docnum)
        if path is None:
            path = self._paths[docnum] = self.searcher.stored_fields(docnum)["path"]
        return path


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
