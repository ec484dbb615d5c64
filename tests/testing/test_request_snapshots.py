"""Request snapshots: each call's size and cost pinned from sk.requests and genai-prices, a
larger window failing with the calls that grew, changes within the tolerance passing, a smaller
window failing too, and damaged files named as such."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from genai_prices import Usage, calc_price

import sessionkit as sk
from sessionkit.testing import (
    UPDATE_ENV,
    SnapshotMismatch,
    assert_requests_snapshot,
    requests_data,
)

KEYS = ("telegram:777", "cli:legacy")
# The process facts nanobot 0.2.2 writes into its prompt, pinned so no value below depends on
# this machine's platform, time zone or PATH (which skills it offers), or on where the checkout
# and the release's install lie.
RUNTIME = {
    "workspace_path": "/home/user/.nanobot/workspace",
    "release_path": "/usr/lib/python3/dist-packages/nanobot",
    "system": "Linux",
    "machine": "x86_64",
    "python_version": "3.11.0",
    "timezone": "UTC",
    "path": "",
}
PRICED = {"model": "gpt-4o-mini", "provider": "openai", "date": "2026-01-01"}


@pytest.fixture(autouse=True)
def _no_update_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPDATE_ENV, raising=False)


@pytest.fixture(scope="module")
def sessions(data_dir: Path) -> list[sk.Session]:
    """Two bundled nanobot 0.2.2 sessions (their workspace is data/)."""
    corpus = sk.load(data_dir / "sessions")
    return [corpus[key] for key in KEYS]


@pytest.fixture(scope="module")
def frames(sessions: list[sk.Session]) -> dict[int, pd.DataFrame]:
    """The requests at max_messages 20 (the recorded policy) and three changes of it."""
    return {n: sk.requests(sessions, max_messages=n, runtime=RUNTIME) for n in (10, 20, 21, 40)}


@pytest.fixture
def recorded(tmp_path: Path, frames: dict[int, pd.DataFrame]) -> Path:
    path = tmp_path / "snapshots" / "requests.json"
    assert assert_requests_snapshot(frames[20], path, update=True, **PRICED).status == "written"
    return path


def _oracle(total: int, read: int) -> float:
    """genai-prices' own price of one request and its cache reads (sk.cost's defaults: the
    'openai' cache with a 5-minute lifetime)."""
    usage = Usage(input_tokens=total, cache_read_tokens=read)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    price = calc_price(usage, "gpt-4o-mini", provider_id="openai", genai_request_timestamp=when)
    return float(format(float(price.total_price), ".6g"))


def _changes(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per call, the relative change of its size and of its cost, computed here from the two
    frames and sk.cost (not by the module under test), labelled as a failure lists calls."""
    keys = ["session_key", "turn", "step"]
    columns = [*keys, "total_tokens", "history_tokens", "prefix_tokens", "cost_usd"]
    old_cost = pd.DataFrame(sk.cost(old, **PRICED)[columns].to_dict("list"))
    new_cost = pd.DataFrame(sk.cost(new, **PRICED)[columns].to_dict("list"))
    both = old_cost.merge(new_cost, on=keys, suffixes=("_old", "_new"))
    both = both.sort_values(keys, ignore_index=True)
    return both.assign(
        size=both["total_tokens_new"] / both["total_tokens_old"] - 1,
        dear=both["cost_usd_new"] / both["cost_usd_old"] - 1,
        label=[f"{r.session_key} turn {r.turn} step {r.step}" for r in both.itertuples()],
    )


def _listed(message: str) -> list[str]:
    """The calls a failure message lists, by label."""
    return [line.strip().split(": ", 1)[0] for line in message.splitlines() if " step " in line]


