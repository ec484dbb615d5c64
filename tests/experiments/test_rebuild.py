"""The rebuilder gives every row of a requests frame exactly the request sk.request rebuilds
for it (messages and tools), sharing kits, turns and system prompts between rows, and raises
what sk.request raises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sessionkit as sk
from sessionkit.calls.frame import row_settings
from sessionkit.experiments.rebuild import Rebuilder


def test_every_row_is_sk_requests_request(data_dir: Path) -> None:
    corpus = sk.load(data_dir / "sessions", progress=False)
    keys = ["cli:direct", "webui:def456", "telegram:42", "slack:C01:thread"]
    rows = sk.requests([corpus[k] for k in keys], grid={"max_messages": [4, 0]})
    rows = rows[rows["turn"] < 5]
    rebuild = {"workspace": None, "config_dir": None, "nanobot": None, "runtime": None}
    builder = Rebuilder({k: corpus[k] for k in keys}, rebuild)
    checked = 0
    for row in rows.to_dict("records"):
        where = (str(row["session_key"]), str(row["policy"]), int(row["turn"]), int(row["step"]))
        settings = row_settings(row)
        try:
            expected = sk.request(
                corpus, where[0], turn=where[2], step=where[3], policy=where[1], settings=settings
            )
        except (IndexError, ValueError) as exc:
            with pytest.raises(type(exc), match=f"^{re.escape(str(exc))}$"):
                builder.request(*where, settings)
            continue
        built = builder.request(*where, settings)
        assert (built.release, built.messages, built.tools) == (
            expected.release,
            expected.messages,
            expected.tools,
        )
        checked += 1
    assert checked == len(rows) and len(builder.turns) > 0
