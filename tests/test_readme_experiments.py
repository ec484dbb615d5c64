"""The README's researcher's session, run as written on a copy of the bundled sample against
the bundled stub: the figures its text states are the ones it computes, and its pin, once
recorded, holds on a second run."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from support.releases import release  # tests/ is on sys.path under pytest

import sessionkit as sk
from sessionkit.experiments.agreement import agreement_by_setting

REPO = Path(__file__).resolve().parent.parent
SECTION = "#### A researcher's session: from which settings to agreement against cost"


def _section() -> tuple[str, str]:
    """The section's python block and its prose after it, whitespace normalised."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n### ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the researcher's session has no python block"
    return code.group(1), " ".join(section[code.end() :].split())


def _stated(prose: str) -> dict[str, Any]:
    found = re.search(
        r"The plan holds (\d+) calls, (\d+) per setting; (\d+) cannot be rebuilt .*? so (\d+) "
        r"are asked\. .*? agrees with the session on (\d+)% of the answers under "
        r"`max_messages=4`, (\d+)% under 8, (\d+)% under 16 and (\d+)% under 50, for about "
        r"(\d+)% more tokens per call from 4 to 50\.",
        prose,
    )
    assert found is not None, "the README no longer states the session's figures"
    return dict(
        zip(
            ("calls", "per_setting", "unbuilt", "asked", "agree", "more"),
            [*map(int, found.groups()[:4]), [int(g) for g in found.groups()[4:8]], int(found[9])],
            strict=True,
        )
    )


@pytest.mark.conformance
def test_the_readme_session_computes_the_figures_it_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release("0.2.2")
    shutil.copytree(REPO / "data" / "sessions", tmp_path / "data" / "sessions")
    monkeypatch.chdir(tmp_path)
    code, prose = _section()
    names: dict[str, Any] = {"sk": sk}
    monkeypatch.setenv(sk.testing.UPDATE_ENV, "1")
    exec(compile(code, "README.md", "exec"), names)
    plt.close("all")
    plan, out, table = names["plan"], names["out"], names["table"]
    tokens = table.set_index("max_messages")["tokens_per_call"]
    assert _stated(prose) == {
        "calls": len(plan),
        "per_setting": len(plan) // 4,
        "unbuilt": plan.summary["failed"],
        "asked": plan.summary["planned"],
        "agree": [round(r * 100) for r in table["agreement_rate"]],
        "more": round((tokens[50] / tokens[4] - 1) * 100),
    }
    assert list(table["max_messages"]) == [4, 8, 16, 50]
    assert set(plan.groupby("max_messages").size()) == {len(plan) // 4}
    assert out.summary["answered"] == plan.summary["planned"]
    monkeypatch.delenv(sk.testing.UPDATE_ENV)
    pinned = sk.testing.assert_agreement_snapshot(out, "agreement.json", tolerance=0.05)
    assert pinned.status == "matches"
    assert agreement_by_setting(out).equals(table)
