"""Consolidation: planted near-duplicates merged, all-or-nothing with rollback, the automatic run's budget."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cortex import consolidate
from cortex.errors import CortexError
from cortex.memory import Memory
from cortex.store import Store
from tests.helpers import cortex, cortex_json, fake_claude, remember

DISTINCT = [
    ("decision", "Frontend builds use Vite; the old webpack config was deleted in March"),
    ("gotcha", "The websocket reconnect test is flaky on CI because it depends on timer resolution"),
    ("architecture", "Kubernetes deploys go through a Helm chart in deploy/helm, one values file per environment"),
    ("decision", "Passwords are hashed with argon2id; bcrypt hashes are upgraded at the next login"),
    ("pattern", "API errors are returned as RFC 7807 problem documents with a stable type URI"),
]
TWINS = [
    ("decision", "We store money as integer cents, never floats, to avoid rounding errors in invoices",
     "Amounts are kept in integer cents rather than floating point, so invoices have no rounding errors"),
    ("gotcha", "Alembic autogenerate misses changes to server defaults; write those migrations by hand",
     "Server default changes are not detected by Alembic's autogenerate, so hand-write those migrations"),
]


def _store(project: Path) -> tuple[Store, dict[str, str], list[tuple[str, str]]]:
    store = Store.locate(project)
    ids = {}
    for kind, text in DISTINCT:
        ids[text] = store.create(Memory(id="", type=kind, title=text, body=text + "\n", tags=["x"])).id
    pairs = []
    for n, (kind, a, b) in enumerate(TWINS):
        first = store.create(Memory(id="", type=kind, title=a, body=a + "\n", tags=["money"] if n == 0 else ["db"],
                                    files=["billing.py"], priority=4))
        second = store.create(Memory(id="", type=kind, title=b, body=b + "\nRejected: decimals as strings.\n",
                                     tags=["invoices"], priority=7, confidence=0.7))
        pairs.append((first.id, second.id))
    return store, ids, pairs


def test_planted_near_duplicates_are_merged_and_nothing_else(project):
    store, ids, pairs = _store(project)
    pinned_text = "Integer cents for every amount: floats are never used for money in invoices"
    pinned = store.create(Memory(id="", type="decision", title=pinned_text, body=pinned_text + "\n", pinned=True)).id
    dry = cortex_json("consolidate", "--dry-run", cwd=project)
    groups = [sorted(m["id"] for m in g["members"]) for g in dry["groups"]]
    assert sorted(groups) == sorted(sorted(p) for p in pairs)  # every planted pair, no distinct memory, no pinned
    assert all(pinned not in g for g in groups)
    assert dry["merged"] == [] and all(store.get(i).status == "active" for i in ids.values())
    out = cortex_json("consolidate", "--yes", cwd=project)
    assert len(out["merged"]) == 2
    for merged in out["merged"]:
        new = store.get(merged["id"])
        originals = merged["from"]
        assert {link.to for link in new.links if link.rel == "derived_from"} == set(originals)
        assert new.priority == 7 and new.confidence == 0.8 and new.files == ["billing.py"]
        assert {"invoices"} < set(new.tags) and new.source["kind"] == "consolidation"
        assert "Rejected: decimals as strings." in new.body  # the best-written member's text
        for old in originals:
            shown = store.get(old)
            assert shown.status == "archived" and shown.extra["archived"]
    active = {m.id for m in store.list()}
    assert set(ids.values()) | {pinned} <= active
    assert not (project / ".cortex" / "state" / "consolidate-checkpoint").exists()
    assert cortex_json("consolidate", "--dry-run", cwd=project)["groups"] == []


def test_interactive_consolidation_needs_a_terminal_or_yes(project):
    _store(project)
    out = cortex("consolidate", cwd=project, check=False, input="y\n")
    assert out.returncode == 1 and "--yes" in out.stderr
    assert all(m.status == "active" for m in Store.locate(project).list(statuses=()))


def _snapshot(store: Store) -> dict[str, bytes]:
    return {str(p.relative_to(store.root)): p.read_bytes() for p in sorted(store.memories_dir.rglob("*.md"))}


def test_a_failed_write_half_way_rolls_everything_back(project, monkeypatch):
    store, _ids, _pairs = _store(project)
    before = _snapshot(store)
    groups = consolidate.find_groups(store)
    assert len(groups) == 2
    calls = {"n": 0}
    real = consolidate._rename

    def failing(source: Path, target: Path) -> None:
        calls["n"] += 1
        if calls["n"] == 4:  # after the first group's new file and both its originals were renamed
            raise OSError(28, "No space left on device")
        real(source, target)

    monkeypatch.setattr(consolidate, "_rename", failing)
    with pytest.raises(CortexError, match="rolled back"):
        consolidate.apply(store, groups)
    assert calls["n"] == 4
    assert _snapshot(store) == before  # byte for byte: no new file, no archived original
    assert not list(store.memories_dir.rglob(".*.tmp"))
    assert not (store.state_dir / "consolidate-checkpoint").exists()


def test_a_run_killed_half_way_is_rolled_back_by_the_next(project, monkeypatch):
    store, _ids, _pairs = _store(project)
    before = _snapshot(store)
    groups = consolidate.find_groups(store)

    class Killed(Exception):
        pass

    calls = {"n": 0}
    real = consolidate._rename

    def dying(source: Path, target: Path) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise Killed()
        real(source, target)

    monkeypatch.setattr(consolidate, "_recover_locked", lambda store: False)  # the process dies: no rollback runs
    monkeypatch.setattr(consolidate, "_rename", dying)
    with pytest.raises(CortexError):
        consolidate.apply(store, groups)
    monkeypatch.undo()
    assert _snapshot(store) != before  # half-merged on disk ...
    assert (store.state_dir / "consolidate-checkpoint" / "plan.json").is_file()
    out = cortex("consolidate", "--dry-run", cwd=project)
    assert "rolled back an unfinished consolidation" in out.stderr
    assert _snapshot(store) == before  # ... and whole again


def test_after_captures_a_git_worktree_merges_nothing_behind_the_person_and_consolidate_does(project, tmp_path):
    """Issue 39: the upkeep after a Stop writes no tracked file in a git worktree, so flagged near-duplicates wait
    for the person's `cortex consolidate` (the global store, outside git, still merges after captures)."""
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("every_captures: 10", "every_captures: 2"),
                      encoding="utf-8")
    for kind, text in DISTINCT:  # saved and linked as `cortex remember` does: near-duplicates are flagged
        remember(project, text, type=kind)
    kind, a, b = TWINS[0]
    first = remember(project, a, type=kind).id
    transcript = tmp_path / "t.jsonl"
    lines = [{"type": "assistant", "uuid": f"a{n}", "sessionId": "s", "message": {"role": "assistant", "content": [
        {"type": "text", "text": text}]}} for n, text in enumerate([
            f"Done.\n[MEMORY: decision: {b}]", "[MEMORY: gotcha: The staging VPN drops idle SSH sessions after 10 minutes]"])]
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    payload = json.dumps({"session_id": "s", "transcript_path": str(transcript), "cwd": str(project),
                          "hook_event_name": "Stop", "stop_hook_active": False})
    assert cortex("hook", "stop", cwd=project, input=payload).returncode == 0
    store = Store.locate(project)
    assert cortex("maintain", cwd=project).stdout.strip().endswith("merged 0")  # what the upkeep would do
    assert store.get(first).status == "active"
    out = cortex_json("consolidate", "--yes", cwd=project)
    assert out["merged"], out
    memories = store.list(statuses=())
    assert store.get(first).status == "archived"
    merged = [m for m in memories if m.source.get("kind") == "consolidation"]
    assert len(merged) == 1 and merged[0].status == "active"
    assert "decisions.md" in {p.name for p in (project / ".cortex").iterdir()}
    assert merged[0].id in (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")


SAME_SUBJECT = [  # one subject, three different claims: none is a duplicate of another
    ("pattern", "Celery tasks accept only keyword arguments, so adding an optional parameter doesn't break messages "
                "already sitting in the queue."),
    ("pattern", "Celery task names are explicit strings like payments.payouts.run_daily, never the auto-generated "
                "module path, so refactors don't break messages already queued."),
    ("pattern", "Celery tasks that touch money are idempotent: they look the payout up by its key before acting, "
                "because the broker can deliver a message twice."),
]
PARAPHRASE = ("pattern", "Celery task names are spelled out as strings such as payments.payouts.run_daily instead of "
                         "the module path Celery generates, so renaming modules cannot strand queued messages.")


def test_memories_on_one_subject_are_not_duplicates_but_a_paraphrase_is(project):
    config = project / ".cortex" / "config.yaml"  # every same-type pair a candidate: the duplicate score decides alone
    config.write_text(config.read_text(encoding="utf-8").replace("candidate_threshold: 0.5", "candidate_threshold: -1"),
                      encoding="utf-8")
    store = Store.locate(project)
    for kind, text in DISTINCT:
        store.create(Memory(id="", type=kind, title=text, body=text + "\n"))
    same = [store.create(Memory(id="", type=kind, title=text, body=text + "\n")).id for kind, text in SAME_SUBJECT]
    auto = float(store.config().get("consolidate.auto_threshold"))
    # the static similarity, as links measure it, would merge two of the Celery patterns at 0.4
    static = consolidate.find_groups(store, 0.4, judge=False)
    assert len(static) == 1 and {m.id for m in static[0].members} < set(same)
    assert consolidate.find_groups(store, auto) == []  # the duplicate score tells them apart
    twin = store.create(Memory(id="", type=PARAPHRASE[0], title=PARAPHRASE[1], body=PARAPHRASE[1] + "\n")).id
    groups = consolidate.find_groups(store, auto)
    assert [sorted(m.id for m in g.members) for g in groups] == [sorted([same[1], twin])]


def test_duplicate_scores_are_kept_between_runs(project):
    store, _ids, pairs = _store(project)
    from cortex.index import Index

    rels = sorted(Index(store).records())
    first = consolidate.Judge(store, rels, Index(store).records())
    assert len(consolidate.find_groups(store, judge=first)) == 2
    assert first.encoded_count >= 4 and (store.cache_dir / consolidate.Judge.CACHE).is_file()
    again = consolidate.Judge(store, rels, Index(store).records())
    assert len(consolidate.find_groups(store, judge=again)) == 2
    assert again.encoded_count == 0  # every candidate pair was scored by the first run
    # a changed memory is a new text: its pairs are judged again
    store.update(pairs[0][0], {}, body="We store money as integer cents, never floats, to avoid rounding errors.\n")
    third = consolidate.Judge(store, sorted(Index(store).records()), Index(store).records())
    consolidate.find_groups(store, judge=third)
    assert third.encoded_count >= 1


def test_an_automatic_run_judges_at_most_max_judged_and_keeps_the_rest_flagged(project):
    from cortex.graph import connect, flagged

    store, _ids, pairs = _store(project)
    connect(store, [i for pair in pairs for i in pair])
    assert {tuple(sorted(p)) for p in pairs} <= {tuple(sorted(p[:2])) for p in flagged(store)}
    config = store.config_path
    config.write_text(config.read_text(encoding="utf-8").replace("max_judged: 500", "max_judged: 2")
                      .replace("every_captures: 10", "every_captures: 1"), encoding="utf-8")
    store = Store.locate(project)
    assert consolidate.after_capture(store, 1) == 1  # room to encode one pair: the other waits, still flagged
    left = {tuple(sorted(p[:2])) for p in flagged(store)}
    assert len([p for p in pairs if tuple(sorted(p)) in left]) == 1
    assert consolidate.after_capture(store, 1) == 1  # the next run judges it
    assert not {tuple(sorted(p)) for p in pairs} & {tuple(sorted(p[:2])) for p in flagged(store)}
    assert len([m for m in store.list() if m.source.get("kind") == "consolidation"]) == 2


def test_without_the_contextual_model_the_static_similarity_decides_at_its_own_thresholds(project, monkeypatch):
    from cortex import contextual

    store, _ids, pairs = _store(project)
    monkeypatch.setattr(contextual, "model_path", lambda: project / "no-model-here")
    groups = consolidate.find_groups(store)  # manual_threshold 0.55 is for the duplicate score ...
    assert sorted(sorted(m.id for m in g.members) for g in groups) == sorted(sorted(p) for p in pairs)
    assert all(g.similarity >= consolidate.STATIC_MANUAL for g in groups)
    assert "judging duplicates by the static similarity" in (store.state_dir / "cortex.log").read_text(encoding="utf-8")
    # ... and the automatic run never merges below the static model's safe 0.7
    from cortex.graph import flag

    flag(store, [(a, b, 0.6) for a, b in pairs])
    assert all(g.similarity >= consolidate.STATIC_AUTO for g in consolidate.find_groups(store, 0.64, only_flagged=True))


def test_a_config_written_before_the_duplicate_score_gets_its_thresholds(project):
    config = project / ".cortex" / "config.yaml"
    text = config.read_text(encoding="utf-8")
    old = "\n".join(line for line in text.splitlines() if not line.strip().startswith(("candidate_threshold", "max_judged")))
    old = old.replace("auto_threshold: 0.64", "auto_threshold: 0.7").replace("manual_threshold: 0.55",
                                                                            "manual_threshold: 0.5")
    config.write_text(old + "\n", encoding="utf-8")
    store = Store.locate(project)
    assert store.config().get("consolidate.auto_threshold") == 0.64  # the old template's 0.7 was a cosine
    assert store.config().get("consolidate.manual_threshold") == 0.55
    config.write_text(old.replace("auto_threshold: 0.7", "auto_threshold: 0.8") + "\n", encoding="utf-8")
    assert Store.locate(project).config().get("consolidate.auto_threshold") == 0.8  # a person's own value stays


def test_kept_scores_survive_the_store_growing_a_little_and_exact_twins_in_a_tiny_store_merge(project):
    from cortex.index import Index

    store = Store.locate(project)
    text = "Retries use exponential backoff capped at 30 seconds"
    a = store.create(Memory(id="", type="pattern", title=text, body=text + "\n")).id
    b = store.create(Memory(id="", type="pattern", title=text + ".", body=text + ".\n")).id
    groups = consolidate.find_groups(store)  # every word is in both memories: equal weights, not zero
    assert [sorted(m.id for m in g.members) for g in groups] == [sorted([a, b])]
    for kind, other in DISTINCT:  # 2 -> 7 memories: the idf moved too much, the kept scores are dropped
        store.create(Memory(id="", type=kind, title=other, body=other + "\n"))
    records = Index(store).records()
    rel = {e["id"]: r for r, e in records.items()}
    assert not consolidate.Judge(store, sorted(records), records).known(rel[a], rel[b])
    consolidate.find_groups(store)  # kept at 7 ...
    for kind, other in SAME_SUBJECT:  # ... and still used at 10 (under twice the size), by hand or not
        store.create(Memory(id="", type=kind, title=other, body=other + "\n"))
    records = Index(store).records()
    assert consolidate.Judge(store, sorted(records), records).known(rel[a], rel[b])


def test_long_memories_that_open_alike_but_end_differently_are_not_merged(project):
    store = Store.locate(project)
    opening = " ".join(f"Step {n}: the deploy script checks the {w} before it continues." for n, w in enumerate(
        ["lockfile", "branch", "migrations", "feature flags", "secrets", "changelog", "tags", "runners",
         "artifacts", "cache", "quota", "health checks"]))
    ends = ["Finally it pushes the image to the staging registry and waits for a human to promote it.",
            "Finally it deletes the old database snapshots older than ninety days to save storage costs."]
    made = [store.create(Memory(id="", type="pattern", title=f"Deploy script {n}", body=opening + " " + end + "\n")).id
            for n, end in enumerate(ends)]
    assert consolidate.find_groups(store, 0.64, judge=False) != []  # the static model sees one text twice
    assert consolidate.find_groups(store, 0.64) == []
    twin = store.create(Memory(id="", type="pattern", title="Deploy script again", body=opening + " " + ends[0] + "\n")).id
    assert [sorted(m.id for m in g.members) for g in consolidate.find_groups(store, 0.64)] == [sorted([made[0], twin])]


def test_the_automatic_run_finds_what_a_run_by_hand_finds_when_everything_is_flagged(project):
    """Flagged memories are judged against every pair they are in, either way, as a run by hand would."""
    from cortex.graph import connect, flagged

    data = json.loads((Path(__file__).resolve().parent.parent / "bench" / "data" / "consolidate.json")
                      .read_text(encoding="utf-8"))
    store = Store.locate(project)
    ids = []
    for pair in data["pairs"][:12]:
        for text in (pair["a"], pair["b"]):
            ids.append(store.create(Memory(id="", type=pair["type"], title=text, body=text + "\n")).id)
    for item in data["background"][:60]:
        ids.append(store.create(Memory(id="", type=item["type"], title=item["text"], body=item["text"] + "\n")).id)
    connect(store, ids)
    assert flagged(store)
    marked = {i for a, b, _ in flagged(store) for i in (a, b)}
    by_hand = {tuple(sorted(m.id for m in g.members)) for g in consolidate.find_groups(store, 0.64)}
    automatic = {tuple(sorted(m.id for m in g.members)) for g in consolidate.find_groups(store, 0.64, only_flagged=True)}
    assert automatic == {g for g in by_hand if set(g) & marked}
    assert len(automatic) >= 8  # most of the 12 planted pairs


def test_a_flag_is_kept_while_its_memorys_decision_waits_for_the_budget(project, monkeypatch):
    """s is flagged with x; its twin p cannot be decided this run (p's other pair is over budget): s's flag
    must survive until p is judged, then s and p merge. Scores are set by hand to reach that budget edge."""
    from cortex.graph import Similarity, flag, flagged

    store = Store.locate(project)
    # texts without numbers: "text 0" and "text 1" differ in a claim (a number), and such memories never merge
    made = [store.create(Memory(id="", type="decision", title=f"memory {w}", body=f"text {w}\n")).id
            for w in ("alpha", "beta", "gamma", "delta", "epsilon")]
    config = store.config_path
    config.write_text(config.read_text(encoding="utf-8").replace("max_judged: 500", "max_judged: 3")
                      .replace("every_captures: 10", "every_captures: 1"), encoding="utf-8")
    store = Store.locate(project)
    records = Similarity(store).records()
    rel = {e["id"]: r for r, e in records.items()}
    s, p, q, x = (rel[i] for i in made[:4])

    def pair(a: str, b: str) -> tuple[str, str]:
        return (a, b) if a < b else (b, a)

    static = {pair(s, p): 0.9, pair(s, x): 0.6, pair(p, q): 0.55}  # the candidates
    duplicate = {pair(s, p): 0.95, pair(s, x): 0.3, pair(p, q): 0.4}  # s and p are twins

    class Table(Similarity):
        def __init__(self, store: Store, *args, **kwargs) -> None:
            super().__init__(store)
            self.method = "table"

        def against(self, one: str, others: list[str]) -> list[float]:
            return [static.get(pair(one, o), 0.0) for o in others]

    def score(self: consolidate.Judge, a: str, b: str) -> float:  # kept like a real score: the budget counts
        key = self._key(a, b)
        if key not in self._cached:
            self.prepare([a, b])
            self._cached[key], self._dirty = duplicate.get(pair(a, b), 0.0), True
        return self._cached[key]

    monkeypatch.setattr(consolidate, "Similarity", Table)
    monkeypatch.setattr(consolidate.Judge, "score", score)
    flag(store, [(made[0], made[3], 0.6)])
    assert consolidate.after_capture(store, 1) == 0  # s's best partner p waits: nothing merged ...
    assert [(a, b) for a, b, _ in flagged(store)] == [tuple(sorted((made[0], made[3])))]  # ... and s stays flagged
    assert consolidate.after_capture(store, 1) == 1  # the next run judges p's pairs and merges s with p
    merged = [m for m in store.list() if m.source.get("kind") == "consolidation"]
    assert len(merged) == 1 and {link.to for link in merged[0].links if link.rel == "derived_from"} == {made[0], made[1]}


def test_without_static_vectors_word_overlap_names_the_candidates_and_the_duplicate_score_decides(project):
    config = project / ".cortex" / "config.yaml"  # a configured model that is not there: no vectors at all
    config.write_text(config.read_text(encoding="utf-8").replace("model: bundled", "model: /nowhere/model"),
                      encoding="utf-8")
    _store_, _ids, pairs = _store(project)
    groups = cortex_json("consolidate", "--dry-run", cwd=project)["groups"]
    assert sorted(sorted(m["id"] for m in g["members"]) for g in groups) == sorted(sorted(p) for p in pairs)
    twin = _remember_text(project, "Invoice money lives in integer cents, not floats, so rounding never creeps "
                                   "into totals", "decision")
    flagged = json.loads((project / ".cortex" / "state" / "flagged.json").read_text(encoding="utf-8"))
    assert any(twin in pair[:2] for pair in flagged)  # flagged on write by word overlap
    log = project / ".cortex" / "state" / "cortex.log"
    assert not log.exists() or "failed" not in log.read_text(encoding="utf-8")


def _remember_text(project: Path, text: str, kind: str) -> str:
    return remember(project, text, type=kind).id  # linked (and flagged) as `cortex remember` does


def test_a_group_merged_meanwhile_is_not_merged_again(project):
    store, _ids, pairs = _store(project)
    groups = consolidate.find_groups(store)  # found once ...
    first = consolidate.apply(store, groups)  # ... merged by one run (the detached automatic one, say) ...
    assert len(first.merged) == 2
    second = consolidate.apply(store, groups)  # ... and a person accepts the same groups afterwards
    assert second.merged == []
    merged = [m for m in store.list() if m.source.get("kind") == "consolidation"]
    assert len(merged) == 2
    assert all(store.get(i).status == "archived" for pair in pairs for i in pair)


def test_a_run_cut_off_after_its_commit_point_is_not_rolled_back(project, monkeypatch):
    store, _ids, _pairs = _store(project)
    groups = consolidate.find_groups(store)
    real_rmtree = consolidate.shutil.rmtree

    def dying_rmtree(path, *args, **kwargs):
        folder = Path(path)
        if folder.name == consolidate.CHECKPOINT and (folder / "0.md").exists() and not (folder / "plan.json").exists():
            raise KeyboardInterrupt  # killed while cleaning up, after the plan (the commit point) went
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(consolidate.shutil, "rmtree", dying_rmtree)
    with pytest.raises(KeyboardInterrupt):
        consolidate.apply(store, groups)
    monkeypatch.undo()
    after = _snapshot(store)
    assert (store.state_dir / consolidate.CHECKPOINT).is_dir()  # leftovers of the checkpoint ...
    assert consolidate.recover(store) is False  # ... are not a reason to undo a finished merge
    assert _snapshot(store) == after
    assert len([m for m in store.list() if m.source.get("kind") == "consolidation"]) == 2


FAKE_LLM = """
import json, os, sys
prompt = sys.stdin.read()
with open({log!r}, "a") as handle:
    handle.write(json.dumps({{"argv": sys.argv[1:], "nested": os.environ.get("CORTEX_NESTED")}}) + "\\n")
if prompt.startswith("Merge these project memories") and "Alembic" in prompt:
    print("DIFFERENT")
else:
    print("Title: Money is integer cents everywhere\\n\\nAmounts are integer cents, never floats: no rounding errors.")
"""


def test_with_the_llm_configured_it_writes_the_merged_text_and_can_veto_a_merge(project, tmp_path, monkeypatch):
    log = tmp_path / "llm.jsonl"
    monkeypatch.setenv("PATH", fake_claude(tmp_path / "bin", FAKE_LLM.format(log=str(log)))["PATH"])
    monkeypatch.setenv("CORTEX_LLM", "on")  # allowed on this machine
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: auto"), encoding="utf-8")
    store, _ids, pairs = _store(project)
    result = consolidate.apply(store, consolidate.find_groups(store))
    assert [sorted(old) for _new, old in result.merged] == [sorted(pairs[0])]  # the Alembic pair: vetoed
    assert all(store.get(i).status == "active" for i in pairs[1])
    merged = store.get(result.merged[0][0])
    assert merged.title == "Money is integer cents everywhere"
    assert merged.body == "Amounts are integer cents, never floats: no rounding errors.\n"
    calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(calls) == 2 and all(c["nested"] == "1" and "--settings" in c["argv"] for c in calls)  # its hooks off


def test_an_interrupted_run_is_not_rolled_back_over_later_work(project, monkeypatch):
    store, _ids, _pairs = _store(project)
    groups = consolidate.find_groups(store)
    real = consolidate._rename
    calls = {"n": 0}

    def dying(source: Path, target: Path) -> None:
        calls["n"] += 1
        real(source, target)
        if calls["n"] == 6:  # every file renamed, the commit point not reached: killed
            raise SystemExit(9)

    monkeypatch.setattr(consolidate, "_recover_locked", lambda store: False)
    monkeypatch.setattr(consolidate, "_rename", dying)
    with pytest.raises(CortexError):
        consolidate.apply(store, groups)
    monkeypatch.undo()
    merged = [m for m in store.list() if m.source.get("kind") == "consolidation"]
    assert len(merged) == 2
    store.update(merged[0].id, {}, body=merged[0].body + "\nA person added this later.\n")  # work done since
    with pytest.raises(CortexError, match="changed since; nothing was rolled back"):
        consolidate.recover(store)
    assert "A person added this later." in store.get(merged[0].id).body


def test_a_member_edited_after_the_groups_were_found_is_not_merged_from_its_old_text(project):
    store, _ids, pairs = _store(project)
    groups = consolidate.find_groups(store)
    store.update(pairs[0][0], {}, body="Money is integer cents; the tax engine rounds once per invoice.\n")
    result = consolidate.apply(store, groups)
    assert all(pairs[0][0] not in old for _new, old in result.merged)  # that group is skipped, not merged stale
    assert store.get(pairs[0][0]).status == "active"


@pytest.mark.parametrize("answer, veto", [("DIFFERENT", True), ("**DIFFERENT**", True),
                                          ("The memories are DIFFERENT.", True),
                                          ("Title: One\n\nThe text.", False)])
def test_the_llm_veto_is_read_however_it_is_dressed(answer, veto):
    assert consolidate._says_different(answer) is veto
