"""The plugin specification's small pieces (issue 24), each as a person would notice it.

summary field, link `created` and uniqueness, suggested links, link decay, two-hop recall, the project
name on global memories, `cortex reset`, local metrics and what `cortex status` (and `/cortex:inspect`)
shows of them, contradicting decisions in the briefing, confidence marks, highlighted snippets, the
reality check of settings, and the short / medium / full renderings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cortex import render
from cortex.memory import Link, Memory, parse
from cortex.store import Store
from tests.helpers import commit_all, cortex, cortex_json, hook, remember

DAY = 86400.0


def _file(store: Store, memory_id: str) -> str:
    path = store.get(memory_id).path
    assert path is not None
    return path.read_text(encoding="utf-8")


def _briefing(project: Path) -> str:
    return cortex("briefing", "--fresh", cwd=project).stdout


def _line(text: str, memory_id: str) -> str:
    """The briefing's entry for a memory (the first id in backticks on a line is its own)."""
    return next(line for line in text.splitlines()
                if line.startswith("- ") and re.findall(r"`([0-9a-f]{12})`", line)[:1] == [memory_id])


# ---------------------------------------------------------------- summary


def test_remember_writes_a_one_line_summary_the_briefing_shows(project):
    made = cortex_json("remember", "We keep the cache in SQLite. Postgres needs a server to run, and JSON files "
                       "have no full-text search.", "--type", "decision", cwd=project)
    store = Store.locate(project)
    assert "\nsummary: Postgres needs a server to run, and JSON files have no full-text search.\n" in _file(store, made["id"])
    given = cortex_json("remember", "Deploys go out from the release branch only.", "--summary",
                        "Only the release branch deploys", cwd=project)
    assert store.get(given["id"]).summary == "Only the release branch deploys"
    text = _briefing(project)
    assert "We keep the cache in SQLite — Postgres needs a server to run" in _line(text, made["id"])


def test_a_file_without_a_summary_still_loads_and_renders_from_its_body():
    old = parse("---\nid: 3f9a1c07d2e4\ntype: decision\ntitle: Use SQLite\n---\nUse SQLite. No server to run.\n")
    assert old.summary == "" and old.one_line() == "No server to run."
    assert "summary:" not in render.full(old)
    assert render.short(old) == "[decision] Use SQLite — No server to run. `3f9a1c07d2e4`"


