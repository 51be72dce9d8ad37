"""`config.yaml` (cortex/config.py): every value checked when it loads; bad values fall back to their defaults
with a warning naming the key and the file; a file that is not UTF-8 YAML is one error line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cortex.config import DEFAULTS, TEMPLATE, load_config
from cortex.errors import ConfigError
from tests.helpers import cortex, hook, remember


def _load(tmp_path: Path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(path)


def test_the_template_is_the_defaults_and_valid(tmp_path):
    config = _load(tmp_path, TEMPLATE)
    assert config.data == DEFAULTS and not config.warnings and not config.invalid


@pytest.mark.parametrize("text, key, default, message", [
    ("recall: {limit: ten}", "recall.limit", 10,
     "config.yaml: recall.limit must be an integer from 1 to 1000, got 'ten' (default 10 used)"),
    ("recall: {limit: 0}", "recall.limit", 10, "recall.limit must be an integer from 1 to 1000, got 0"),
    ("recall: {limit: 2.5}", "recall.limit", 10, "got 2.5"),
    ("recall: {limit: true}", "recall.limit", 10, "got true"),
    ("recall: {limit: }", "recall.limit", 10, "got nothing"),
    ("recall: {rrf_k: -1}", "recall.rrf_k", 60, "recall.rrf_k must be an integer of at least 0, got -1"),
    ("recall: {bm25_floor: 1.5}", "recall.bm25_floor", 0.5, "must be a number from 0 to 1, got 1.5"),
    ("recall: {weights: {access: '0.2'}}", "recall.weights.access", 0.15, "recall.weights.access must be a number"),
    ("recall: {weights: 3}", "recall.weights", DEFAULTS["recall"]["weights"], "recall.weights must be a mapping"),
    ("briefing: {budget_tokens: lots}", "briefing.budget_tokens", 500, "got 'lots'"),
    ("prompt: {min_cosine: .nan}", "prompt.min_cosine", 0.48, "got nan"),
    ("gc: {archive_after_days: -3}", "gc.archive_after_days", 14, "must be an integer of at least 0, got -3"),
    ("capture: {llm: sometimes}", "capture.llm", "off", "capture.llm must be one of off, auto, on, got 'sometimes'"),
    ("capture: {layers: keyword}", "capture.layers", DEFAULTS["capture"]["layers"], "capture.layers must be a list"),
    ("capture: {layers: [keyword, telepathy]}", "capture.layers", DEFAULTS["capture"]["layers"], "telepathy"),
    ("capture: {llm_command: ''}", "capture.llm_command", "claude -p", "must be a non-empty string"),
    ("git: {on_stop: push}", "git.on_stop", "stage", "git.on_stop must be one of stage, off, commit, got 'push'"),
    ("git: {pre_push: [commit]}", "git.pre_push", "warn", "got ['commit']"),
    ("embedding: {model: 5}", "embedding.model", "bundled", "embedding.model must be a non-empty string, got 5"),
    ("store: {max_memory_bytes: 10}", "store.max_memory_bytes", 262144, "must be an integer of at least 1024"),
])
def test_a_bad_value_falls_back_to_its_default_with_one_line(tmp_path, text, key, default, message):
    config = _load(tmp_path, text)
    assert config.get(key) == default
    assert len(config.invalid) == 1 and message in config.invalid[0], config.invalid
    assert config.invalid[0].startswith("config.yaml: ") and config.invalid[0] in config.warnings


@pytest.mark.parametrize("text, key, value", [
    ("recall: {limit: 25}", "recall.limit", 25), ("recall: {limit: 25.0}", "recall.limit", 25),
    ("recall: {prior_weight: 1}", "recall.prior_weight", 1.0), ("capture: {llm: false}", "capture.llm", "off"),
    ("capture: {llm: true}", "capture.llm", "on"), ("capture: {llm: AUTO}", "capture.llm", "auto"),
    ("git: {on_stop: off}", "git.on_stop", "off"), ("git: {on_stop: false}", "git.on_stop", "off"),
    ("capture: {layers: [self-report]}", "capture.layers", ["self-report"]), ("capture: {layers: []}", "capture.layers", []),
])
def test_good_values_are_kept_as_cortex_uses_them(tmp_path, text, key, value):
    config = _load(tmp_path, text)
    assert config.get(key) == value and type(config.get(key)) is type(value) and not config.invalid


def test_unknown_keys_are_warnings_not_problems(tmp_path):
    config = _load(tmp_path, "recall: {limit: 5, colour: blue}\nfuture: {x: 1}\n")
    assert config.get("recall.limit") == 5 and not config.invalid
    assert config.warnings == ["config.yaml: unknown key 'recall.colour' (ignored)", "config.yaml: unknown key 'future' (ignored)"]


def test_a_binary_config_is_a_config_error_naming_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary")
    with pytest.raises(ConfigError, match="config.yaml: not UTF-8 text"):
        load_config(path)


def test_commands_on_a_binary_config_are_one_line_and_hooks_exit_0(project):
    """Before: UnicodeDecodeError tracebacks in status, recall, briefing. After: one line naming the file, exit 1;
    the hooks exit 0."""
    remember(project, "Use Postgres for the ledger", type="decision", link=False)
    (project / ".cortex" / "config.yaml").write_bytes(bytes(range(256)) * 4)
    for args in (("status",), ("recall", "ledger"), ("briefing", "--fresh"), ("gc", "--dry-run"), ("verify",)):
        result = cortex(*args, cwd=project, check=False)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert result.returncode == 1, (args, result.stdout)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "config.yaml: not UTF-8 text" in lines[0], (args, lines)
    for event in ("session-start", "prompt", "stop"):
        result = hook(event, project, {"session_id": "s", "cwd": str(project), "prompt": "the ledger database?"})
        assert result.returncode == 0 and "Traceback" not in result.stderr, (event, result.stderr)


def test_a_wrong_value_is_a_warning_for_reads_and_a_failure_for_status_strict(project):
    """Before: `recall: {limit: ten}` was a ValueError traceback, and `status --strict` exited 0 on wrong types.
    After: the default is used with a warning on stderr; `status --strict` lists it and exits 1."""
    remember(project, "Use Postgres for the ledger", type="decision", link=False)
    (project / ".cortex" / "config.yaml").write_text("recall: {limit: ten}\nbriefing: {budget_tokens: [1]}\n"
                                                     "mystery: 1\n", encoding="utf-8")
    result = cortex("recall", "ledger", cwd=project)
    assert "Use Postgres" in result.stdout
    assert "cortex: warning: config.yaml: recall.limit must be an integer from 1 to 1000, got 'ten' (default 10 used)" \
        in result.stderr.splitlines()
    assert "Traceback" not in cortex("briefing", "--fresh", cwd=project).stderr
    strict = cortex("status", "--strict", cwd=project, check=False)
    assert strict.returncode == 1, strict.stdout
    assert "problems (2):" in strict.stdout and "  config.yaml: recall.limit must be an integer" in strict.stdout
    assert "warning: config.yaml: unknown key 'mystery' (ignored)" in strict.stdout
    report = json.loads(cortex("status", "--json", cwd=project).stdout)
    assert any("briefing.budget_tokens" in p for p in report["problems"])
    assert not any("recall.limit" in w for w in report["warnings"])
    result = hook("prompt", project, {"session_id": "s", "cwd": str(project), "prompt": "which database for the ledger?"})
    assert result.returncode == 0 and "Traceback" not in result.stderr
    (project / ".cortex" / "config.yaml").write_text("recall: {limit: 3}\nmystery: 1\n", encoding="utf-8")
    assert cortex("status", "--strict", cwd=project, check=False).returncode == 0  # an unknown key is no problem