def test_the_file_pins_each_calls_size_parts_and_price(
    recorded: Path, frames: dict[int, pd.DataFrame]
) -> None:
    lines = recorded.read_text().splitlines()
    assert lines[:3] == [
        "{",
        '  "format": "sessionkit requests snapshot 1",',
        '  "priced": {"model": "gpt-4o-mini", "provider": "openai", "date": '
        '"2026-01-01T00:00:00", "completion_tokens": 0, "cost_model": 2},',
    ]
    data = json.loads(recorded.read_text())
    assert data["settings"]["policy"] == "nanobot-0.2"
    assert data["settings"]["max_messages"] == 20
    assert data["columns"] == [
        "session_key",
        "turn",
        "step",
        "total_tokens",
        "history_tokens",
        "prefix_tokens",
        "cost_usd",
    ]
    assert len(data["rows"]) == len(lines) - 8 == 221
    frame = frames[20].assign(session_key=frames[20]["session_key"].astype(str))
    frame = frame.sort_values(["session_key", "turn", "step"])
    assert data["rows"] == [
        [r.session_key, r.turn, r.step, r.total_tokens, r.history_tokens, r.prefix_tokens]
        + [_oracle(r.total_tokens, r.cache_read_tokens)]
        for r in frame.itertuples()
    ]
    # the history part is the data's alone, whatever the machine
    assert [r[4] for r in data["rows"] if r[:3] == ["cli:legacy", 21, 0]] == [554]
    assert assert_requests_snapshot(frames[20], recorded, **PRICED).status == "matches"
    assert requests_data(frames[20], **PRICED).values.tolist() == data["rows"]


def test_a_larger_window_fails_listing_the_calls_that_grew(
    recorded: Path, frames: dict[int, pd.DataFrame]
) -> None:
    changes = _changes(frames[20], frames[40])
    grew = changes[(changes["size"] > 0.05) | (changes["dear"] > 0.05)]
    assert 150 <= len(grew) < 221 and grew["size"].max() > 0.3
    with pytest.raises(SnapshotMismatch) as info:
        assert_requests_snapshot(frames[40], recorded, rel_tol=0.05, **PRICED)
    message = str(info.value)
    lines = message.splitlines()
    assert lines[:3] == [
        f"requests differ from snapshot {recorded.as_posix()} beyond rel_tol=0.05, abs_tol=0 "
        "tokens, abs_usd=0 (snapshot -> result):",
        "  settings: max_messages 20 -> 40",
        f"  {len(grew)} of 221 calls larger or dearer:",
    ]
    assert _listed(message)[:12] == grew["label"].head(12).tolist()
    assert f"    ... {len(grew) - 12} more" in lines
    first = changes.set_index("label").loc["cli:legacy turn 10 step 0"]
    old, new = first["total_tokens_old"], first["total_tokens_new"]
    assert (first["history_tokens_old"], first["history_tokens_new"]) == (808, 1305)
    assert new - old == 1305 - 808
    line = next(x for x in lines if x.startswith("    cli:legacy turn 10 step 0:"))
    assert line.startswith(
        f"    cli:legacy turn 10 step 0: total_tokens {old} -> {new} ({new / old - 1:+.1%})"
    )
    assert line.endswith(
        "; history_tokens 808 -> 1305 (+61.5%), prefix_tokens "
        f"{first['prefix_tokens_old']} -> {first['prefix_tokens_new']} "
        f"({first['prefix_tokens_new'] / first['prefix_tokens_old'] - 1:+.1%})"
    )
    assert message.endswith(
        "A call that shrank or got cheaper beyond the tolerance is a change too: accept the new "
        f"result with update=True or {UPDATE_ENV}=1."
    )


def test_a_change_within_the_tolerance_passes_and_leaves_the_file(
    recorded: Path, frames: dict[int, pd.DataFrame]
) -> None:
    """One more message moves each call by at most the largest change computed here: a
    tolerance above it passes, one just below it fails on exactly the calls beyond it."""
    changes = _changes(frames[20], frames[21])
    largest = float(np.abs(changes[["size", "dear"]]).max().max())
    assert 0.2 < largest < 0.3
    before = recorded.read_bytes()
    ok = assert_requests_snapshot(frames[21], recorded, rel_tol=largest + 0.001, **PRICED)
    assert repr(ok).endswith("requests.json: matches (221 rows x 7 columns)>")
    with pytest.raises(SnapshotMismatch) as info:
        assert_requests_snapshot(frames[21], recorded, rel_tol=largest - 0.001, **PRICED)
    beyond = changes[np.abs(changes[["size", "dear"]]).max(axis=1) > largest - 0.001]
    assert _listed(str(info.value)) == beyond["label"].tolist() and len(beyond) == 1
    assert recorded.read_bytes() == before


