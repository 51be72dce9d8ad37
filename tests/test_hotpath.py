"""The hook fast paths: SessionStart answers from the cached briefing while it is current and declines
otherwise; UserPromptSubmit answers through a running `cortex serve` and declines without one.

Declining (False) means `cortex hook …` goes on to the full hook, so each decline is checked to print nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pygit2
import pytest

from cortex import hotpath, serve
from cortex.store import Store
from tests.helpers import checkout_new_branch, commit_all, cortex_command, hook, remember


def _payload(cwd: Path, **extra: object) -> str:
    return json.dumps({"session_id": "s", "transcript_path": "/dev/null", "cwd": str(cwd),
                       "hook_event_name": "SessionStart", "source": "startup"} | extra)


def _full_hook(project: Path) -> str:
    """The briefing the full `cortex hook session-start` prints (and caches): with no session id, so never the
    last briefing shown while a new one would be built (`layout.start_briefing`)."""
    result = hook("session-start", project, _payload(project, session_id=""))
    assert result.returncode == 0
    return json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]


def _fast(raw: str, capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    capsys.readouterr()
    answered = hotpath.session_start(raw)
    return answered, capsys.readouterr().out


@pytest.fixture
def briefed(project: Path) -> Iterator[Path]:
    """A project with a pinned memory, and its `cortex serve` lock held as a running server holds it.

    So the hooks start no server: one would sync the index in the background and rewrite the manifest the
    cache key covers at a moment no test can predict (the cache is then stale, rightly, but not when asserted).
    """
    remember(project, "Never log request bodies: they hold card data", type="pattern", pinned=True)
    lock = project / ".cortex" / "state" / "serve.lock"
    with open(lock, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield project


def test_a_current_cache_is_printed_as_the_full_hook_printed_it(briefed, capsys):
    text = _full_hook(briefed)
    answered, out = _fast(_payload(briefed, source="resume"), capsys)
    assert answered is True
    assert json.loads(out) == {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    answered, again = _fast(_payload(briefed / "src"), capsys)  # from a folder below the project too
    assert answered is True and again == out


def _declines(raw: str, capsys: pytest.CaptureFixture[str]) -> bool:
    answered, out = _fast(raw, capsys)
    return answered is False and out == ""


def test_a_new_memory_makes_the_cache_stale_until_the_full_hook_runs(briefed, capsys):
    _full_hook(briefed)
    remember(briefed, "Feature flags are read once at startup", type="gotcha", link=False)
    assert _declines(_payload(briefed), capsys)
    assert "Feature flags are read once at startup" in _full_hook(briefed)
    assert _fast(_payload(briefed), capsys)[0] is True


def test_memories_changed_by_another_tool_show_the_last_briefing_and_the_first_prompt_catches_up(briefed, capsys):
    """Memory files added and edited where cortex did not see it (a pull with no git hook, an editor; no server):
    the SessionStart prints the last briefing at once instead of building one, and the session's first prompt
    (no server: the full hook, in its own process) says what changed since: the new memory, and the one the
    briefing showed that was archived. Once: the second prompt does not repeat it. A memory the briefing shows
    whose file is gone makes the hook build it again: a deleted memory is never shown."""
    shown = _full_hook(briefed)
    store = Store.locate(briefed)
    pinned = next((store.memories_dir / "pattern").glob("*.md"))
    gone = pinned.stem.rsplit("-", 1)[-1]
    assert f"`{gone}`" in shown
    folder = store.memories_dir / "decision"
    folder.mkdir()
    (folder / "payments-use-stripe-checkout-0123456789ab.md").write_text(
        "---\nid: 0123456789ab\ntype: decision\ntitle: Payments go through Stripe Checkout\n"
        "summary: We never handle card numbers ourselves.\n---\nPayments go through Stripe Checkout.\n",
        encoding="utf-8")  # not through cortex: no state/changed touch
    text = pinned.read_text(encoding="utf-8")
    pinned.write_text(text.replace("---\n", "---\nstatus: archived\n", 1) if "status:" not in text
                      else text.replace("status: active", "status: archived"), encoding="utf-8")
    saved = (store.state_dir / "briefing.json").read_bytes()
    answered, out = _fast(_payload(briefed, session_id="s2"), capsys)
    assert answered is True
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == shown  # nothing built in the hook
    assert (store.state_dir / "briefing.json").read_bytes() == saved
    assert _declines(_payload(briefed, session_id=""), capsys)  # no session to catch up: built as before

    def prompt(session: str) -> str:
        result = hook("prompt", briefed, {"session_id": session, "cwd": str(briefed),
                                          "hook_event_name": "UserPromptSubmit", "prompt": "what is the release plan"})
        assert result.returncode == 0
        return json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"] if result.stdout else ""

    assert prompt("another-session") == ""  # it was not shown the older briefing
    caught = prompt("s2")
    assert "Changed since the briefing at this session's start" in caught
    assert "Payments go through Stripe Checkout `0123456789ab`: We never handle card numbers ourselves." in caught
    assert "No longer current" in caught and gone in caught.split("No longer current")[1]
    assert "Changed since" not in prompt("s2")
    pinned.unlink()
    assert _declines(_payload(briefed, session_id="s4"), capsys)


def test_a_cortex_write_or_an_edited_config_builds_the_briefing_in_the_hook_not_the_last_one(briefed, capsys):
    """The last briefing stands in only for changes cortex did not make: after its own write the next one is
    being built ahead (`state/changed` moved), and an edited config changes what a briefing holds. Nor when no
    memory file came or went and HEAD did not move: only the cache changed (a sync's commit, the upkeep's
    vectors), and a briefing built now may rank differently."""
    _full_hook(briefed)
    commit = briefed / ".cortex" / "cache" / "commit"  # a sync's commit
    os.utime(commit, ns=(commit.stat().st_atime_ns, commit.stat().st_mtime_ns + 10_000_000))
    assert _declines(_payload(briefed, session_id="s3"), capsys)
    _full_hook(briefed)
    remember(briefed, "Feature flags are read once at startup", type="gotcha", link=False)
    assert _declines(_payload(briefed, session_id="s3"), capsys)
    _full_hook(briefed)
    config = briefed / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("budget_tokens: 500", "budget_tokens: 200"),
                      encoding="utf-8")
    assert _declines(_payload(briefed, session_id="s3"), capsys)
    assert not (briefed / ".cortex" / "state" / "catch-up").exists()


def test_a_new_commit_shows_the_last_briefing_and_another_branch_makes_the_cache_stale(briefed, capsys):
    """A commit (or a pull) moves HEAD, which the briefing names: without a session id the hook builds it
    again; with one it prints the last briefing and the first prompt says HEAD moved. Another branch always
    builds it (progress and plans are per branch)."""
    shown = _full_hook(briefed)
    (briefed / "app.py").write_text("print('changed')\n", encoding="utf-8")
    commit_all(briefed, "change the app")
    assert _declines(_payload(briefed, session_id=""), capsys)  # the briefing names HEAD's commit
    answered, out = _fast(_payload(briefed, session_id="moved"), capsys)
    assert answered is True and json.loads(out)["hookSpecificOutput"]["additionalContext"] == shown
    head = str(pygit2.Repository(str(briefed)).head.target)
    prompt = hook("prompt", briefed, {"session_id": "moved", "cwd": str(briefed), "hook_event_name": "UserPromptSubmit",
                                      "prompt": "what changed in the app"})
    caught = json.loads(prompt.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "HEAD moved since it was made" in caught and f"→ {head[:7]}" in caught
    assert "change the app" in _full_hook(briefed)
    assert _fast(_payload(briefed), capsys)[0] is True
    checkout_new_branch(briefed, "feature/search")
    assert _declines(_payload(briefed), capsys)  # progress and plans are per branch
    _full_hook(briefed)
    pygit2.Repository(str(briefed)).checkout("refs/heads/main")
    assert _declines(_payload(briefed), capsys)


def test_an_edited_config_makes_the_cache_stale(briefed, capsys):
    _full_hook(briefed)
    config = briefed / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("budget_tokens: 500", "budget_tokens: 200"),
                      encoding="utf-8")
    assert _declines(_payload(briefed), capsys)


def test_queued_capture_jobs_send_the_session_start_to_the_full_hook(briefed, capsys):
    _full_hook(briefed)
    queue = briefed / ".cortex" / "state" / "queue"
    queue.mkdir()
    (queue / "20260101T000000-000000001-s.json").write_text(json.dumps({"session": "s", "slice": "x", "context": "",
                                                                        "attempts": 1}), encoding="utf-8")
    assert _declines(_payload(briefed), capsys)  # the full hook starts the worker that retries them


def test_no_cache_a_broken_cache_or_unreadable_input_declines(briefed, capsys):
    assert _declines(_payload(briefed), capsys)  # nothing cached yet
    _full_hook(briefed)
    cache = briefed / ".cortex" / "state" / "briefing.json"
    cache.write_text("{ half written", encoding="utf-8")
    assert _declines(_payload(briefed), capsys)
    assert _declines("[[[", capsys)
    assert _declines('["a list, not an object"]', capsys)


def test_outside_a_project_and_inside_cortexs_own_llm_session_it_answers_with_silence(tmp_path, briefed, capsys,
                                                                                     monkeypatch, isolated_env):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _fast(_payload(elsewhere), capsys) == (True, "")
    Store.locate(use_global=True)  # the global store is never taken for a project's
    assert _fast(_payload(isolated_env), capsys) == (True, "")
    monkeypatch.setenv("CORTEX_NESTED", "1")
    assert _fast(_payload(briefed), capsys) == (True, "")


# ---------------------------------------------------------------- the prompt fast path


def _prompt(project: Path, text: str) -> str:
    return json.dumps({"session_id": "s", "cwd": str(project), "hook_event_name": "UserPromptSubmit", "prompt": text})


def _fast_prompt(raw: str, capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    capsys.readouterr()
    answered = hotpath.prompt(raw)
    return answered, capsys.readouterr().out


def test_the_prompt_path_declines_without_a_server_and_skips_what_needs_no_answer(project, tmp_path, capsys,
                                                                                monkeypatch):
    remember(project, "Redis OOM on staging: rate-limit keys were created without a TTL", type="gotcha")
    assert _fast_prompt(_prompt(project, "redis out of memory on staging"), capsys) == (False, "")
    assert _fast_prompt("{not json", capsys) == (False, "")
    for quiet in (_prompt(project, "/compact"), _prompt(project, "   "), _prompt(tmp_path, "redis out of memory")):
        assert _fast_prompt(quiet, capsys) == (True, "")  # a command, nothing asked, no project: nothing to add
    monkeypatch.setenv("CORTEX_NESTED", "1")
    assert _fast_prompt(_prompt(project, "redis out of memory on staging"), capsys) == (True, "")


def test_the_prompt_path_answers_through_a_running_server(project, capsys):
    memory = remember(project, "Redis OOM on staging: rate-limit keys were created without a TTL", type="gotcha")
    root = str(project / ".cortex")
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "30"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and serve.ask(root, {"op": "ping"}) is None:
            time.sleep(0.1)
        answered, out = _fast_prompt(_prompt(project, "redis out of memory on staging"), capsys)
        assert answered is True
        output = json.loads(out)["hookSpecificOutput"]
        assert output["hookEventName"] == "UserPromptSubmit" and f"`{memory.id}`" in output["additionalContext"]
        assert _fast_prompt(_prompt(project, "write a haiku about autumn leaves"), capsys) == (True, "")
    finally:
        proc.terminate()
        proc.wait(timeout=30)

