"""The LLM capture queue (layer 4): the Stop hook queues the session, a detached `cortex worker` asks the model.

The model is a fake `claude` on PATH (the one fake the tests allow); everything else is real: the hook
process, the detached worker, the guard, the store, the global store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cortex import worker
from cortex.capture import enqueue
from cortex.store import Store
from tests.helpers import cortex, fake_claude, hook, remember, wait_for

# Logs each call, fails while the `broken` file exists, answers with `answer.json` when it exists.
FAKE_CLAUDE = """
import json, os, sys
prompt = sys.stdin.read()
here = {here!r}
with open(os.path.join(here, "claude-calls.jsonl"), "a") as handle:
    handle.write(json.dumps({{"argv": sys.argv[1:], "nested": os.environ.get("CORTEX_NESTED"),
                              "has_slice": "ASSISTANT:" in prompt, "prompt": prompt}}) + "\\n")
if os.path.exists(os.path.join(here, "claude-broken")):
    print("model unavailable", file=sys.stderr)
    sys.exit(1)
answer = os.path.join(here, "answer.json")
if os.path.exists(answer):
    print(open(answer).read())
    sys.exit(0)
print(json.dumps([
    {{"type": "decision", "title": "Queue jobs in Redis streams, not RabbitMQ", "content": "Redis streams: one less server to run. Rejected: RabbitMQ.", "confidence": 0.8, "priority": 7, "scope": "project", "tags": ["queue"]}},
    {{"type": "pattern", "title": "Prefer ripgrep over grep for code search", "content": "ripgrep respects .gitignore and is fast.", "confidence": 0.95, "priority": 5, "scope": "global", "tags": []}},
    {{"type": "gotcha", "title": "secret", "content": "PASSWORD=correct-horse-battery-staple", "confidence": 0.9}},
    {{"type": "nonsense", "title": "dropped", "content": "unknown type"}}
]))
"""


def _llm_on(project: Path, tmp_path: Path, mode: str = "auto") -> dict[str, str]:
    """`capture.llm: <mode>` asked by the project, allowed on this machine (`CORTEX_LLM=on`), and the fake claude
    first on PATH; returns the env for subprocesses."""
    env = fake_claude(tmp_path / "bin", FAKE_CLAUDE.format(here=str(tmp_path))) | {"CORTEX_LLM": "on"}
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", f"llm: {mode}"), encoding="utf-8")
    return env


def _calls(tmp_path: Path) -> list[dict]:
    log = tmp_path / "claude-calls.jsonl"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


def _transcript(tmp_path: Path, *texts: str) -> Path:
    path = tmp_path / "t.jsonl"
    lines = [{"type": "assistant", "uuid": f"a{n}", "sessionId": "s-1",
              "message": {"id": f"m{n}", "role": "assistant", "content": [{"type": "text", "text": text}]}}
             for n, text in enumerate(texts)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _stop(project: Path, transcript: Path, env: dict[str, str], session: str = "s-1"):
    return hook("stop", project, {"session_id": session, "transcript_path": str(transcript), "cwd": str(project)},
                env=env)


def _jobs(project: Path) -> list[Path]:
    return sorted((project / ".cortex" / "state" / "queue").glob("*.json"))


def _titles(store: Store, every: bool = False) -> dict[str, object]:
    """What the LLM layer wrote (a proposal, by the gate: docs/capture.md), or with `every` any status."""
    return {m.title: m for m in store.list(statuses=() if every else ("active", "proposed"))}


# ---------------------------------------------------------------- through the hooks, as in a session


def test_the_stop_hook_queues_the_session_and_a_detached_worker_writes_through_the_guard(project, tmp_path):
    env = _llm_on(project, tmp_path)
    transcript = _transcript(tmp_path, "Should we keep RabbitMQ? Let's move the queue to Redis streams.")
    result = _stop(project, transcript, env)
    assert result.returncode == 0 and result.stdout == ""
    assert wait_for(lambda: _calls(tmp_path) and not _jobs(project)), "the worker did not finish the job"
    store = Store.locate(project)
    titles = _titles(store, every=True)
    decision = titles["Queue jobs in Redis streams, not RabbitMQ"]
    assert decision.type == "decision" and decision.source["layer"] == "llm" and decision.priority == 7
    assert decision.status == "proposed"  # the LLM's find waits in `cortex inbox`
    assert "secret" not in titles and "dropped" not in titles  # a secret is refused, an unknown type dropped
    everything = "".join(p.read_text(encoding="utf-8", errors="replace") for p in (project / ".cortex").rglob("*.md"))
    assert "correct-horse" not in everything
    promoted = [m.title for m in Store.locate(use_global=True).list(statuses=("proposed",))]
    assert promoted == ["Prefer ripgrep over grep for code search"]  # confident and global: the global store
    [call] = _calls(tmp_path)
    assert call["nested"] == "1" and call["has_slice"]  # cortex's own hooks do nothing inside the model's session
    settings = call["argv"][call["argv"].index("--settings") + 1]
    assert json.loads(settings) == {"disableAllHooks": True}


def test_a_failing_llm_keeps_the_job_until_the_next_session_start(project, tmp_path):
    env = _llm_on(project, tmp_path)
    (tmp_path / "claude-broken").write_text("down", encoding="utf-8")
    _stop(project, _transcript(tmp_path, "We should queue with Redis streams."), env)
    assert wait_for(lambda: any(json.loads(p.read_text())["attempts"] >= 1 for p in _jobs(project)))
    store = Store.locate(project)
    assert store.list(statuses=()) == []
    (tmp_path / "claude-broken").unlink()
    started = hook("session-start", project, {"cwd": str(project), "source": "startup"}, env=env)
    assert started.returncode == 0
    assert json.loads(started.stdout)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert wait_for(lambda: not _jobs(project))  # retried by the worker the session start launched
    assert "Queue jobs in Redis streams, not RabbitMQ" in _titles(store)


def test_llm_auto_is_off_without_the_command(project, tmp_path):
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: auto"), encoding="utf-8")
    result = _stop(project, _transcript(tmp_path, "Nothing to see."), env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0
    assert _jobs(project) == []


def test_llm_off_queues_nothing_even_with_the_command_there(project, tmp_path):
    env = _llm_on(project, tmp_path, mode="off")
    assert _stop(project, _transcript(tmp_path, "Let's move the queue to Redis streams."), env).returncode == 0
    assert _jobs(project) == [] and _calls(tmp_path) == []


# ---------------------------------------------------------------- the queue, run in process


@pytest.fixture
def llm(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """The project store with `capture.llm: on` and the fake claude on this process's PATH."""
    for name, value in _llm_on(project, tmp_path, mode="on").items():
        monkeypatch.setenv(name, value)
    return Store.locate(project)


