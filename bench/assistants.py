"""Whole-process hooks with each assistant's payload: Claude Code, Codex CLI, Gemini CLI, Cursor.

    python bench/assistants.py [--size 1000] [--runs 7]
    python bench/assistants.py --sessions [--runs 3]


One generated store in a real git repository. For each assistant, its own
SessionStart payload (cached briefing: the fast path) and, where it has one,
its prompt payload (Gemini's BeforeAgent with the SessionStart context in front
of the prompt, as `gemini -p` sends it) answered by the resident `cortex serve`.
Prints medians and the ratio to a bare `python -c pass` in the same run: the
payload shapes must cost nothing over Claude Code's.

`--sessions`: whole `codex exec` and `gemini -p` sessions (the pinned CLIs of
tests/e2e, one scripted text turn against the fake API) with no cortex, with
cortex's hooks only, and as `cortex init` writes it (hooks and MCP server).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402
from bench.hooks import stop_server, wait_for_server  # noqa: E402
from bench.store import bench_env, print_machine, warm_bytecode  # noqa: E402

CORTEX = [sys.executable, "-m", "cortex"]
PROMPT = "why did we pick sqlite for the cache?"


def payloads(root: Path) -> dict[str, tuple[dict[str, object], dict[str, object] | None]]:
    common = {"session_id": "bench", "transcript_path": "/nonexistent", "cwd": str(root)}
    return {
        "Claude Code": ({**common, "hook_event_name": "SessionStart", "source": "startup"},
                        {**common, "hook_event_name": "UserPromptSubmit", "prompt": PROMPT}),
        "Codex CLI": ({**common, "hook_event_name": "SessionStart", "model": "gpt-5", "permission_mode": "default",
                       "source": "startup"},
                      {**common, "hook_event_name": "UserPromptSubmit", "turn_id": "t", "model": "gpt-5",
                       "prompt": PROMPT}),
        "Gemini CLI": ({**common, "hook_event_name": "SessionStart", "timestamp": "2026-11-24T00:00:00Z",
                        "source": "startup"},
                       {**common, "hook_event_name": "BeforeAgent", "timestamp": "2026-11-24T00:00:00Z",
                        "prompt": "<hook_context>the briefing, a few hundred tokens of it</hook_context>\n\n" + PROMPT}),
        "Cursor": ({"conversation_id": "bench", "generation_id": "g", "hook_event_name": "sessionStart",
                    "workspace_roots": [str(root)], "transcript_path": None, "is_background_agent": False}, None),
    }


def timed(event: str, payload: dict[str, object], root: Path, env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run([*CORTEX, "hook", event], cwd=root, env=env, input=json.dumps(payload).encode(),
                              capture_output=True, check=True)
        times.append((time.perf_counter() - start) * 1000)
        assert done.stdout, f"{event} printed nothing for {payload.get('hook_event_name')}"
    return statistics.median(times[1:])


def sessions(runs: int) -> None:
    import shutil

    from cortex import codex as codex_config
    from tests.e2e.harness import Sandbox
    from tests.e2e.otherclis import codex, gemini

    print("| CLI | no cortex | cortex hooks only | hooks and MCP server |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in (("codex exec", codex), ("gemini -p", gemini)):
            cells = []
            for setup in ("none", "hooks", "all"):
                box = Sandbox(Path(tmp) / f"{name.split()[0]}-{setup}")
                flag = f"--{name.split()[0]}"
                if setup != "none":
                    box.cortex("init", flag)
                if setup == "hooks":  # the MCP server taken back out
                    if flag == "--codex":
                        codex_config._uninstall_mcp(box.project / ".codex" / "config.toml")
                    else:
                        settings = box.project / ".gemini" / "settings.json"
                        data = json.loads(settings.read_text(encoding="utf-8"))
                        del data["mcpServers"]
                        settings.write_text(json.dumps(data), encoding="utf-8")
                times = [run(box, "say hi", [{"text": "hi"}]).seconds for _ in range(runs)]
                cells.append(" ".join(f"{t:.2f}" for t in times) + " s")
                shutil.rmtree(box.root, ignore_errors=True)
            print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description="hooks with each assistant's payload, whole process")
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sessions", action="store_true", help="whole Codex CLI and Gemini CLI sessions instead")
    args = parser.parse_args()
    if args.sessions:
        sessions(args.runs)
        return
    warm_bytecode()
    env = bench_env()
    bare = print_machine(env, args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        generate(root / ".cortex", args.size)
        repo = pygit2.init_repository(str(root), initial_head="main")
        (root / "app.py").write_text("print('hi')\n", encoding="utf-8")
        repo.index.add("app.py")
        repo.index.write()
        signature = pygit2.Signature("bench", "bench@example.com")
        repo.create_commit("HEAD", signature, signature, "init", repo.index.write_tree(), [])
        cases = payloads(root)
        subprocess.run([*CORTEX, "hook", "session-start"], cwd=root, env=env, capture_output=True, check=True,
                       input=json.dumps(cases["Claude Code"][0]).encode())  # builds the cache, starts the server
        wait_for_server(root)
        print(f"store: {args.size:,} memories; medians of {args.runs} runs after one warm-up")
        print("| assistant | SessionStart, cached | / bare Python | prompt hook, served | / bare Python |")
        print("|---|---|---|---|---|")
        for name, (start, prompt) in cases.items():
            started = timed("session-start", start, root, env, args.runs)
            if prompt is not None and wait_for_server(root):
                served = timed("prompt", prompt, root, env, args.runs)
                prompt_cells = f"{served:.0f} ms | {served / bare:.1f}"
            else:
                prompt_cells = "none (no prompt hook that adds context) | "
            print(f"| {name} | {started:.0f} ms | {started / bare:.1f} | {prompt_cells} |")
        stop_server(root)


if __name__ == "__main__":
    main()
