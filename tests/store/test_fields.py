"""Reading one field of many messages at once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sessionkit.store.fields import STR_OR_NONE, message_field


class ReadOnly(Mapping[str, Any]):
    """A message that is a mapping but not a dict."""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def test_message_field_reads_dicts_with_none_where_absent() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "tool"}, {}]
    assert message_field(messages, "role") == ["user", "tool", None]
    assert message_field(messages, "content") == ["hi", None, None]
    assert message_field([], "role") == []


def test_message_field_reads_other_mappings() -> None:
    messages = [{"role": "user"}, ReadOnly(role="assistant", content=[1])]
    assert message_field(messages, "role") == ["user", "assistant"]
    assert message_field(messages, "content") == [None, [1]]


def test_str_or_none_covers_plain_text_columns_only() -> None:
    assert STR_OR_NONE.issuperset(map(type, ["a", None, ""]))
    assert not STR_OR_NONE.issuperset(map(type, ["a", 3]))
