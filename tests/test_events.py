"""The library's two entry points: every edge (hook, command, server) gets the same answer from the same code."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from cortex import serve
from cortex.store import Store
from tests.helpers import cortex, cortex_command, hook, remember


def _line(record_type: str, uuid: str, text: str) -> str:
    message = {"role": record_type, "content": [{"type": "text", "text": text}] if record_type == "assistant" else text}
    if record_type == "assistant":
        message["id"] = f"msg-{uuid}"
    return json.dumps({"type": record_type, "uuid": uuid, "sessionId": "s-1", "gitBranch": "main", "message": message})


def _transcript(path: Path, *texts: str) -> Path:
    lines = [_line("user", "u0", "Pick a store for the cache and set the retry policy")]
    lines += [_line("assistant", f"a{n}", text) for n, text in enumerate(texts)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


TWO_DECISIONS = ("[MEMORY: decision: Use SQLite, not Postgres, for the local cache: no server to run.]",
                 "[MEMORY: decision: Webhook deliveries are retried 5 times with exponential backoff.]")


def test_a_global_memory_reaches_the_prompt_with_and_without_the_server(project):
    """D1: the prompt hook answered by `cortex serve` recalls the global store too, as the one-shot hook does."""
    fact = "Kubernetes deploys are blue-green with a 10-minute soak"
    made = cortex("remember", "--global", fact, cwd=project).stdout.strip()
    prompt = {"session_id": "s", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
              "prompt": "blue-green kubernetes deploys with a soak period?"}
    alone = hook("prompt", project, prompt)
    assert made in alone.stdout and "(global)" in alone.stdout
    root = str(project / ".cortex")
    server = subprocess.Popen([*cortex_command(), "serve", "--idle", "30"], cwd=project, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and serve.ask(root, {"op": "ping"}) is None:
            time.sleep(0.1)
        answer = serve.ask(root, {"op": "prompt", "prompt": prompt["prompt"]}, timeout=10)
        assert answer is not None and made in str(answer["context"])
        assert hook("prompt", project, prompt).stdout == alone.stdout  # the served hook prints the same context
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_cortex_capture_leaves_the_projections_current_as_the_stop_hook_does(project, tmp_path):
    """D2: `cortex capture FILE` ("what the Stop hook runs") regenerates the pages it changed."""
    transcript = _transcript(tmp_path / "t.jsonl", *TWO_DECISIONS)
    cortex("capture", str(transcript), cwd=project)
    check = cortex("project", "--check", cwd=project, check=False)
    assert check.returncode == 0, check.stderr
    assert "Use SQLite, not Postgres" in (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")


def test_capture_layers_chooses_the_layers_that_run(project, tmp_path):
    """D3: `capture.layers: [self_report]` runs the tags alone; the keyword layer writes nothing."""
    config = project / ".cortex" / "config.yaml"
    text = config.read_text(encoding="utf-8")
    assert "layers: [structural, keyword, self_report]" in text
    config.write_text(text.replace("layers: [structural, keyword, self_report]", "layers: [self_report]"),
                      encoding="utf-8")
    keyword_only = ("The problem was that Excel writes a UTF-8 BOM that csv.DictReader keeps in the first column "
                    "name, so the loader now strips it before parsing.")
    transcript = _transcript(tmp_path / "t.jsonl", keyword_only, TWO_DECISIONS[0])
    report = json.loads(cortex("capture", str(transcript), "--json", cwd=project).stdout)
    assert report["by_layer"] == {"self-report": 1}
    assert [m.title for m in Store.locate(project).list()] == ["Use SQLite, not Postgres, for the local cache: no "
                                                                "server to run"]
    config.write_text(text, encoding="utf-8")  # all three layers again: the keyword layer finds the root cause
    report = json.loads(cortex("capture", str(transcript), "--from-start", "--json", cwd=project).stdout)
    assert report["by_layer"].get("keyword", 0) + report["by_layer"].get("structural", 0) >= 1


def test_one_stop_syncs_the_cache_once(project, tmp_path, monkeypatch):
    """A Stop that writes two memories builds one Index and walks the store once (capture, projections,
    AGENTS.md and staging share it)."""
    from cortex import hooks
    from cortex.index.cache import Index

    for n in range(3):
        remember(project, f"Existing decision {n}: the billing module owns invoice number {n}", type="decision",
                 link=False)
    cortex("init", "--agents", cwd=project)
    made, synced = [], []
    original_init, original_sync = Index.__init__, Index.sync

    def counting_init(self, *args, **kwargs):
        made.append(self)
        original_init(self, *args, **kwargs)

    def counting_sync(self, *args, **kwargs):
        synced.append((args, kwargs))
        return original_sync(self, *args, **kwargs)

    monkeypatch.setattr(Index, "__init__", counting_init)
    monkeypatch.setattr(Index, "sync", counting_sync)
    monkeypatch.setenv("CORTEX_SERVE_IDLE", "1")
    transcript = _transcript(tmp_path / "t.jsonl", *TWO_DECISIONS)
    payload = {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
               "hook_event_name": "Stop", "stop_hook_active": False}
    assert hooks.claude_stop(json.dumps(payload)) == 0
    store = Store.locate(project)
    assert len([m for m in store.list(types=["decision"])]) == 5  # both written
    assert "Webhook deliveries are retried 5 times" in (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    assert "Webhook deliveries" in (project / "AGENTS.md").read_text(encoding="utf-8")
    # one Index; one sync of the files, and one of the vectors the links of the new memories need (issue 39: the
    # Stop links before it stages), on what it wrote alone
    assert len(made) == 1 and [kwargs.get("vectors", False) for _args, kwargs in synced] in ([False, True], [True]), \
        synced