def test_absolute_tolerances_absorb_a_machines_few_tokens(
    recorded: Path, sessions: list[sk.Session], frames: dict[int, pd.DataFrame]
) -> None:
    """Another Python version in the prompt's runtime line: every call two tokens apart:
    within 2 tokens and $0.00001 (a shared prefix may cross one of OpenAI's 128-token cache
    steps), beyond 1 token."""
    other = sk.requests(
        sessions, max_messages=20, runtime={**RUNTIME, "python_version": "3.13.0rc1"}
    )
    shift = other["total_tokens"].to_numpy() - frames[20]["total_tokens"].to_numpy()
    assert set(shift.tolist()) == {2}
    within = {"abs_tol": 2, "abs_usd": 1e-5}
    assert assert_requests_snapshot(other, recorded, **within, **PRICED).status == "matches"
    with pytest.raises(SnapshotMismatch, match="221 of 221 calls larger or dearer"):
        assert_requests_snapshot(other, recorded, abs_tol=1, abs_usd=1e-6, **PRICED)


def test_a_smaller_window_beyond_the_tolerance_fails_too(
    recorded: Path, frames: dict[int, pd.DataFrame]
) -> None:
    changes = _changes(frames[20], frames[10])
    shrank = changes[(changes["size"] < -0.05) | (changes["dear"] < -0.05)]
    assert len(shrank) > 100 and (changes[["size", "dear"]] <= 0.05).all().all()
    with pytest.raises(SnapshotMismatch) as info:
        assert_requests_snapshot(frames[10], recorded, rel_tol=0.05, **PRICED)
    message = str(info.value)
    assert f"  {len(shrank)} of 221 calls smaller or cheaper:" in message
    assert "larger or dearer" not in message
    assert _listed(message)[:12] == shrank["label"].head(12).tolist()
    assert "A call that shrank or got cheaper beyond the tolerance is a change too" in message


