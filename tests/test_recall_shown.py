"""Issue 42: what `cortex recall` shows of its hits — the current memory before the one it re-decided, reasons with
the first hits only, and a sentence picked by what the question names, not by a word half the store holds.

Real parts: a git repository with a store written by the `cortex` command (or in process as `cortex remember`
writes it), the `cortex` command as a subprocess.
"""

from __future__ import annotations

from tests.helpers import cortex, cortex_json, remember


def test_a_newer_memory_comes_before_an_older_one_it_contradicts(project):
    """Two active memories on one subject that disagree (a value re-decided, the old note never retired): the
    newer comes first, though the older one's shorter title matches the question more closely; a memory on
    another subject stating another value stays where it ranks."""
    older = cortex("remember", "The payments worker retries failed charges 5 times", "--type", "decision",
                   "--created", "2026-01-10", cwd=project).stdout.strip()
    newer = cortex("remember", "The payments worker retries failed charges 3 times before alerting the on-call "
                   "engineer, since the card processor rate-limits repeated attempts", "--type", "decision",
                   "--created", "2026-03-01", cwd=project).stdout.strip()
    other = cortex("remember", "The search indexer retries failed batches 8 times before giving up", "--type",
                   "decision", "--created", "2026-04-01", cwd=project).stdout.strip()
    rows = cortex_json("recall", "how many times does the payments worker retry failed charges?", "--no-global",
                       cwd=project)
    ids = [row["id"] for row in rows]
    assert newer in ids and older in ids, rows
    assert ids.index(newer) < ids.index(older), [(row["id"], row["title"], row["score"]) for row in rows]
    if other in ids:  # another subject: not moved ahead of what it does not contradict
        assert ids.index(other) > ids.index(older), ids


def test_only_the_first_three_hits_carry_their_reasons(project):
    """Five decisions on the cache, each linked `because` to its own reason: the first three hits shown carry
    their reason (`because` in --json, a `because:` line in text), the others do not (they are not what was
    asked about, and each reason costs a line)."""
    decisions = []
    for n, (what, why) in enumerate([("SQLite", "no server on a laptop"), ("a write-ahead log", "crash safety"),
                                     ("a 64 MB page cache", "the index fits in memory"),
                                     ("one cache file per repository", "clones stay independent"),
                                     ("zstd for cached blobs", "disk use halves")]):
        reason = remember(project, f"Principle {n}: {why}.", type="pattern", link=False)
        decision = remember(project, f"The recall cache uses {what}.", type="decision", link=False)
        cortex("links", "add", decision.id, reason.id, "--rel", "because", cwd=project)
        decisions.append(decision.id)
    rows = cortex_json("recall", "recall cache", "--no-global", cwd=project)
    direct = [row for row in rows if row["via"] is None and row["id"] in decisions]
    assert len(direct) == 5, rows
    assert [("because" in row) for row in direct] == [True, True, True, False, False], rows
    text = cortex("recall", "recall cache", "--no-global", cwd=project).stdout
    assert text.count("because: Principle") == 3, text


def test_a_word_many_memories_hold_does_not_pick_the_sentence_shown(project):
    """"service" is in most of the store's memories: a long body's sentence holding only that word of the question
    is not shown under the title (the title is the answer); a sentence holding a word few memories hold is."""
    for n in range(12):
        remember(project, f"The {['auth', 'search', 'billing', 'mail'][n % 4]} service number {n} runs on port "
                          f"{8000 + n} behind the gateway.", type="context", link=False)
    body = ("First the ledger is frozen and the pending invoices are parked in a queue until the release is back. "
            "Then the previous release is restored from the artifact store and its checksums are compared. "
            "Every service in the cluster gets a restart notice. Refunds issued meanwhile are replayed afterwards.")
    target = remember(project, body, type="architecture", title="Billing rollback runs in two phases", link=False)
    rows = cortex_json("recall", "how does the billing rollback treat each service?", "--no-global", cwd=project)
    row = next(row for row in rows if row["id"] == target.id)
    assert row["snippet"] == "", row
    rows = cortex_json("recall", "how does the billing rollback treat refunds?", "--no-global", cwd=project)
    row = next(row for row in rows if row["id"] == target.id)
    assert "Refunds issued meanwhile are replayed" in row["snippet"], row
