"""0.3.5 workspaces at every entry point: sessions found through ``config_dir``, the folder or
the config file itself (``--config-dir`` on the command line), as nanobot 0.3.5 finds them in
``<config dir>/sessions/<workspace id>/``; a config folder or file given as the store is
refused, naming the workspaces it holds and what to pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sessionkit as sk
import sessionkit.views.report
from sessionkit.cli import main
from sessionkit.nanobot.naming import SessionPathError
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.workspace import config_folder
from sessionkit.nanobot.writer import save_session

WORKSPACE_ID = "0123456789abcdef0123456789abcdef"
KEY = "telegram:42"
MESSAGES = [
    {"role": "user", "content": "rain?", "timestamp": "2026-01-01T10:00:00"},
    {"role": "assistant", "content": "no"},
    {"role": "user", "content": "sure?", "timestamp": "2026-01-01T10:01:00"},
    {"role": "assistant", "content": "yes"},
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``$HOME``, so the default ``~/.nanobot`` holds nothing."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.fixture
def store(tmp_path: Path, home: Path) -> tuple[Path, Path, Path]:
    """``(workspace, config dir, namespace)``: a 0.3.5 workspace as 0.3.5 lays it out, its
    config file ``config.json`` and one session in the namespace folder."""
    workspace = tmp_path / "workspace"
    (workspace / ".nanobot").mkdir(parents=True)
    (workspace / ".nanobot" / "workspace-id").write_text(f"{WORKSPACE_ID}\n")
    config = tmp_path / "config"
    namespace = config / "sessions" / WORKSPACE_ID
    namespace.mkdir(parents=True)
    (namespace / ".workspace").write_text(f"{workspace.resolve()}\n")
    (config / "config.json").write_text("{}\n")
    session = Session(key=KEY, messages=json.loads(json.dumps(MESSAGES)), policy="nanobot-0.3.5")
    save_session(session, namespace)
    return workspace, config, namespace


def test_the_config_dir_is_the_folder_or_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert config_folder(tmp_path) == tmp_path
    assert config_folder(tmp_path / "config.json") == tmp_path
    assert config_folder(tmp_path / "other" / "nanobot.json") == tmp_path / "other"


@pytest.mark.parametrize("given", ["folder", "file"])
def test_load_finds_the_sessions_through_the_config_file_or_folder(store, given: str) -> None:
    workspace, config, namespace = store
    config_dir = config if given == "folder" else config / "config.json"
    corpus = sk.load(workspace, config_dir=config_dir, cache=False)
    assert corpus.keys() == [KEY]
    assert corpus[KEY].path.parent == namespace.resolve()
    assert corpus[KEY].policy == "nanobot-0.3.5"


@pytest.mark.parametrize("what", ["config", "config/config.json", "config/sessions"])
def test_a_config_folder_or_file_as_the_store_names_what_to_pass(
    store, tmp_path: Path, what: str
) -> None:
    workspace, config, _ = store
    with pytest.raises(SessionPathError) as raised:
        sk.load(tmp_path / what, cache=False)
    message = str(raised.value)
    assert str(workspace.resolve()) in message
    assert f"config_dir={str(config)!r}" in message and "--config-dir" in message


@pytest.mark.parametrize(
    ("recorded", "shown"),
    [
        ("workspace", "{config}/workspace"),  # relative, as the bundled data records it
        ("{tmp}/moved", "{tmp}/moved (recorded by namespace {id}; not found)"),
    ],
)
def test_the_hint_names_a_workspace_that_exists_or_says_it_is_missing(
    store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: str, shown: str
) -> None:
    workspace, config, namespace = store
    workspace.rename(config / "workspace")
    monkeypatch.chdir(tmp_path)  # where a relative record does not resolve
    (namespace / ".workspace").write_text(recorded.format(tmp=tmp_path) + "\n")
    with pytest.raises(SessionPathError) as raised:
        sk.load(config, cache=False)
    expected = shown.format(config=config, tmp=tmp_path.resolve(), id=WORKSPACE_ID)
    assert f"pass a workspace ({expected}) with config_dir={str(config)!r}" in str(raised.value)


@pytest.mark.parametrize("source", ["workspace", "sessions"])
def test_a_config_dir_that_does_not_exist_is_named(store, tmp_path: Path, source: str) -> None:
    workspace, _, _ = store
    path = workspace if source == "workspace" else tmp_path
    with pytest.raises(SessionPathError) as raised:
        sk.load(path, config_dir=tmp_path / "typo", cache=False)
    assert str(raised.value) == (
        f"config_dir {str(tmp_path / 'typo')!r} does not exist; pass the config file nanobot "
        "runs with or its folder (command line: --config-dir)"
    )


def test_a_config_file_without_workspaces_is_not_read_as_a_session(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"agents": {}}')
    with pytest.raises(SessionPathError, match="config file, not a session file"):
        sk.load(tmp_path / "config.json", cache=False)


def test_without_its_config_dir_a_035_workspace_says_which_argument_to_pass(store) -> None:
    workspace, _, _ = store
    with pytest.raises(SessionPathError, match=r"pass config_dir= \(command line: --config-dir\)"):
        sk.load(workspace, cache=False)


@pytest.mark.parametrize("given", ["folder", "file"])
def test_fork_into_a_035_workspace_lands_where_035_looks(store, given: str) -> None:
    workspace, config, namespace = store
    config_dir = config if given == "folder" else config / "config.json"
    source = sk.load(workspace, config_dir=config_dir, cache=False)
    with pytest.raises(SessionPathError, match="pass config_dir="):
        sk.fork(source, "telegram:42-fork", 1, key=KEY, sessions_dir=workspace)
    made = sk.fork(
        source, "telegram:42-fork", 1, key=KEY, sessions_dir=workspace, config_dir=config_dir
    )
    assert made.path is not None and made.path.parent == namespace.resolve()
    assert not (workspace / "sessions").exists()
    many = sk.fork_many(source, [0, 2], key=KEY, sessions_dir=workspace, config_dir=config)
    assert {s.path.parent for s in many} == {namespace.resolve()}
    reloaded = sk.load(workspace, config_dir=config_dir, cache=False)
    assert sorted(reloaded.keys()) == sorted([KEY, "telegram:42-fork", *(s.key for s in many)])


def test_the_explorer_forks_into_a_035_workspace(store) -> None:
    workspace, config, namespace = store
    corpus = sk.load(workspace, config_dir=config, cache=False)
    app = sk.explore(corpus, sessions_dir=workspace, config_dir=config / "config.json")
    app.transcript.selected = 1
    app.fork_target.value = "telegram:explored"
    app.fork_button.click()
    assert "sk-ok" in app.fork_result.value, app.fork_result.value
    assert len(list(namespace.glob("*.jsonl"))) == 2


def test_doctor_examines_a_035_workspace(store) -> None:
    workspace, config, namespace = store
    (namespace / "broken.jsonl").write_text("not json\n")
    report = sk.doctor(workspace, config_dir=config / "config.json")
    assert sorted(report["file"]) == sorted(p.name for p in namespace.glob("*.jsonl"))
    with pytest.raises(SessionPathError, match="--config-dir"):
        sk.doctor(config)


@pytest.mark.parametrize("command", ["summary", "problems", "doctor"])
def test_every_command_takes_config_dir(
    store, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace, config, _ = store
    args = [command, str(workspace), "--config-dir", str(config / "config.json")]
    assert main([*args, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert (KEY in out) if command == "summary" else ("rain" not in out)
    assert main([command, str(workspace)]) == 2
    assert "--config-dir" in capsys.readouterr().err
    assert main([command, str(config)]) == 2
    assert f"config_dir={str(config)!r}" in capsys.readouterr().err


def test_the_report_runs_the_tour_on_the_namespace_folder(
    store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, config, namespace = store
    given = []

    def stop(notebook: object, data_path: Path) -> object:
        given.append(data_path)
        raise sessionkit.views.report.ReportError("stopped before any kernel starts")

    monkeypatch.setattr(sessionkit.views.report, "_with_data_path", stop)
    args = ["report", str(workspace), "--config-dir", str(config), "-o", str(tmp_path / "r.html")]
    assert main(args) == 1
    assert given == [namespace.resolve()]
    assert main(args[:2] + args[4:]) == 2
