"""The memory graph: links on write (thresholds, both sides, flags), centrality, who may supersede."""

from __future__ import annotations

import json
import time
from pathlib import Path

from cortex.index import Index
from cortex.memory import Memory
from cortex.store import Store
from tests.helpers import cortex, cortex_json, fake_claude, remember

TOPICS = [
    ("We store money as integer cents, never floats, to avoid rounding errors in invoices", "decision"),
    ("The nightly backup job copies the ledger database to object storage at 02:00 UTC", "context"),
    ("Frontend builds use Vite; the old webpack config was deleted", "decision"),
    ("Flaky test: the websocket reconnect test depends on timer resolution on CI", "gotcha"),
    ("API errors are returned as RFC 7807 problem documents with a stable type URI", "pattern"),
    ("Kubernetes deploys go through a Helm chart in deploy/helm with one values file per environment", "architecture"),
    ("Invoice PDFs are rendered by a separate worker so web requests stay fast", "architecture"),
    ("The PDF invoice template lives in templates/invoice.html and is rendered with WeasyPrint", "context"),
    ("Invoice numbers are sequential per tenant and are never reused", "context"),
]
UNRELATED = (1, 2, 3, 5)  # backups, Vite, the flaky websocket test, Kubernetes


def _remember(project: Path, text: str, kind: str = "context") -> Memory:
    """Saved and linked in process, as `cortex remember TEXT --type KIND` does."""
    return remember(project, text, type=kind)


def test_a_new_memory_is_linked_within_the_band_in_its_own_file_and_near_duplicates_are_flagged(project):
    made = [_remember(project, text, kind) for text, kind in TOPICS]
    before = {m.id: m.path.read_bytes() for m in made}
    new = _remember(project, "Invoice totals are summed in integer cents and only formatted as decimals in the PDF",
                    "decision")
    links = new.links
    assert 1 <= len(links) <= 5
    assert all(link.rel == "relates_to" and 0.1 <= link.strength <= 0.5 for link in links)
    store = Store.locate(project)
    assert {m.id: m.path.read_bytes() for m in made} == before  # no other memory's file changed (no merge conflict)
    neighbours = Index(store).ensure().neighbours()
    for link in links:  # the other side reads the link back, with the same strength, from the cache
        assert ("relates_to", new.id, link.strength) in neighbours[link.to]
    linked = {link.to for link in links}
    assert linked & {made[6].id, made[7].id, made[8].id}  # invoice memories are related ...
    assert not linked & {made[n].id for n in UNRELATED}  # ... backups, Vite, CI flakes, Kubernetes are not
    # a paraphrase of an existing memory is flagged for consolidation, not linked
    twin = _remember(project, "Money is kept as integer cents and never as floating point, so invoices do not "
                     "suffer rounding errors", "decision")
    assert made[0].id not in {link.to for link in twin.links}
    flagged = json.loads((project / ".cortex" / "state" / "flagged.json").read_text(encoding="utf-8"))
    pairs = {tuple(sorted(pair[:2])): pair[2] for pair in flagged}
    assert tuple(sorted([twin.id, made[0].id])) in pairs  # a possible duplicate ...
    assert all(score >= 0.5 for score in pairs.values())
    assert {i for pair in pairs for i in pair} <= {twin.id, made[0].id, new.id}  # (all about cents)
    assert cortex_json("status", cwd=project)["flagged_pairs"] == len(pairs)
    # ... and the duplicate score decides: the twin is merged, the invoice-totals decision (same subject) is not
    auto = cortex_json("consolidate", "--auto", "--dry-run", cwd=project)["groups"]
    assert [sorted(m["id"] for m in g["members"]) for g in auto] == [sorted([twin.id, made[0].id])]


def test_thresholds_are_config(project):
    for text, kind in TOPICS:
        _remember(project, text, kind)
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("max_links: 5", "max_links: 1"), encoding="utf-8")
    new = _remember(project, "Invoice totals are summed in integer cents and only formatted as decimals in the PDF",
                    "decision")
    assert len(new.links) == 1
    config.write_text(config.read_text(encoding="utf-8").replace("link_min: 0.1", "link_min: 0.95"), encoding="utf-8")
    lonely = _remember(project, "Backups of the ledger are tested by a monthly restore drill", "context")
    assert lonely.links == []