def _answer(tmp_path: Path, items: object) -> None:
    (tmp_path / "answer.json").write_text(items if isinstance(items, str) else json.dumps(items), encoding="utf-8")


def test_a_queued_job_becomes_memories_and_leaves_the_queue(llm, tmp_path):
    known = remember(llm, "Product pages are never cached: prices change too often", type="decision").id
    _answer(tmp_path, [
        {"type": "decision", "title": "Cache product pages in the CDN for five minutes",
         "content": "Five minutes is short enough for price changes.", "confidence": 3, "priority": 40,
         "contradicts": [known, "ffffffffffff"], "tags": ["cdn", 7, {"no": 1}]},
        {"type": "code", "title": "not from a transcript", "content": "print(1)"},  # code types are code-index's
        {"type": "gotcha", "title": "empty", "content": "  "},
        "not an object",
    ])
    job = enqueue(llm, "s-9", "ASSISTANT: let's cache product pages for five minutes", "branch: main")
    assert job is not None and job.is_file()
    counts = worker.process_queue(llm)
    assert counts == {"done": 1, "failed": 0, "written": 1}
    assert not job.exists()
    titles = _titles(llm)
    assert set(titles) == {"Cache product pages in the CDN for five minutes",
                           "Product pages are never cached: prices change too often"}
    made = llm.get(titles["Cache product pages in the CDN for five minutes"].id)
    assert made.confidence == 1.0 and made.priority == 10  # out-of-range answers are clamped, not refused
    assert made.tags == ["cdn", "7"] and made.source["session"] == "s-9"
    assert [(link.rel, link.to) for link in made.links if link.rel != "relates_to"] == [("contradicts", known)]
    [call] = _calls(tmp_path)
    assert f"{known}: Product pages are never cached" in call["prompt"]  # the model is shown what it may contradict
    assert "branch: main" in call["prompt"] and "let's cache product pages" in call["prompt"]


def test_an_answer_without_a_json_array_keeps_the_job_and_counts_the_attempt(llm, tmp_path):
    _answer(tmp_path, "I could not find anything worth remembering, sorry.")
    job = enqueue(llm, "s-3", "ASSISTANT: we tried a few things", "branch: main")
    assert worker.process_queue(llm) == {"done": 0, "failed": 1, "written": 0}
    kept = json.loads(job.read_text(encoding="utf-8"))
    assert kept["attempts"] == 1 and "no JSON array" in kept["last_error"]
    assert worker.process_queue(llm)["failed"] == 1
    assert json.loads(job.read_text(encoding="utf-8"))["attempts"] == 2
    assert llm.list(statuses=()) == [] and "worker:" in (llm.state_dir / "cortex.log").read_text(encoding="utf-8")
    _answer(tmp_path, [])  # the model answers at last: nothing to remember is a success
    assert worker.process_queue(llm) == {"done": 1, "failed": 0, "written": 0}
    assert not job.exists()


def test_an_unreadable_job_does_not_block_the_ones_after_it(llm, tmp_path):
    queue = llm.state_dir / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    (queue / "00000000T000000-000000000-broken.json").write_text("{ half a job", encoding="utf-8")
    enqueue(llm, "s-4", "ASSISTANT: Redis streams it is", "branch: main")
    counts = worker.process_queue(llm)
    assert counts["done"] == 1 and counts["written"] == 2
    assert list(queue.glob("*.json")) == []


def test_an_empty_session_slice_queues_nothing(llm):
    assert enqueue(llm, "s-5", "  \n", "branch: main") is None
    assert worker.process_queue(llm) == {"done": 0, "failed": 0, "written": 0}


def test_the_worker_command_reports_what_it_did(project, tmp_path):
    env = _llm_on(project, tmp_path, mode="on")
    store = Store.locate(project)
    enqueue(store, "s-6", "ASSISTANT: Redis streams it is", "branch: main")
    (tmp_path / "claude-broken").write_text("down", encoding="utf-8")
    failed = cortex("worker", cwd=project, env=env)
    assert failed.stdout.strip() == "0 jobs done, 1 failed (kept for a retry), 0 memories written"
    (tmp_path / "claude-broken").unlink()
    done = cortex("worker", cwd=project, env=env)
    assert done.stdout.strip() == "1 jobs done, 0 failed (kept for a retry), 2 memories written"
    assert _jobs(project) == []
