"""``sessionkit request`` and ``sessionkit releases``: exact output, the request itself as
JSON, and the usage errors (exit 2) that say what to do."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from support.releases import release  # noqa: E402

import sessionkit
from sessionkit.cli import main
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.writer import save_session

KEY = "cli:direct"


@pytest.fixture(scope="module")
def corpus(data_dir) -> sessionkit.Corpus:
    return sessionkit.load(data_dir)


@pytest.fixture
def no_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No managed release (an empty releases folder) and no ``nanobot`` on PATH; returns the
    releases folder."""
    folder = tmp_path / "releases"
    folder.mkdir()
    monkeypatch.setenv("SESSIONKIT_RELEASES_DIR", str(folder))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return folder


def test_request_table(data_dir, corpus, capsys: pytest.CaptureFixture[str]) -> None:
    built = sessionkit.request(corpus[KEY], turn=1)
    assert main(["request", str(data_dir), KEY, "1"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[:3] == [
        "nanobot 0.2.2 request for cli:direct, turn 1, step 0",
        f"4 messages, 19 tools, {built.tokens:,} tokens (the release's estimate; parts counted "
        "alone need not add up to it)",
        "                  part  messages  tokens  inferred",
    ]
    rows = [line.rsplit(None, 3) for line in lines[3:]]
    assert [row[0].strip() for row in rows] == [
        "system: identity",
        "system: tool contract",
        "system: active skills",
        "system: skills summary",
        "tools",
        "history",
        "current",
        "steps",
    ]
    parts = built.parts
    assert rows == [
        [f"{p.part:>22}", str(p.messages), str(p.tokens), str(p.inferred)]
        for p in parts.itertuples(index=False)
    ]
    assert (len(built.messages), len(built.tools)) == (4, 19)
    assert {len(line) for line in lines[2:]} == {len(lines[2])}
    assert err == ""


def test_request_json_is_the_request(data_dir, corpus, capsys: pytest.CaptureFixture[str]) -> None:
    built = sessionkit.request(corpus[KEY], turn=1, step=1)
    assert main(["request", str(data_dir), KEY, "1", "--step", "1", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert out == built.to_json() + "\n"
    body = json.loads(out)
    assert (body["messages"], body["tools"]) == (built.messages, built.tools)
    roles = ["system", "user", "assistant", "user", "assistant", "tool", "tool"]
    assert [m["role"] for m in body["messages"]] == roles, "step 1: after the first call's tools"
    assert err == ""


@pytest.mark.parametrize(
    ("key", "guess"),
    [("cli:dirct", "did you mean cli:direct? "), ("matrix:!room", "")],
)
def test_an_unknown_key_exits_2_naming_the_keys(
    data_dir, capsys: pytest.CaptureFixture[str], key: str, guess: str
) -> None:
    assert main(["request", str(data_dir), key, "0"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"sessionkit: error: no session with key {key} in {data_dir} ({guess}15 session(s); "
        f"their keys: `sessionkit summary {data_dir}`)\n"
    )


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (["300"], "turn 300 is out of range: session 'cli:direct' has 200 user turns"),
        (["-1"], "turn -1 is out of range: session 'cli:direct' has 200 user turns"),
        (
            ["1", "--step", "2"],
            "step 2 is out of range: turn 1 of session 'cli:direct' made 2 calls",
        ),
        (
            ["1", "--step", "-1"],
            "step -1 is out of range: turn 1 of session 'cli:direct' made 2 calls",
        ),
    ],
)
def test_a_turn_or_step_out_of_range_exits_2(
    data_dir, capsys: pytest.CaptureFixture[str], where: list[str], message: str
) -> None:
    assert main(["request", str(data_dir), KEY, *where]) == 2
    assert capsys.readouterr() == ("", f"sessionkit: error: {message}\n")


def test_no_release_installed_exits_2_with_the_install_hint(
    tmp_path: Path, no_release: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 0.3.5 session where only 0.2.2 is found (this environment's): how to install 0.3.5."""
    sessions = tmp_path / "ws" / "sessions"
    sessions.mkdir(parents=True)
    messages = [{"role": "user", "content": "rain?", "timestamp": "2026-01-01T10:00:00"}]
    save_session(Session("telegram:42", messages, policy="nanobot-0.3.5"), sessions)
    assert main(["request", str(tmp_path / "ws"), "telegram:42", "0"]) == 2
    assert capsys.readouterr() == (
        "",
        "sessionkit: error: nanobot-ai 0.3.5 is not installed where sessionkit looks (this "
        f"environment, the `nanobot` command on PATH, {no_release}): run "
        "`sessionkit releases install 0.3.5`, or pass --nanobot <its python or venv>\n",
    )


def test_a_named_interpreter_without_the_release_exits_2(
    data_dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = tmp_path / "python"
    assert main(["request", str(data_dir), KEY, "1", "--nanobot", str(nowhere)]) == 2
    assert capsys.readouterr() == (
        "",
        f"sessionkit: error: {nowhere} has no nanobot-ai, not nanobot-ai 0.2.2: pass the "
        "interpreter or venv of that release, or install it with "
        "`sessionkit releases install 0.2.2`\n",
    )


def test_a_session_outside_a_workspace_needs_workspace(
    data_dir, corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(data_dir / "sessions" / "cli_direct.jsonl", loose)
    assert main(["request", str(loose), KEY, "1"]) == 2
    assert capsys.readouterr() == (
        "",
        f"sessionkit: error: {loose / 'cli_direct.jsonl'} is not in a nanobot workspace's "
        "sessions folder: pass --workspace <the workspace whose files the prompt reads>\n",
    )
    given = ["request", str(loose), KEY, "1", "--workspace", str(data_dir), "--format", "json"]
    assert main(given) == 0
    assert capsys.readouterr().out == sessionkit.request(corpus[KEY], turn=1).to_json() + "\n"


def test_releases_list_says_where_each_release_is(
    no_release: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["releases", "list"]) == 0
    assert capsys.readouterr() == (
        f"nanobot-ai 0.2.2: {sys.executable} (this environment)\n"
        "nanobot-ai 0.3.0: not installed (`sessionkit releases install 0.3.0` puts it in "
        f"{no_release / '0.3.0'})\n"
        "nanobot-ai 0.3.5: not installed (`sessionkit releases install 0.3.5` puts it in "
        f"{no_release / '0.3.5'})\n",
        "",
    )
    assert main(["releases", "list", "0.3.5"]) == 0
    assert capsys.readouterr().out == (
        "nanobot-ai 0.3.5: not installed (`sessionkit releases install 0.3.5` puts it in "
        f"{no_release / '0.3.5'})\n"
    )


@pytest.mark.conformance
def test_releases_list_names_a_managed_venv_and_the_nanobot_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.3.0 from the releases folder (the suite's install, linked there), 0.3.5 from a
    ``nanobot`` command on PATH whose interpreter holds it."""
    managed, on_path = release("0.3.0").python, release("0.3.5").python
    (tmp_path / "releases").mkdir()
    (tmp_path / "releases" / "0.3.0").symlink_to(managed.parent.parent)
    monkeypatch.setenv("SESSIONKIT_RELEASES_DIR", str(tmp_path / "releases"))
    command = tmp_path / "bin" / "nanobot"
    command.parent.mkdir()
    command.write_text(f"#!{on_path}\nprint('nanobot')\n")
    command.chmod(0o700)
    monkeypatch.setenv("PATH", str(command.parent))
    assert main(["releases", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"nanobot-ai 0.2.2: {sys.executable} (this environment)",
        f"nanobot-ai 0.3.0: {tmp_path / 'releases' / '0.3.0' / 'bin' / 'python'} (installed by "
        "sessionkit)",
        f"nanobot-ai 0.3.5: {on_path} (the nanobot command on PATH)",
    ]


@pytest.mark.parametrize("action", ["install", "list"])
def test_releases_refuses_an_unknown_version(
    no_release: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    assert main(["releases", action, "0.3.5", "9.9", "latest"]) == 2
    assert capsys.readouterr() == (
        "",
        "sessionkit: error: unknown release 9.9, latest (known: 0.2.2, 0.3.0, 0.3.5)\n",
    )
    assert list(no_release.iterdir()) == [], "nothing installed"


def test_releases_argument_errors(no_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["releases", "list", "--missing"]) == 2
    assert capsys.readouterr() == ("", "sessionkit: error: --missing is only used with install\n")
    for argv in (["releases"], ["releases", "upgrade"], ["releases", "install", "--quiet"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2, argv
    assert list(no_release.iterdir()) == []


@pytest.mark.parametrize("command", ["request", "releases"])
def test_help_documents_the_exit_statuses(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 healthy, 1 problems found, 2 usage error, 130 interrupted" in out
