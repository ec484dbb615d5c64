"""The rebuilder gives every row of a requests frame exactly the request sk.request rebuilds
for it (messages and tools), sharing kits, turns and system prompts between rows, and raises
what sk.request raises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sessionkit as sk
from sessionkit.calls.frame import row_settings
from sessionkit.experiments.piece_counts import piece_counter
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


def test_a_shared_count_trims_as_sk_request_does(data_dir: Path, tmp_path: Path) -> None:
    # A tight block limit makes 0.2.2's loop trim nearly every request by its own estimate,
    # here counted by a plan's shared piece counter.
    (tmp_path / "config.json").write_text('{"agents": {"defaults": {"contextBlockLimit": 1500}}}')
    corpus = sk.load(data_dir / "sessions", progress=False)
    keys = ["cli:direct", "webui:def456"]
    rows = sk.requests([corpus[k] for k in keys], config_dir=tmp_path)
    rows = rows[(rows["turn"] < 8) & (rows["policy"] == "nanobot-0.2")]
    rebuild = {"workspace": None, "config_dir": tmp_path, "nanobot": None, "runtime": None}
    counted: list[str] = []
    shared = piece_counter()

    def count(text: str) -> int:
        counted.append(text)
        return shared(text)

    builder = Rebuilder({k: corpus[k] for k in keys}, rebuild, count)
    trimmed = 0
    for row in rows.to_dict("records"):
        where = (str(row["session_key"]), str(row["policy"]), int(row["turn"]), int(row["step"]))
        expected = sk.request(
            corpus, where[0], turn=where[2], step=where[3], policy=where[1], config_dir=tmp_path
        )
        built = builder.request(*where, row_settings(row))
        assert (built.release, built.messages, built.tools) == (
            expected.release,
            expected.messages,
            expected.tools,
        )
        whole = sk.request(corpus, where[0], turn=where[2], step=where[3], policy=where[1])
        trimmed += len(built.messages) < len(whole.messages)
    assert trimmed > 0 and len(counted) >= len(rows) > 0
