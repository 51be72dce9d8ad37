"""Issue 42: a hit shows the part of its body that answers, not the file.

Real parts: a git repository with a store written as `cortex remember` writes it, the `cortex` command as a
subprocess.
"""

from __future__ import annotations

import json

from tests.helpers import cortex, cortex_json, remember

DEPLOY = [
    "Deploys go out from the main branch through the release pipeline, never from a laptop.",
    "Each deploy builds one image and tags it with the commit it was built from.",
    "Rollbacks keep the previous three images on the registry so an older build can come back in a minute.",
    "The health check probes port 8081 on every container every ten seconds.",
    "Database migrations run in a separate job before the new containers start.",
    "Secrets come from the vault at start-up and are never baked into an image.",
    "The canary takes five percent of the traffic for fifteen minutes before the rest follows.",
]


def test_a_hit_shows_the_sentence_that_answers_not_the_whole_body(project):
    """A long memory about deploys answers "which port does the health check probe?": recall shows its title
    and the sentence about the port, not the opening sentences or the rest of the body; the whole text stays one
    `cortex show` away."""
    memory = remember(project, " ".join(DEPLOY), type="architecture", title="How deploys work", link=False)
    remember(project, "Session cookies expire after twelve hours of inactivity.", type="pattern", link=False)
    out = cortex("recall", "which port does the health check probe?", cwd=project).stdout
    assert "How deploys work" in out and "8081" in out, out
    for other in DEPLOY[:3] + DEPLOY[4:]:
        assert other[:40] not in out, out
    row = cortex_json("recall", "which port does the health check probe?", cwd=project)[0]
    assert row["id"] == memory.id and "8081" in row["snippet"] and len(row["snippet"]) <= 160
    assert "previous three images" not in json.dumps(row)
    assert all(sentence in cortex("show", memory.id, cwd=project).stdout for sentence in DEPLOY)
