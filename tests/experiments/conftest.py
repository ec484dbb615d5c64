"""Fixtures of the experiment tests that only need answers, not a rule: a stub on 127.0.0.1
answering every request "ok", and the bundled sessions in a workspace whose config names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.stub_openai import Reply, Usage
from support.stub_rules import RuleServer, stub_workspace

import sessionkit as sk

OK_MODEL = "gpt-4o-mini"


@pytest.fixture(scope="module")
def ok_stub() -> Iterator[RuleServer]:
    usage = Usage(prompt_tokens=100, completion_tokens=5, cached_tokens=0)
    with RuleServer(lambda body, seen: Reply(usage, text="ok")) as server:
        yield server


@pytest.fixture(scope="module")
def ok_corpus(
    tmp_path_factory: pytest.TempPathFactory, data_dir: Path, ok_stub: RuleServer
) -> sk.Corpus:
    root = tmp_path_factory.mktemp("ok")
    return sk.load(stub_workspace(root, data_dir, ok_stub.url, model=OK_MODEL, api_key="sk-x"))
