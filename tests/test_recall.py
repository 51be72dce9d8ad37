"""Hybrid recall through the real `cortex recall`, with the bundled model."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortex.store import Store
from tests.helpers import cortex, cortex_json, remember

# Paraphrases that share few words with the memory they should find (the example store's Tallyho project).
# "which database did we pick?": the word "database" is nowhere in 9b3e…, but is in the title of a gotcha.
PARAPHRASES = [
    ("which database did we pick?", "9b3e5695d219"),
    ("writes time out while the end-of-day job is running", "c2b61c80c0d4"),
    ("how do we stop one customer from hammering the API?", "fc62164e3c28"),
    # Neither model ties "message broker" to RabbitMQ: the decision itself (035597ce1c99) ranks 8th; the progress
    # note that RabbitMQ was deleted answers within the top 5 (issue 20's re-ranking; see docs/recall.md).
    ("why was the message broker removed from our stack?", "1a11c3e4f523"),
    ("incoming payment events can't be verified", "b3dc534099f0"),
    ("what do we store money amounts as?", "1b5bfa33f6fd"),
    ("where does each tenant's data live?", "9b3e5695d219"),
    ("what job queue do we run background work on?", "02b91ef339ec"),
    ("how are API keys stored?", "39a18fcb7c32"),
]


@pytest.fixture
def example(example_store: Path) -> Path:
    return example_store  # a copy with its cache built once per session


@pytest.mark.parametrize("query, expected", PARAPHRASES)
def test_paraphrase_queries_find_their_memory(example, tmp_path, query, expected):
    hits = cortex_json("recall", query, "--limit", "5", "--dir", str(example), cwd=tmp_path)
    assert expected in [hit["id"] for hit in hits]


def test_the_semantic_side_finds_what_words_cannot(example, tmp_path):
    """Full text alone misses the SQLite decision for a question that never names it; hybrid finds it."""
    keyword = [h["id"] for h in cortex_json("recall", "which database did we pick?", "--keyword", "--limit", "5",
                                            "--dir", str(example), cwd=tmp_path)]
    hybrid = [h["id"] for h in cortex_json("recall", "which database did we pick?", "--limit", "5",
                                           "--dir", str(example), cwd=tmp_path)]
    assert "9b3e5695d219" not in keyword and "9b3e5695d219" in hybrid


def test_json_fields_and_project_global_labels(project):
    project_id = remember(project, "Use ruff for linting in this repo", type="decision").id
    global_id = remember(Store.locate(use_global=True), "Ruff is the linter I prefer everywhere").id
    hits = cortex_json("recall", "ruff linting", cwd=project)
    by_id = {hit["id"]: hit for hit in hits}
    assert by_id[project_id]["store"] == "project" and by_id[global_id]["store"] == "global"
    for key in ("id", "title", "type", "score", "path", "store", "snippet"):
        assert key in hits[0]
    assert Path(by_id[global_id]["path"]).is_file() and "ruff" in by_id[project_id]["snippet"].lower()
    assert [h["id"] for h in cortex_json("recall", "ruff linting", "--no-global", cwd=project)] == [project_id]


def test_without_the_model_recall_is_full_text_and_says_so_once(project):
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("model: bundled", "model: ./no-such-model")
                      .replace("contextual: true", "contextual: false"), encoding="utf-8")
    memory_id = remember(project, "Postgres connection pool is capped at 20").id
    result = cortex("recall", "postgres pool", "--json", cwd=project)
    assert result.stderr.count("full-text only") == 1
    assert memory_id in result.stdout
    assert "full-text only" in cortex("status", cwd=project).stdout


def test_keyword_flag_skips_the_model(example, tmp_path):
    result = cortex("recall", "sqlite", "--keyword", "--dir", str(example), cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "" and "sqlite" in result.stdout.lower()


def test_archived_only_with_all_and_recalling_changes_nothing(project):
    memory_id = remember(project, "Feature flags live in LaunchDarkly").id
    Store.locate(project).archive(memory_id)
    assert memory_id not in [h["id"] for h in cortex_json("recall", "feature flags launchdarkly", cwd=project)]
    hits = cortex_json("recall", "feature flags launchdarkly", "--all", cwd=project)
    assert hits[0]["id"] == memory_id and hits[0]["status"] == "archived"
    assert Store.locate(project).get(memory_id).status == "archived"  # the file is as it was


def test_filters_by_type_and_branch(example, tmp_path):
    hits = cortex_json("recall", "rate limits", "--type", "progress", "--dir", str(example), cwd=tmp_path)
    assert hits and all(hit["type"] == "progress" for hit in hits if hit["via"] is None)
    hits = cortex_json("recall", "rate limits", "--branch", "feature/rate-limits", "--dir", str(example), cwd=tmp_path)
    assert hits and all(hit["branch"] == "feature/rate-limits" for hit in hits if hit["via"] is None)


def test_code_comes_back_with_its_description(example, tmp_path):
    hits = cortex_json("recall", "write-transaction helper", "--type", "code_description", "--dir", str(example),
                       cwd=tmp_path)
    ids = [hit["id"] for hit in hits]
    assert ids[:2] == ["407cf71b5a22", "281cc644d441"]
    assert hits[1]["via"] == "source_of of 407cf71b5a22"


def test_access_counts_go_to_state_not_to_tracked_files(example, tmp_path):
    before = {p: p.read_bytes() for p in (example / "memories").rglob("*.md")}
    cortex("recall", "redis", "--dir", str(example), cwd=tmp_path)
    cortex("recall", "redis", "--dir", str(example), cwd=tmp_path)
    assert {p: p.read_bytes() for p in (example / "memories").rglob("*.md")} == before
    import json

    counts = json.loads((example / "state" / "access.json").read_text(encoding="utf-8"))
    assert counts and all(entry["count"] >= 1 for entry in counts.values())


def test_natural_language_questions_work_on_the_full_text_side(example, tmp_path):
    hits = cortex_json("recall", "Why does the Stripe signature check fail?!", "--keyword", "--dir", str(example),
                       cwd=tmp_path)
    assert hits[0]["id"] == "b3dc534099f0"


def test_a_smaller_limit_gives_the_first_hits_of_a_larger_one(example, tmp_path):
    """Recall stops ranking candidates that cannot reach the hits (relevance plus the most the prior can add
    under the limit-th score): whatever the limit, the first hits and their scores are the same."""
    from cortex.index import Index
    from cortex.recall import CONTEXTUAL, recall_store, use_contextual

    store = Store.locate(directory=example)
    index = Index(store)
    use_contextual("inline")
    try:
        for query, _ in PARAPHRASES:
            wide = recall_store(store, query, limit=40, index=index, now=1.8e9, links=False).hits
            for limit in (1, 3, 5):
                narrow = recall_store(store, query, limit=limit, index=index, now=1.8e9, links=False).hits
                assert [(h.memory.id, h.score) for h in narrow] == [(h.memory.id, h.score) for h in wide[:limit]]
    finally:
        use_contextual(None)
        CONTEXTUAL.queries.clear()  # the process's query vectors: a later test's worker must see its query first


def test_a_resident_process_ranks_the_same_as_a_command(example, tmp_path):
    """A resident process (contextual vectors filled in the background): the same hits, scores and matches as a
    command."""
    from cortex.index import Index
    from cortex.recall import CONTEXTUAL, recall_store, use_contextual

    store = Store.locate(directory=example)
    index = Index(store)
    use_contextual("inline")  # a command: fills the missing vectors, multiplies the mapped file in one go
    try:
        alone = {query: [(h.memory.id, h.score, h.match) for h in recall_store(
            store, query, limit=8, index=index, now=1.8e9, links=False).hits] for query, _ in PARAPHRASES}
        CONTEXTUAL.queries.clear()
        use_contextual("background")
        index = Index(store)  # views made afresh, as a server's are
        for query, _ in PARAPHRASES:
            resident = recall_store(store, query, limit=8, index=index, now=1.8e9, links=False).hits
            assert [(h.memory.id, h.score, h.match) for h in resident] == alone[query], query
    finally:
        use_contextual(None)
        CONTEXTUAL.queries.clear()


@pytest.mark.parametrize("text, shown", [
    ("why did we pick sqlite for the cache?", "why pick sqlite for cache ?"),
    ("Is it safe to delete the migrations folder?", "safe to delete migrations folder ?"),
    ("What did she do in May 2023?", "What in May 2023 ?"),  # "May" in a sentence is the month
    ("don't use the ORM here, use raw SQL", "don't use ORM , use raw SQL"),  # negations stay
    ("is it?", "is it?"),  # nothing left: the text as it was
])
def test_the_transformer_is_shown_a_question_without_its_function_words(text, shown):
    from cortex.recall import for_transformer

    assert for_transformer(text) == shown
