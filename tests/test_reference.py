"""A test that cannot get its reference skips on a developer's machine and fails under CI."""

from __future__ import annotations

import pytest
from support.reference import marked_for, need, unavailable, under_ci


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_under_ci_a_missing_reference_fails(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert under_ci()
    with pytest.raises(pytest.fail.Exception, match="no such release"):
        unavailable("no such release")
    with pytest.raises(pytest.fail.Exception, match="sessionkit_no_such_module"):
        need("sessionkit_no_such_module")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_elsewhere_it_skips(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not under_ci()
    with pytest.raises(pytest.skip.Exception, match="no such release"):
        unavailable("no such release")


def test_a_module_that_is_there_is_returned() -> None:
    assert need("json").dumps([1]) == "[1]"


def test_a_test_asking_for_a_release_must_be_marked(request: pytest.FixtureRequest) -> None:
    with pytest.raises(pytest.fail.Exception, match="uses nanobot-ai 0.3.5 but is not marked"):
        marked_for("conformance", "nanobot-ai 0.3.5")
    request.node.add_marker(pytest.mark.conformance)
    marked_for("conformance", "nanobot-ai 0.3.5")  # now it is