def test_capture_fills_the_summary(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    text = ("[MEMORY: gotcha: The staging database resets every night at 02:00 UTC. Tests that need data must seed "
            "it themselves.]")
    transcript.write_text(json.dumps({"type": "assistant", "uuid": "a1", "sessionId": "s",
                                      "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
                          + "\n", encoding="utf-8")
    cortex("capture", str(transcript), cwd=project)
    [made] = Store.locate(project).list()
    assert made.summary and "\n" not in made.summary and "seed" in made.summary


# ---------------------------------------------------------------- links: created, unique


def test_links_carry_created_and_duplicates_and_self_links_are_ignored_with_a_message(project):
    store = Store.locate(project)
    a = remember(store, "Invoices are rendered to PDF with WeasyPrint", link=False)
    b = remember(store, "The invoice template lives in templates/invoice.html", link=False)
    store.add_links(a.id, [Link("relates_to", b.id, 0.3)])
    store.add_links(a.id, [Link("relates_to", b.id, 0.3), Link("refines", a.id)])
    links = store.get(a.id).links
    assert [(link.rel, link.to) for link in links] == [("relates_to", b.id)]
    assert links[0].created and re.search(rf"to: {b.id}, strength: 0.3, created: \d{{4}}-", _file(store, a.id))
    log = (store.state_dir / "cortex.log").read_text(encoding="utf-8")
    assert f"ignored a duplicate relates_to link to {b.id}" in log and "ignored a refines link to itself" in log
    created = store.create(Memory(id="", type="context", title="Twice linked", body="x\n",
                                  links=[Link("relates_to", a.id), Link("relates_to", a.id)]))
    assert len(created.links) == 1
    # Written by hand: status says so (and the rest of the store works).
    path = store.get(b.id).path
    assert path is not None
    path.write_text(path.read_text(encoding="utf-8").replace(
        "---\nThe invoice", f"links:\n  - {{rel: relates_to, to: {b.id}}}\n---\nThe invoice"), encoding="utf-8")
    report = cortex_json("status", cwd=project)
    assert any(f"a relates_to link to itself ({b.id})" in warning for warning in report["warnings"])


# ---------------------------------------------------------------- suggested links


def _config(project: Path, old: str, new: str) -> None:
    config = project / ".cortex" / "config.yaml"
    text = config.read_text(encoding="utf-8")
    assert old in text
    config.write_text(text.replace(old, new), encoding="utf-8")


def test_links_just_under_the_threshold_are_suggested_for_review_not_written(project):
    _config(project, "link_min: 0.1 ", "link_min: 0.95 ")
    _config(project, "suggest_min: 0.07 ", "suggest_min: 0.0 ")
    first = cortex_json("remember", "Invoices are rendered to PDF with WeasyPrint", "--type", "pattern", cwd=project)
    second = cortex_json("remember", "The PDF invoice template lives in templates/invoice.html", cwd=project)
    assert second["links"] == []  # below link_min: nothing written
    rows = cortex_json("links", "--suggested", cwd=project)
    assert [(row["id"], row["other"]) for row in rows] == [(second["id"], first["id"])]
    assert "1 suggested links" in cortex("links", "--suggested", cwd=project).stdout
    cortex("links", "--accept", second["id"], first["id"], cwd=project)
    store = Store.locate(project)
    [link] = store.get(second["id"]).links
    assert (link.rel, link.to) == ("relates_to", first["id"]) and link.created
    assert cortex_json("links", "--suggested", cwd=project) == []


# ---------------------------------------------------------------- link decay and two hops


def _chain(project: Path, strength: float = 0.8) -> tuple[Store, Memory, Memory, Memory]:
    """A decision the query finds, linked strongly to a context memory, linked strongly to another."""
    store = Store.locate(project)
    c = remember(store, "Nightly exports are compressed with zstd level 19", link=False)
    b = store.create(Memory(id="", type="context", title="Exports land in the archive bucket",
                            body="Exports land in the archive bucket.\n", links=[Link("relates_to", c.id, strength)]))
    a = store.create(Memory(id="", type="decision", title="Ledger backups run every hour",
                            body="Ledger backups run every hour with litestream.\n",
                            links=[Link("relates_to", b.id, strength)]))
    return store, a, b, c


def test_recall_follows_strong_links_two_hops(project):
    from cortex.recall import recall

    store, a, b, c = _chain(project)
    hits = recall([store], "ledger backups litestream", limit=5, types=["decision"]).hits
    assert [(h.memory.id, h.via) for h in hits] == [
        (a.id, None), (b.id, f"relates_to of {a.id}"), (c.id, f"relates_to of {b.id}")]


def test_a_link_weakens_while_neither_end_is_recalled_and_recovers_when_one_is(project, monkeypatch):
    from cortex.memory import epoch
    from cortex.recall import recall

    store, a, b, _c = _chain(project, strength=0.5)
    made = epoch(store.get(a.id).links[0].created or "")
    query = "ledger backups litestream"
    assert b.id in [h.memory.id for h in recall([store], query, limit=5, types=["decision"], now=made + DAY).hits]
    later = made + 120 * DAY  # 0.5 x 0.5^(120/90) = 0.2: under the 0.4 a link needs to bring its other end
    assert b.id not in [h.memory.id for h in recall([store], query, limit=5, types=["decision"], now=later).hits]
    listed = cortex_json("links", a.id, cwd=project, env={"CORTEX_NOW": str(later)})
    assert [row["strength_now"] for row in listed if row["to"] == b.id] == [0.198]
    monkeypatch.setenv("CORTEX_NOW", str(later - DAY))
    store.record_access([b.id])  # the other end was recalled yesterday
    assert b.id in [h.memory.id for h in recall([store], query, limit=5, types=["decision"], now=later).hits]


# ---------------------------------------------------------------- the global store's project name


def test_capture_routed_to_the_global_store_names_the_project_and_recall_shows_it(project):
    from cortex.capture import Candidate, write_candidates

    store = Store.locate(project)
    write_candidates(store, [Candidate("pattern", "Prefer ripgrep over grep for code search",
                                       "ripgrep respects .gitignore and is fast.", "llm", confidence=0.95,
                                       scope="global")], "s-1")
    [made] = Store.locate(use_global=True).list(statuses=("proposed",))  # the LLM layer's: proposed
    assert made.project == project.name and made.scope == "global"
    assert f"\nproject: {project.name}\n" in made.path.read_text(encoding="utf-8")  # type: ignore[union-attr]
    out = cortex("recall", "ripgrep code search", cwd=project).stdout
    assert f"[global: {project.name}]" in out
    assert cortex_json("recall", "ripgrep code search", cwd=project)[0]["project"] == project.name


# ---------------------------------------------------------------- cortex reset


def test_reset_removes_cache_and_state_keeps_memories_and_cursors_and_hard_asks(project):
    made = cortex_json("remember", "Feature flags are read once at startup", cwd=project)
    cortex("recall", "feature flags", cwd=project)
    cortex("briefing", cwd=project)
    store = Store.locate(project)
    cursors = store.state_dir / "cursors"
    cursors.mkdir(exist_ok=True)
    (cursors / "t.json").write_text("{}", encoding="utf-8")
    assert (store.state_dir / "access.json").is_file() and any(store.cache_dir.iterdir())
    out = cortex("reset", cwd=project).stdout
    assert "memories untouched" in out and "kept the transcript cursors" in out
    assert not (store.state_dir / "access.json").exists() and not (store.state_dir / "briefing.json").exists()
    assert not [p for p in store.cache_dir.iterdir() if not p.name.endswith(".lock")]
    assert (cursors / "t.json").is_file() and store.get(made["id"]).title == "Feature flags are read once at startup"
    refused = cortex("reset", "--hard", cwd=project, input="n\n", check=False)
    assert refused.returncode == 1 and "cancelled" in refused.stderr and (cursors / "t.json").is_file()
    cortex("reset", "--hard", cwd=project, input="y\n")
    assert not cursors.exists()
    assert cortex_json("recall", "feature flags", cwd=project)[0]["id"] == made["id"]  # the cache rebuilt


# ---------------------------------------------------------------- metrics, status, /cortex:inspect


def _transcript(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_text(json.dumps({"type": "assistant", "uuid": "a1", "sessionId": "s-1", "message": {
        "role": "assistant", "content": [{"type": "text", "text": text}]}}) + "\n", encoding="utf-8")
    return path


def test_metrics_count_captures_and_briefings_and_status_and_inspect_show_them(project, tmp_path):
    transcript = _transcript(tmp_path, "[MEMORY: gotcha: The CI cache key must include the lockfile hash.]")
    stop = hook("stop", project, {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project)})
    assert stop.returncode == 0
    start = hook("session-start", project, {"session_id": "s-2", "cwd": str(project), "source": "startup"})
    assert start.returncode == 0
    metrics = json.loads((project / ".cortex" / "state" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["capture"]["runs"] == 1 and metrics["capture"]["written"] == 1
    assert metrics["briefing"]["builds"] == 1 and metrics["briefing"]["last_tokens"] > 0
    assert metrics["briefing"]["last_ms"] >= 0
    report = cortex_json("status", cwd=project)["activity"]
    assert report["last_capture"] == metrics["capture"]["last_at"]
    assert report["last_briefing"]["tokens"] == metrics["briefing"]["last_tokens"]
    assert report["queue"] == {"llm_jobs": 0, "links": report["queue"]["links"], "suggested_links": 0}
    # /cortex:inspect runs what its command file says; its output carries the same lines.
    inspect = (Path(__file__).parent.parent / "cortex" / "claude_plugin" / "commands" / "inspect.md").read_text()
    shown = "".join(cortex(*command.split()[1:], cwd=project).stdout
                    for command in re.findall(r"!`(cortex [a-z -]+?) \|\| true`", inspect))
    assert f"last capture:  {metrics['capture']['last_at']} (1 runs, 1 memories written)" in shown
    assert "queue:         0 LLM capture jobs" in shown
    assert f"last briefing: {metrics['briefing']['last_tokens']} tokens" in shown


def test_llm_calls_and_tokens_are_counted(project, tmp_path, monkeypatch):
    from cortex import llm
    from tests.helpers import fake_claude

    env = fake_claude(tmp_path / "bin", "import sys\nsys.stdin.read()\nprint('an answer of some length')\n")
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("CORTEX_LLM", "on")  # allowed on this machine
    _config(project, "llm: off", "llm: on")
    store = Store.locate(project)
    assert llm.ask(store, "x" * 400, "test") == "an answer of some length"
    counted = json.loads((store.state_dir / "metrics.json").read_text(encoding="utf-8"))["llm"]
    assert counted["calls"] == 1 and counted["input_tokens"] == 100 and counted["output_tokens"] == 7
    assert "LLM calls:     1, about 100 tokens in, 7 out" in cortex("status", cwd=project).stdout


# ---------------------------------------------------------------- the briefing: conflicts, confidence


def test_contradicting_decisions_are_marked_newer_first(project, monkeypatch):
    store = Store.locate(project)
    monkeypatch.setenv("CORTEX_NOW", "2026-11-01T10:00:00Z")
    old = remember(store, "Product pages are never cached: prices change too often", type="decision", priority=9,
                   link=False)
    monkeypatch.setenv("CORTEX_NOW", "2026-11-20T10:00:00Z")
    new = store.create(Memory(id="", type="decision", title="Cache product pages in the CDN for five minutes",
                              body="Five minutes is short enough for price changes.\n", priority=6,
                              links=[Link("contradicts", old.id)]))
    text = _briefing(project)
    lines = [line for line in text.splitlines() if old.id in line or new.id in line]
    assert lines[0].startswith("- [decision] Cache product pages") and f"(newer; conflicts with `{old.id}`)" in lines[0]
    assert lines[1].startswith("- [decision] Product pages are never cached")
    assert f"(conflicts with newer `{new.id}`)" in lines[1]


def test_a_low_confidence_memory_reads_as_such_in_the_briefing(project):
    store = Store.locate(project)
    unsure = remember(store, "The flaky upload test may be caused by the proxy timeout", type="gotcha",
                      confidence=0.35, link=False)
    sure = remember(store, "Uploads go straight to S3 with presigned URLs", type="architecture", link=False)
    text = _briefing(project)
    assert _line(text, unsure.id).endswith(f"`{unsure.id}` (low confidence 0.35)")
    assert "low confidence" not in _line(text, sure.id)


# ---------------------------------------------------------------- highlighted snippets


def test_recall_snippets_mark_the_query_words(project):
    remember(project, "Webhook retries use exponential backoff capped at 30 seconds; a retried event is "
                      "deduplicated by its id.", type="pattern", link=False)
    [hit] = cortex_json("recall", "webhook retries", "--no-global", cwd=project)
    marked = [hit["snippet"][start:end] for start, end in hit["highlights"]]
    assert marked == ["Webhook", "retries", "retried"]
    # The title is said once (issue 40): the snippet goes on past it, its marks moved with it.
    shown = cortex("recall", "webhook retries deduplicated", cwd=project).stdout
    assert shown.count("use exponential backoff") == 1 and "…is **deduplicated** by its id." in shown


# ---------------------------------------------------------------- the reality check of settings


def test_the_briefing_flags_a_setting_whose_value_changed(project):
    (project / "config").mkdir()
    settings = project / "config" / "app.yaml"
    settings.write_text("server:\n  timeout: 30\n  workers: 4\n", encoding="utf-8")
    commit_all(project, "settings")
    store = Store.locate(project)
    held = remember(store, "Raising the request timeout hid slow queries. Keep `timeout: 30` in the server "
                           "settings and fix the query instead.", type="gotcha", files=["config/app.yaml"],
                    summary="Keep the request timeout low", link=False)
    assert "may be stale" not in _line(_briefing(project), held.id)
    settings.write_text("server:\n  timeout: 60\n  workers: 4\n", encoding="utf-8")
    assert _line(_briefing(project), held.id).endswith(
        "(may be stale: `timeout` is 60 in config/app.yaml, not 30)")
    settings.write_text("server:\n  workers: 4\n", encoding="utf-8")
    assert "(may be stale: `timeout` is no longer in config/app.yaml)" in _line(_briefing(project), held.id)


# ---------------------------------------------------------------- short, medium, full


def test_the_three_forms_are_deterministic_and_used_where_the_spec_says(project):
    store = Store.locate(project)
    made = remember(store, "We keep the cache in SQLite. Postgres needs a server.", type="decision",
                    tags=["storage"], link=False)
    path = made.path
    assert path is not None
    text = path.read_text(encoding="utf-8")
    head, body = text.split("---\n")[1], text.split("---\n", 2)[2]
    reordered = "---\n" + "".join(reversed(head.splitlines(keepends=True))) + "---\n" + body
    twin = parse(reordered, path)
    assert render.full(twin) == render.full(made) and render.short(twin) == render.short(made)
    assert render.medium(twin) == render.medium(made)
    short = render.short(made)
    assert "\n" not in short and short == f"[decision] We keep the cache in SQLite — Postgres needs a server. `{made.id}`"
    # show: the full form, fields in canonical order whatever the file's order
    path.write_text(reordered, encoding="utf-8")
    shown = cortex("show", made.id, cwd=project).stdout
    keys = [line.split(":")[0] for line in shown.splitlines()[1:8]]
    assert keys == ["id", "type", "title", "summary", "status", "confidence", "priority"]
    raw = reordered.rstrip("\n").splitlines()
    assert cortex("show", made.id, "--raw", cwd=project).stdout.splitlines()[1:len(raw) + 1] == raw
    # recall: the medium form (facts line); the briefing: the short form
    assert "confidence 0.90 · priority 5 · branch main · tags storage" in cortex("recall", "sqlite cache",
                                                                                  cwd=project).stdout
    assert f"- {short}" in _briefing(project)
