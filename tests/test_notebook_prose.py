"""Notebook prose on a store that is not the bundled sample: every sentence about the data is
computed from that data.

Notebooks 02 and 04 and the tour (which ``sessionkit report`` runs) run headless on a small
generated store, built so that the first trim at nanobot's 2,000-message limit is not the
largest one (on the bundled sample they coincide, so stored outputs cannot tell the two apart).
The printed numbers are checked against values computed here from the public API.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import sessionkit as sk
from sessionkit.store.text import markdown_code
from sessionkit.synthetic import FeatureMix, generate_session, write_store

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
MIX = FeatureMix(verbosity=0.1, long_tool_output=0.1, orphan_tool=0.0, consolidated=0.0)
LONG_KEY = "telegram:4242"
HOSTILE_KEY = "discord:77`<img src=x onerror=alert(1)>*x*`"
"""The short session's key: a backtick to break out of a code span, a tag, emphasis."""


def _store(folder: Path) -> Path:
    """A long session (past 2,000 messages) with one orphan tool result late in it, which
    makes one trim drop far more than the first, plus a short mostly-Chinese session whose
    key is hostile Markdown (:data:`HOSTILE_KEY`)."""
    record, messages = generate_session(11, LONG_KEY, 700, mix=MIX, last_consolidated=1000)
    user_at = next(i for i, m in enumerate(messages) if m["role"] == "user" and i > 2150)
    orphan = {
        "role": "tool",
        "tool_call_id": "call_lost",
        "name": "exec",
        "content": "Error: process was terminated",
        "timestamp": messages[user_at - 1]["timestamp"],
    }
    messages.insert(user_at, orphan)
    short = generate_session(12, HOSTILE_KEY, 60, mix=replace(MIX, chinese=0.7))
    write_store(folder, [(record, messages), short])
    return folder


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("workspace") / "sessions")


@pytest.fixture(scope="module")
def corpus(store: Path) -> sk.Corpus:
    return sk.load(store)


NOTEBOOK_NAMES = ("01_tour.ipynb", "02_token_budgets.ipynb", "04_file_cap.ipynb")


def _on_store(name: str, data_path: Path) -> nbformat.NotebookNode:
    """The notebook with its ``parameters`` cell (the first code cell) set to ``data_path``."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    parameters = notebook.cells[1]
    assert "parameters" in parameters.metadata.get("tags", [])
    assert "DATA_PATH = None" in parameters.source
    parameters.source = f"DATA_PATH = {str(data_path)!r}"
    return notebook


def _displayed(notebook: nbformat.NotebookNode) -> str:
    """Everything an executed notebook shows as text: prose cells and text outputs."""
    texts = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                texts.append(output.text)
            elif "data" in output:
                texts.append(output.data.get("text/markdown", output.data.get("text/plain", "")))
    return "\n".join(texts)


@pytest.fixture(scope="module")
def shown(store: Path) -> dict[str, Any]:
    """Each notebook run on ``store`` (all at once, to keep the wait short), or the error
    that stopped it."""
    notebooks = [_on_store(name, store) for name in NOTEBOOK_NAMES]
    clients = [
        NotebookClient(
            notebook,
            timeout=180,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        )
        for notebook in notebooks
    ]

    async def run_all() -> list:
        return await asyncio.gather(
            *(client.async_execute() for client in clients), return_exceptions=True
        )

    results = asyncio.run(run_all())
    return {
        name: result if isinstance(result, BaseException) else notebook
        for name, notebook, result in zip(NOTEBOOK_NAMES, notebooks, results, strict=True)
    }


def _run(shown: dict[str, Any], name: str) -> nbformat.NotebookNode:
    result = shown[name]
    if isinstance(result, BaseException):
        raise result
    return result


def _text(shown: dict[str, Any], name: str) -> str:
    return _displayed(_run(shown, name))


def _markdown(shown: dict[str, Any], name: str) -> str:
    """The Markdown a notebook's code wrote (what a renderer turns into HTML)."""
    return "\n".join(
        output.data["text/markdown"]
        for cell in _run(shown, name).cells
        for output in cell.get("outputs", [])
        if "text/markdown" in output.get("data", {})
    )


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_store_separates_the_first_trim_from_the_largest(corpus: sk.Corpus) -> None:
    growth = sk.file_cap(corpus, grid={"file_cap": [2_000]}, replay="growth")
    first = growth.sort_values(["turn", "at"], kind="stable").iloc[0]
    assert first["dropped"] != growth["dropped"].max()
    assert first["turn"] != growth.loc[growth["dropped"].idxmax(), "turn"]