def test_update_rewrites_only_what_is_beyond_the_tolerance(
    recorded: Path, frames: dict[int, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UPDATE_ENV, "1")
    before = recorded.read_bytes()
    grown = frames[20].assign(total_tokens=frames[20]["total_tokens"] + 1)
    kept = assert_requests_snapshot(grown, recorded, abs_tol=1, abs_usd=1e-6, **PRICED)
    assert kept.status == "matches" and recorded.read_bytes() == before
    assert assert_requests_snapshot(grown, recorded, **PRICED).status == "updated"
    assert json.loads(recorded.read_text())["rows"][0][3] == json.loads(before)["rows"][0][3] + 1
    recorded.write_bytes(before)
    within = assert_requests_snapshot(frames[21], recorded, rel_tol=0.3, **PRICED)
    assert within.status == "updated"  # within the tolerance, but the settings it names changed
    assert json.loads(recorded.read_text())["settings"]["max_messages"] == 21
    monkeypatch.delenv(UPDATE_ENV)
    assert assert_requests_snapshot(frames[21], recorded, **PRICED).status == "matches"
    assert assert_requests_snapshot(frames[20], recorded, rel_tol=0.3, **PRICED).status == (
        "matches"
    )


def test_another_price_is_a_failure_not_a_tolerance(
    recorded: Path, frames: dict[int, pd.DataFrame]
) -> None:
    with pytest.raises(SnapshotMismatch) as info:
        assert_requests_snapshot(frames[20], recorded, **{**PRICED, "model": "gpt-4o"}, rel_tol=1)
    assert (
        "  priced with model 'gpt-4o-mini', now 'gpt-4o': the costs cannot be compared"
        in str(info.value).splitlines()
    )
    same_moment = datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    kept = assert_requests_snapshot(frames[20], recorded, **{**PRICED, "date": same_moment})
    assert kept.status == "matches"


def test_another_cost_model_is_a_failure_naming_the_change(
    recorded: Path, frames: dict[int, pd.DataFrame]
) -> None:
    data = json.loads(recorded.read_text())
    data["priced"]["cost_model"] = 1
    recorded.write_text(json.dumps(data))
    with pytest.raises(SnapshotMismatch) as info:
        assert_requests_snapshot(frames[20], recorded, **PRICED, rel_tol=1)
    assert (
        "  priced under cost model 1, now 2 (cache reads and writes as the cache model finds "
        "them (rules, 5-minute lifetime), each call's stored answer as output): the costs "
        "cannot be compared"
    ) in str(info.value).splitlines()
    del data["priced"]["cost_model"]
    recorded.write_text(json.dumps(data))
    with pytest.raises(SnapshotMismatch) as info:
        assert_requests_snapshot(frames[20], recorded, **PRICED, rel_tol=1)
    assert "  priced under cost model 1 or older (unrecorded), now 2 (" in str(info.value)


def _cut(text: str) -> str:
    """The file cut off after its 20th line (a merge or a full disk)."""
    return "".join(text.splitlines(keepends=True)[:20])


def _edit(key: str, value: object) -> object:
    def edit(text: str) -> str:
        data = json.loads(text)
        data[key] = value(data[key]) if callable(value) else value
        return json.dumps(data)

    return edit


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_cut, r"not JSON: Expecting value: line 21 column 1"),
        (_edit("format", "something else"), r'no "format": "sessionkit requests snapshot 1"'),
        (_edit("rows", {}), r"'rows' missing or not a list"),
        (_edit("columns", lambda c: c[:-1]), r"columns \[.*'prefix_tokens'\], expected"),
        (_edit("rows", lambda r: [r[0][:-1], *r[1:]]), r"row 0 is not \[session_key, turn"),
        (_edit("rows", lambda r: [[*r[0][:3], "9000", *r[0][4:]], *r[1:]]), r"row 0 is not"),
        (_edit("rows", lambda r: [r[0], *r]), r"a \(session_key, turn, step\) appears twice"),
    ],
)
def test_a_damaged_file_says_what_is_wrong(
    recorded: Path, frames: dict[int, pd.DataFrame], damage, reason: str
) -> None:
    recorded.write_text(damage(recorded.read_text()))
    with pytest.raises(SnapshotMismatch) as info:
        assert_requests_snapshot(frames[20], recorded, **PRICED)
    assert re.match(
        f"{re.escape(recorded.as_posix())} is not a requests snapshot \\({reason}", str(info.value)
    )
    assert str(info.value).endswith(f"; re-record it with update=True or {UPDATE_ENV}=1")
    assert assert_requests_snapshot(frames[20], recorded, update=True, **PRICED).status == "updated"
    assert assert_requests_snapshot(frames[20], recorded, **PRICED).status == "matches"


def test_missing_file_grid_and_suffix_are_refused(
    tmp_path: Path, sessions: list[sk.Session], frames: dict[int, pd.DataFrame]
) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(SnapshotMismatch, match=f"no snapshot at .*none.json.*{UPDATE_ENV}=1"):
        assert_requests_snapshot(frames[20], missing, **PRICED)
    assert not missing.exists()
    with pytest.raises(ValueError, match=r"end in \.json"):
        assert_requests_snapshot(frames[20], tmp_path / "r.csv", update=True, **PRICED)
    grid = pd.concat([frames[20], frames[40]], ignore_index=True)
    with pytest.raises(ValueError, match="several \\(a grid over max_messages\\): pass one"):
        requests_data(grid, **PRICED)
