"""The memory file format: parsing, validation, writing, round trips."""

from __future__ import annotations

import difflib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex import memory as fmt
from cortex.errors import MalformedMemory
from cortex.memory import Link, Memory
from tests.helpers import CANONICAL_MEMORY

CANONICAL = CANONICAL_MEMORY


def test_parse_reads_every_field_of_the_design_example():
    m = fmt.parse(CANONICAL)
    assert (m.id, m.type, m.status, m.branch) == ("3f9a1c07d2e4", "decision", "active", "main")
    assert m.title == "Use SQLite, not Postgres, for the local cache"
    assert (m.confidence, m.priority, m.pinned, m.scope) == (0.9, 7, False, "project")
    assert m.tags == ["storage", "cache"] and m.files == ["cortex/index/store.py"]
    assert m.created == m.updated == "2026-11-21T20:50:00Z"
    assert m.source == {"kind": "transcript", "session": "5c1e", "layer": "self-report"}
    assert m.links == [Link("relates_to", "8b0d52e1aa90", 0.42)]
    assert m.body.startswith("We keep the cache in SQLite") and "Rejected: Postgres" in m.body


def test_a_person_s_comments_and_block_style_are_read_through_ruamel():
    text = CANONICAL.replace("priority: 7", "# why 7: it shapes every query\npriority: 7  # was 5").replace(
        "tags: [storage, cache]", "tags:\n  - storage\n  - cache"
    )
    m = fmt.parse(text)
    assert m.priority == 7 and m.tags == ["storage", "cache"]


@pytest.mark.parametrize(
    "change, reason",
    [
        (("type: decision", "type: opinion"), "type: unknown type 'opinion'"),
        (("confidence: 0.9", "confidence: 1.5"), "confidence: 1.5 is outside 0..1"),
        (("confidence: 0.9", "confidence: -0.1"), "confidence: -0.1 is outside 0..1"),
        (("priority: 7", "priority: 11"), "priority: 11 is outside 1..10"),
        (("priority: 7", "priority: 0"), "priority: 0 is outside 1..10"),
        (("rel: relates_to", "rel: likes"), "links: unknown relation 'likes'"),
        (("id: 3f9a1c07d2e4\n", ""), "missing required field 'id'"),
        (("title: Use SQLite, not Postgres, for the local cache\n", ""), "missing required field 'title'"),
        (("id: 3f9a1c07d2e4", "id: 42"), "id: '42' is not 12 lowercase hex characters"),
        (("status: active", "status: deleted"), "status: unknown status 'deleted'"),
        (("pinned: false", "pinned: maybe"), "pinned: expected true or false"),
        (("created: 2026-11-21T20:50:00Z", "created: last tuesday"), "created: 'last tuesday' is not a timestamp"),
        (("tags: [storage, cache]", "tags: {a: b}"), "tags: expected a list of strings"),
    ],
)
def test_validation_errors_name_the_file_and_the_field(tmp_path, change, reason):
    path = tmp_path / "bad.md"
    with pytest.raises(MalformedMemory) as caught:
        fmt.parse(CANONICAL.replace(*change), path)
    assert caught.value.path == path
    assert reason in caught.value.reason
    assert str(caught.value).startswith(str(path))


@pytest.mark.parametrize(
    "text, reason",
    [
        ("just some notes\n", "no front matter"),
        ("---\nid: 3f9a1c07d2e4\n", "front matter is not closed"),
        ("---\nid: [unclosed\n---\nbody\n", "not valid YAML"),
        ("---\n- a\n- b\n---\n", "must be a mapping"),
    ],
)
def test_broken_files_are_reported_not_crashed_on(text, reason):
    with pytest.raises(MalformedMemory) as caught:
        fmt.parse(text)
    assert reason in caught.value.reason


def test_edit_keeps_comments_order_and_quoting_and_changes_only_that_line():
    text = CANONICAL.replace("title: Use SQLite, not Postgres, for the local cache",
                             "title: \"Use SQLite, not Postgres, for the local cache\"  # keep quotes")
    text = text.replace("status: active", "# reviewed by ana\nstatus: active")
    edited = fmt.edit_text(text, {"priority": 9})
    diff = [line for line in difflib.ndiff(text.splitlines(), edited.splitlines()) if line[:1] in "+-"]
    assert diff == ["- priority: 7", "+ priority: 9"]


def test_edit_of_timestamps_and_links_keeps_the_canonical_style():
    edited = fmt.edit_text(CANONICAL, {"updated": "2026-12-01T08:00:00Z",
                                       "links": [{"rel": "relates_to", "to": "8b0d52e1aa90", "strength": 0.42},
                                                 {"rel": "supersedes", "to": "aaaaaaaaaaaa"}]})
    assert "updated: 2026-12-01T08:00:00Z\n" in edited
    assert "  - {rel: supersedes, to: aaaaaaaaaaaa}\n" in edited
    assert fmt.parse(edited).links[1] == Link("supersedes", "aaaaaaaaaaaa")


def test_slug_and_title_helpers():
    assert fmt.slugify("Use SQLite, not Postgres — for the *local* cache!") == "use-sqlite-not-postgres-for-the-local-cache"
    assert fmt.slugify("∑∑∑") == "memory"
    assert len(fmt.slugify("word " * 40)) <= 48
    assert fmt.title_from_text("Ship it. Then measure.") == "Ship it"
    assert fmt.new_id() != fmt.new_id() and fmt.ID_RE.match(fmt.new_id())