def test_file_cap_prose_is_computed_from_the_data(
    shown: dict, store: Path, corpus: sk.Corpus
) -> None:
    text = _text(shown, "04_file_cap.ipynb")
    growth = sk.file_cap(corpus, grid={"file_cap": [500, 2_000]}, replay="growth")
    g2000 = growth[growth["limit"] == 2_000]
    first = g2000.sort_values(["turn", "at"], kind="stable").iloc[0]
    largest = g2000.loc[g2000["dropped"].idxmax()]
    # The first trim's own turn and size (issue 14: the largest trim's size was printed).
    said = re.search(
        r"the first trim at 2,000 (?:comes|happens) at turn ([\d,]+)(?: of (<code>.*?</code>))? and "
        r"drops ([\d,]+) message",
        text,
    )
    assert said, text
    assert _number(said[1]) == first["turn"]
    assert _number(said[3]) == first["dropped"]
    assert said[2] == markdown_code(first["session_key"])
    said = re.search(
        r"The largest trim at 2,000 drops ([\d,]+) messages? at once \(turn ([\d,]+) "
        r"of (<code>.*?</code>)",
        text,
    )
    assert said, text
    assert (_number(said[1]), _number(said[2]), said[3]) == (
        largest["dropped"],
        largest["turn"],
        markdown_code(largest["session_key"]),
    )
    assert re.search(rf"At 500 there are {len(growth[growth['limit'] == 500]):,} trims", text)

    final = sk.file_cap(corpus, grid={"file_cap": [2_000]})
    tripped = final[final["tripped"]]
    assert f"{len(tripped)} of 2 sessions trips the cap today" in text
    row = tripped.iloc[0]
    assert row["kept"] < 2_000  # the orphan tool result moves the start
    assert (
        f"{markdown_code(LONG_KEY)} keeps only **{row['kept']:,}** of its "
        f"{row['messages']:,} messages" in text
    )
    assert f"Its offset goes from {row['last_consolidated_before']:,} to" in text

    assert "bundled" not in text
    assert f"Computed from {markdown_code(store)} (2 sessions," in text


def test_token_budget_prose_is_computed_from_the_data(
    shown: dict, store: Path, corpus: sk.Corpus
) -> None:
    text = _text(shown, "02_token_budgets.ipynb")
    assert "bundled" not in text
    stored = [m for session in corpus for m in session.messages]
    exact = np.array(sk.count_tokens(stored))
    fallback = np.array(sk.count_tokens(stored, tokens="fallback"))
    assert (
        f"Computed from {markdown_code(store)} (2 sessions, {len(stored):,} messages, "
        f"{exact.sum():,} tokens)" in text
    )
    assert f"the fallback estimate is {fallback.sum() / exact.sum():.0%} of the exact count" in text
    ratios = {
        s.key: sum(sk.count_tokens(s.messages, tokens="fallback"))
        / sum(sk.count_tokens(s.messages))
        for s in corpus
    }
    low, high = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
    assert (
        f"per session it ranges from {round(ratios[low], 3):.0%} ({markdown_code(low)}) to "
        f"{round(ratios[high], 3):.0%} ({markdown_code(high)})" in text
    )


@pytest.mark.parametrize(
    ("name", "names_it"),
    [("01_tour.ipynb", False), ("02_token_budgets.ipynb", True), ("04_file_cap.ipynb", False)],
)
def test_keys_in_markdown_are_escaped_code(shown: dict, name: str, names_it: bool) -> None:
    """A key the notebook writes into Markdown never ends a code span, opens a tag or adds
    emphasis: the hostile key shows only as :func:`markdown_code` makes it."""
    markdown = _markdown(shown, name)
    assert HOSTILE_KEY in _text(shown, name)  # as plain text in a table
    assert "<img" not in markdown and "discord:77" not in markdown
    assert (markdown_code(HOSTILE_KEY) in markdown) is names_it


def test_the_tour_names_the_store_it_ran_on(shown: dict, store: Path) -> None:
    """``sessionkit report`` is this notebook run headless: prose and outputs as checked here."""
    text = _text(shown, "01_tour.ipynb")
    assert "bundled" not in text
    assert f"Loaded {markdown_code(store)}: 2 session files." in text