def test_centrality_counts_relates_to_at_both_ends_and_a_dangling_link_is_no_problem(project):
    store = Store.locate(project)  # written directly: no automatic links, only the ones set here
    hub, a, b = (store.create(Memory(id="", type="decision", title=title)).id for title in
                 ("The ledger service owns every balance change", "Refunds go through the ledger service",
                  "Chargebacks are booked by the ledger service"))
    for source, strength in ((a, 0.5), (b, 0.3)):
        store.update(source, {"links": [{"rel": "relates_to", "to": hub, "strength": strength}]}, touch=False)
    store.update(b, {"links": [{"rel": "relates_to", "to": hub, "strength": 0.3},
                               {"rel": "refines", "to": a, "strength": 0.2},
                               {"rel": "relates_to", "to": "0123456789ab"}]}, touch=False)
    index = Index(store)
    index.sync(full=False)
    central = index.centralities()
    # hub: 0.5 + 0.3 (relates_to reads both ways); a: 0.5 + 0.2 (the refines link's target); b: 0.3
    assert central[hub] == 1.0 and abs(central[a] - 0.7 / 0.8) < 1e-9 and abs(central[b] - 0.3 / 0.8) < 1e-9
    status = cortex_json("status", cwd=project)
    # a link to a memory that no longer exists (deleted) is skipped by readers and dropped by gc (issue 40)
    assert not any("0123456789ab" in problem for problem in status["problems"])
    assert cortex("recall", "ledger", cwd=project).returncode == 0


FAKE_CLAUDE = """
import json, re, sys
prompt = sys.stdin.read()
known = re.findall(r"^([0-9a-f]{12}): ", prompt, re.M)
print(json.dumps([{"type": "decision", "title": "Cache product pages in the CDN for five minutes",
                   "content": "Five minutes is short enough for price changes.", "confidence": 0.8,
                   "supersedes": known[:1], "contradicts": known[1:2]}]))
"""


