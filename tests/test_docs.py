"""The docs match the code: every command has help text and a row in the README's table."""

from __future__ import annotations

import re
import subprocess

from cortex.cli import main
from tests.helpers import REPO_ROOT, cortex


def _readme_commands() -> set[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `cortex ([a-z-]+)", section, flags=re.M))


def test_every_command_has_help_text_and_a_readme_row():
    documented = _readme_commands()
    for name, command in main.commands.items():
        assert (command.help or "").strip(), f"cortex {name} has no help text"
        assert name in documented, f"cortex {name} is missing from the README command table"
    assert documented <= set(main.commands), f"README documents unknown commands: {documented - set(main.commands)}"


def test_every_option_has_help_text():
    for name, command in main.commands.items():
        for param in command.params:
            if param.param_type_name == "option":
                assert getattr(param, "help", None), f"cortex {name} {param.opts[0]} has no help text"


def test_help_runs_for_every_command(tmp_path):
    from click.testing import CliRunner

    assert "remember" in cortex("--help", cwd=tmp_path).stdout  # the installed command
    runner = CliRunner()
    for name in main.commands:  # each command's own help, through the same click group (no process each)
        result = runner.invoke(main, [name, "--help"], prog_name="cortex")
        assert result.exit_code == 0 and result.output.startswith("Usage: cortex " + name), (name, result.output)


def test_readme_quick_start_runs_on_the_example_store(tmp_path, example_store):
    """The first README command, minus the install: recall on (a copy of) .cortex-example."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    first = readme.split("```sh\n", 1)[1].split("\n", 1)[0]
    assert '.venv/bin/cortex recall "which database did we pick?" --dir .cortex-example' in first
    store = example_store
    found = cortex("recall", "which database did we pick?", "--dir", str(store), cwd=tmp_path).stdout
    assert "Keep each shop's ledger in its own SQLite file" in found
    shown = cortex("show", "9b3e", "--dir", str(store), cwd=tmp_path).stdout
    assert "Rejected:" in shown


def test_example_store_is_valid_and_complete(tmp_path, example_store):
    import json

    report = json.loads(cortex("status", "--json", "--strict", "--dir", str(example_store), cwd=tmp_path).stdout)
    assert report["problems"] == []
    assert set(report["by_type"]) == {"architecture", "decision", "pattern", "gotcha", "context", "progress", "plan",
                                      "code_description", "code"}
    assert report["by_status"].get("archived") and report["by_status"].get("superseded") and report["pinned"] >= 1


def test_ci_runs_the_readme_test_command():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -e '.[test]'" in readme and "pip install -q -e '.[test]'" in ci
    assert ".venv/bin/python -m pytest -q" in readme and ".venv/bin/python -m pytest -q" in ci
    assert subprocess.run(["bash", "-n", str(REPO_ROOT / ".ci" / "run")]).returncode == 0
