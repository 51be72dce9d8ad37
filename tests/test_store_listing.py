"""`Store.create` keeps its listing of taken ids between creates, and notices what another writer added."""

from __future__ import annotations

import pytest

from cortex.errors import CortexError
from cortex.memory import Memory
from cortex.store import Store


def test_an_id_another_writer_took_since_the_last_create_is_refused(project):
    mine, theirs = Store.locate(project), Store.locate(project)  # two processes, as far as listings go
    first = mine.create(Memory(id="", type="gotcha", title="First", body="First.\n"))
    mine.create(Memory(id="", type="gotcha", title="Second", body="Second.\n"))  # the listing is reused here
    theirs.create(Memory(id="0123456789ab", type="gotcha", title="Theirs", body="Theirs.\n"))
    theirs.create(Memory(id="ba9876543210", type="decision", title="In a new folder", body="New.\n"))
    for taken in ("0123456789ab", "ba9876543210", first.id):
        with pytest.raises(CortexError, match="already exists"):
            mine.create(Memory(id=taken, type="gotcha", title="Again", body="Again.\n"))
