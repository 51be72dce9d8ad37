"""The served prompt hook of two installs, alternated in one run: an A/B that the machine's drift cannot bias.

    python bench/served_ab.py [--size 10000] [--prompts 60] [--before TREE] [--contextual-from CACHE]

Two regular installs (`bench.scale.regular_install`): this tree, and `--before` (e.g. a `git archive` of an
older commit; without it, this tree twice, which shows the noise). One generated store of `--size` memories
(`bench.scale.make_project`, the contextual vectors filled or copied with `--contextual-from`), copied once
per install, each copy with its own `cortex serve`. Then `--prompts` fresh prompts, each timed through both
installs' `cortex hook prompt` and `python -c pass`, alternated; medians and ratios to `pass` are printed.
`bench/scale.py` gives the same row among all the others, from one install at a time.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.scale import (ONE_THREAD, PROMPTS, REPO, ask, console_script, env_for, hook_payload,  # noqa: E402
                         make_project, regular_install, stop_servers, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--prompts", type=int, default=60)
    parser.add_argument("--before", type=Path, default=None, help="the other tree (default: this one again)")
    parser.add_argument("--contextual-from", type=Path, default=None, metavar="CACHE",
                        help="copy contextual.f32/.json from an earlier run's store of this size (see bench/scale.py)")
    args = parser.parse_args()
    env = env_for()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        installs = {"before": regular_install(Path(tmp) / "before", args.before or REPO),
                    "after": regular_install(Path(tmp) / "after", REPO)}
        store = Path(tmp) / "store"
        make_project(store, args.size, installs["after"], env, False, True, args.contextual_from)
        roots = {}
        for name, python in installs.items():
            roots[name] = Path(tmp) / f"store-{name}"
            shutil.copytree(store, roots[name], symlinks=True)
            subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=roots[name], env=env, capture_output=True)
            subprocess.Popen([*console_script(python), "serve", "--idle", "600"], cwd=roots[name], env=env | ONE_THREAD,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for root in roots.values():
            deadline = time.time() + 600
            while ask(root, "ping", 1) is None and time.time() < deadline:
                time.sleep(0.1)
        time.sleep(3)
        times: dict[str, list[float]] = {name: [] for name in installs}
        bare = []
        for n in range(args.prompts + 2):  # the first two warm up
            bare.append(timed([installs["after"], "-c", "pass"], Path(tmp), env))
            prompt = f"{PROMPTS[n % len(PROMPTS)]} ({n})"
            for name, python in installs.items():
                times[name].append(timed([*console_script(python), "hook", "prompt"], roots[name], env,
                                         hook_payload(roots[name], "UserPromptSubmit", prompt=prompt)))
        for root in roots.values():
            stop_servers(root)
        base = statistics.median(bare[2:])
        print(f"{args.size:,} memories, {args.prompts} prompts; python -c pass {base:.1f} ms")
        for name, series in times.items():
            middle = statistics.median(series[2:])
            print(f"{name}: served prompt hook {middle:.1f} ms ({middle / base:.2f}x pass)")


if __name__ == "__main__":
    main()