# ------------------------------------------------------------------ properties

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\ufeff\x85"),
    min_size=1, max_size=60,
).filter(lambda s: s.strip() == s and s.strip())
_word = st.from_regex(r"[a-z][a-z0-9_./-]{0,15}", fullmatch=True)
_stamp = st.datetimes(
    min_value=__import__("datetime").datetime(2000, 1, 1), max_value=__import__("datetime").datetime(2099, 1, 1)
).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ"))
_links = st.lists(
    st.builds(Link, rel=st.sampled_from(fmt.RELATIONS), to=st.from_regex(r"[0-9a-f]{12}", fullmatch=True),
              strength=st.one_of(st.none(), st.floats(0, 1).map(lambda x: round(x, 3)))),
    max_size=3,
)
memories = st.builds(
    Memory,
    id=st.from_regex(r"[0-9a-f]{12}", fullmatch=True),
    type=st.sampled_from(fmt.TYPES),
    title=_text,
    body=st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\t\n\r\f"), max_size=200),
    status=st.sampled_from(fmt.STATUSES),
    confidence=st.floats(0, 1).map(lambda x: round(x, 3)),
    priority=st.integers(1, 10),
    pinned=st.booleans(),
    scope=st.sampled_from(fmt.SCOPES),
    branch=st.one_of(st.none(), _word, _text),
    tags=st.lists(st.one_of(_word, _text), max_size=4),
    files=st.lists(st.one_of(_word, _text), max_size=3),
    created=_stamp,
    updated=_stamp,
    source=st.dictionaries(_word, st.one_of(_word, _text, st.integers(0, 10**6)), max_size=3),
    links=_links,
)


def _ruamel_roundtrip(text: str) -> str:
    yaml_text, body = fmt.split_front_matter(text)
    yaml = fmt._yaml()
    buffer = io.StringIO()
    yaml.dump(yaml.load(yaml_text), buffer)
    return f"---\n{buffer.getvalue()}---\n{body}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memories)
def test_parse_then_write_gives_the_same_bytes(memory):
    text = fmt.render_new(memory)
    assert _ruamel_roundtrip(text) == text
    assert fmt.edit_text(text, {}) == text
    parsed = fmt.parse(text)
    expected_body = memory.body if not memory.body or memory.body.endswith("\n") else memory.body + "\n"
    assert parsed.body == expected_body
    assert fmt.render_new(parsed) == text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memories)
def test_fast_reader_agrees_with_ruamel(memory):
    text = fmt.render_new(memory)
    yaml_text, _ = fmt.split_front_matter(text)
    from ruamel.yaml import YAML

    slow = fmt._to_plain(YAML(typ="safe", pure=True).load(yaml_text))
    assert fmt.load_front_matter(yaml_text) == slow


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memories, st.sampled_from(["title", "priority", "confidence", "status", "pinned", "tags", "updated"]), st.data())
def test_editing_one_field_changes_only_its_line(memory, key, data):
    text = fmt.render_new(memory)
    new_values = {
        "title": _text, "priority": st.integers(1, 10), "confidence": st.floats(0, 1).map(lambda x: round(x, 3)),
        "status": st.sampled_from(fmt.STATUSES), "pinned": st.booleans(), "tags": st.lists(_word, max_size=3),
        "updated": _stamp,
    }
    value = data.draw(new_values[key])
    edited = fmt.edit_text(text, {key: value})
    before, after = text.splitlines(), edited.splitlines()
    assert len(before) == len(after)
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert all(before[i].startswith(f"{key}:") for i in changed)
    assert getattr(fmt.parse(edited), key) == value


def test_the_files_cortex_writes_take_the_fast_reader():
    yaml_text, _ = fmt.split_front_matter(CANONICAL)
    assert fmt._read_simple(yaml_text)["links"] == [{"rel": "relates_to", "to": "8b0d52e1aa90", "strength": 0.42}]


@pytest.mark.parametrize("title", ["one\u2028two", "one\u2029two", "a\ttab"])
def test_a_title_with_a_yaml_line_break_character_round_trips(title):
    """NEL and the Unicode line and paragraph separators are line breaks to YAML: written plain, ruamel folded
    them into spaces on reading (the fuzz test found "P\\x85ostgres" read back as "P\\x85  ostgres")."""
    item = fmt.Memory(id="3f9a1c07d2e4", type="decision", title=title, body="Why.\n", tags=[title])
    written = fmt.render_new(item)
    again = fmt.parse(written)
    assert again.title == title and again.tags == [title]
    assert fmt.render_new(again) == written


@pytest.mark.parametrize("title", ["Use SQLite, not P\x85ostgres, for the local cache", "ends with NEL\x85",
                                   "a\x01control", "a NUL\x00", "OSC 52 \x1b]52;c;aGk=\x07"])
def test_a_memory_holding_a_control_character_is_refused(title):
    """C0 (but tab and line ends), DEL and C1 controls: a memory is text (issue 37); NEL was a C1 control that
    round-tripped before."""
    item = fmt.Memory(id="3f9a1c07d2e4", type="decision", title=title, body="Why.\n")
    with pytest.raises(MalformedMemory, match="title: holds control character U\\+00"):
        fmt.render_new(item)
    with pytest.raises(MalformedMemory, match="body: holds control character U\\+0000"):
        fmt.render_new(fmt.Memory(id="3f9a1c07d2e4", type="decision", title="Fine", body="Half \x00 binary.\n"))
    quoted = fmt.render_new(fmt.Memory(id="3f9a1c07d2e4", type="decision", title="Fine", body="Why.\n")).replace(
        "title: Fine", 'title: "Fine \\e[31m red"')
    with pytest.raises(MalformedMemory, match="title: holds control character U\\+001B"):
        fmt.parse(quoted)