def test_automation_cannot_supersede_it_gets_contradicts(project, tmp_path):
    old = _remember(project, "Product pages are never cached: prices change too often", "decision").id
    env = fake_claude(tmp_path / "bin", FAKE_CLAUDE) | {"CORTEX_LLM": "on"}  # allowed on this machine
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: on"), encoding="utf-8")
    transcript = tmp_path / "t.jsonl"
    line = {"type": "assistant", "uuid": "a1", "sessionId": "s",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Let's cache product pages for 5 minutes."}]}}
    transcript.write_text(json.dumps(line) + "\n", encoding="utf-8")
    payload = json.dumps({"session_id": "s", "transcript_path": str(transcript), "cwd": str(project)})
    assert cortex("hook", "stop", cwd=project, input=payload, env=env).returncode == 0
    store = Store.locate(project)
    deadline = time.time() + 60  # the LLM layer runs in a detached worker
    new = None
    while time.time() < deadline and new is None:
        new = next((m for m in store.list(statuses=("proposed",)) if m.title.startswith("Cache product pages")), None)
        time.sleep(0.1)
    assert new is not None
    rels = [(link.rel, link.to) for link in store.get(new.id).links]
    assert ("contradicts", old) in rels
    assert not any(rel == "supersedes" for rel, _ in rels)
    assert store.get(old).status == "active"  # automation replaced nothing
    # a person can: forget --replaced-by
    cortex("forget", old, "--replaced-by", new.id, cwd=project)
    assert store.get(old).status == "superseded"
    assert ("supersedes", old) in [(link.rel, link.to) for link in store.get(new.id).links]


def test_memories_linked_in_one_batch_get_each_link_once(project):
    from cortex.graph import connect

    store = Store.locate(project)
    for text, kind in TOPICS:
        store.create(Memory(id="", type=kind, title=text, body=text + "\n"))
    batch = [store.create(Memory(id="", type="context", title=t, body=t + "\n")).id for t in (
        "Invoice emails are sent by the PDF worker once rendering succeeds",
        "Invoice PDFs are stored in object storage for seven years",
        "Invoice numbering restarts never; credit notes get their own sequence")]
    connect(store, batch)
    for item in store.list():
        pairs = [(link.rel, link.to) for link in item.links]
        assert len(pairs) == len(set(pairs)), f"{item.title}: duplicate links {pairs}"
        assert sum(1 for rel, _ in pairs if rel == "relates_to") <= 5 + len(batch)


def test_links_add_and_remove_two_chosen_memories_with_a_relation_refreshing_the_pages(project):
    decision = cortex("remember", "Money is stored as integer cents in every table", "--type", "decision",
                      cwd=project).stdout.strip()
    reason = cortex("remember", "Floats lost a cent on one invoice in a thousand during the 2025 audit",
                    "--type", "gotcha", cwd=project).stdout.strip()
    page = project / ".cortex" / "decisions.md"
    assert "because" not in page.read_text(encoding="utf-8")
    out = cortex("links", "add", decision, reason[:6], "--rel", "because", cwd=project)
    assert out.stdout.strip() == f"linked {decision} because {reason}"
    shown = cortex_json("show", decision, cwd=project)
    assert {"rel": "because", "to": reason} in [{k: v for k, v in link.items() if k in ("rel", "to")}
                                                 for link in shown["links"]]
    assert "because [Floats lost a cent" in page.read_text(encoding="utf-8")  # the page names the reason
    assert cortex("links", "add", decision, reason, "--rel", "because", cwd=project).stdout.startswith("already linked")
    assert [row["rel"] for row in cortex_json("links", decision, cwd=project) if row["to"] == reason] == ["because"]

    for args, said in [(("add", decision, "0123456789ab", "--rel", "because"), "0123456789ab"),
                       (("add", decision, reason, "--rel", "supersedes"), "--replaced-by"),
                       (("add", decision, reason, "--rel", "bogus"), "'bogus'"),
                       (("add", decision, decision), "itself"),
                       (("add", decision), "name two memories"),
                       (("remove", decision, reason, "--rel", "refines"), "no refines link")]:
        bad = cortex("links", *args, cwd=project, check=False)
        assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and said in bad.stderr, (args, bad.stderr)

    out = cortex("links", "remove", decision, reason, "--rel", "because", cwd=project)
    assert out.stdout.strip() == f"removed {decision} because {reason}"
    assert "because" not in page.read_text(encoding="utf-8")
    assert all(link["rel"] != "because" for link in cortex_json("show", decision, cwd=project).get("links", []))


def test_a_recalled_decision_carries_its_reason_and_a_re_decided_one_the_reason_first_given(project):
    reason = cortex("remember", "Principle: nothing on a developer laptop may need a database server running",
                    "--type", "pattern", cwd=project).stdout.strip()
    first = cortex("remember", "The local cache is SQLite, one file beside the repository", "--type", "decision",
                   cwd=project).stdout.strip()
    cortex("links", "add", first, reason, "--rel", "because", cwd=project)
    rows = cortex_json("recall", "what is the local cache stored in?", "--no-global", cwd=project)
    hit = next(row for row in rows if row["id"] == first)
    assert hit["because"] == [{"id": reason, "title": "Principle: nothing on a developer laptop may need a "
                                                      "database server running"}]
    text = cortex("recall", "what is the local cache stored in?", "--no-global", cwd=project).stdout
    assert f"because: Principle: nothing on a developer laptop may need a database server running `{reason}`" in text

    second = cortex("remember", "The local cache is DuckDB, one file beside the repository", "--type", "decision",
                    cwd=project).stdout.strip()
    cortex("forget", first, "--replaced-by", second, cwd=project)
    rows = cortex_json("recall", "what is the local cache stored in?", "--no-global", cwd=project)
    assert next(row for row in rows if row["id"] == second)["because"][0]["id"] == reason
    cortex("forget", reason, cwd=project)  # a forgotten reason is not carried
    rows = cortex_json("recall", "what is the local cache stored in?", "--no-global", cwd=project)
    assert "because" not in next(row for row in rows if row["id"] == second)
