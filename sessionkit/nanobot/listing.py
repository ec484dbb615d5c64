"""Session titles and previews exactly as nanobot 0.2.2's ``list_sessions`` shows them."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from sessionkit.nanobot.history import sanitize_assistant_text

__all__ = [
    "PreviewScan",
    "flatten_content",
    "message_preview",
    "session_preview",
    "session_title",
    "strip_think",
]

PREVIEW_MAX_CHARS = 120
_SCAN_MAX_RECORDS = 200
_SCAN_MAX_CHARS = 1_000_000
_SUBAGENT_RESULT_MAX_CHARS = 800

_WHITESPACE = re.compile(r"\s+")

# (pattern, flags) pairs applied in order by strip_think; see nanobot.utils.helpers.
_PARTIAL_TAG = (
    r"</?(?:t|th|thi|thin|think|tho|thou|thoug|though|thought)>?"
    r"|<\|?(?:c|ch|cha|chan|chann|channe|channel)(?:\|?>?)?"
)
_THINK_RULES = [
    re.compile(r"<think>[\s\S]*?</think>"),
    re.compile(r"^\s*<think>[\s\S]*$"),
    re.compile(r"<thought>[\s\S]*?</thought>"),
    re.compile(r"^\s*<thought>[\s\S]*$"),
    re.compile(r"<think(?![A-Za-z0-9_\-:>/])"),
    re.compile(r"<thought(?![A-Za-z0-9_\-:>/])"),
    re.compile(r"^\s*</think>\s*"),
    re.compile(r"\s*</think>\s*$"),
    re.compile(r"^\s*</thought>\s*"),
    re.compile(r"\s*</thought>\s*$"),
    re.compile(r"^\s*<\|?channel\|?>\s*"),
    re.compile(rf"(?:{_PARTIAL_TAG})$"),
    re.compile(r"^\s*<\|?$"),
]


def strip_think(text: str) -> str:
    """Remove model thinking blocks and leaked control tags, as nanobot does for titles."""
    for rule in _THINK_RULES:
        text = rule.sub("", text)
    return text.strip()


def flatten_content(content: Any) -> str:
    """Message content as one string: text blocks of a list joined by spaces, else ``""``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
    return ""


def _scrub_subagent(content: str) -> str:
    """Shorten a subagent announcement to its header and result, as channel previews do."""
    stripped = content.replace("\r\n", "\n").strip()
    lines = stripped.splitlines()
    header = lines[0].strip() if lines and lines[0].startswith("[Subagent") else ""
    lower = stripped.lower()
    marker = "\nresult:\n"
    at = lower.find(marker)
    if at == -1:
        marker = "\nresult:"
        at = lower.find(marker)
    if at == -1:
        return header or stripped
    body = stripped[at + len(marker) :].lstrip()
    cut = body.lower().find("summarize this naturally")
    if cut != -1:
        body = body[:cut].rstrip()
    body = body.strip()
    if len(body) > _SUBAGENT_RESULT_MAX_CHARS:
        body = body[: _SUBAGENT_RESULT_MAX_CHARS - 1].rstrip() + "…"
    if header and body:
        return f"{header}\n\n{body}"
    return header or body or stripped


def message_preview(message: dict[str, Any]) -> str:
    """One message's list preview: flattened, sanitised, whitespace-collapsed, 120 chars."""
    content = message.get("content")
    if message.get("injected_event") == "subagent_result" and isinstance(content, str):
        content = _scrub_subagent(content)
    if not isinstance(content, str | list):
        return ""
    text = _WHITESPACE.sub(" ", sanitize_assistant_text(flatten_content(content))).strip()
    if len(text) > PREVIEW_MAX_CHARS:
        text = text[: PREVIEW_MAX_CHARS - 1].rstrip() + "…"
    return text


def session_title(metadata: Any) -> str:
    """The title nanobot lists: a user-edited title as is, a generated one without thinking."""
    if not isinstance(metadata, dict):
        return ""
    title = metadata.get("title")
    if not isinstance(title, str):
        return ""
    return title if metadata.get("title_user_edited") is True else strip_think(title)


_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(..., ensure_ascii=False)``'s encoder, made once (``dumps`` makes one per call
for any non-default option)."""


def _line_chars(message: dict[str, Any]) -> int:
    return len(_LINE_ENCODER.encode(message)) + 1


def _scan(messages: list[dict[str, Any]], line_numbers: Sequence[int] | None) -> tuple[str, float]:
    """The normal listing preview and the file line where nanobot's scan stopped reading."""
    fallback = ""
    chars = 0
    for scanned, message in enumerate(messages, 1):
        line = line_numbers[scanned - 1] if line_numbers is not None else scanned + 1
        chars += _line_chars(message)
        if scanned > _SCAN_MAX_RECORDS or chars > _SCAN_MAX_CHARS:
            return fallback, line - 1
        text = message_preview(message)
        if not text:
            continue
        if message.get("role") == "user":
            return text, line
        if not fallback and message.get("role") == "assistant":
            fallback = text
    return fallback, math.inf


class PreviewScan:
    """:func:`session_preview` of messages met in batches (a file streamed, its messages not
    kept): holds only the messages the scan reads (at most 201, or 1M characters' worth)
    and the first message's preview text."""

    def __init__(self) -> None:
        self._head: list[dict[str, Any]] = []
        self._lines: list[int] = []
        self._chars = 0
        self._full = False
        self._first_text: str | None = None

    def add(self, messages: list[dict[str, Any]], line_numbers: Sequence[int]) -> None:
        """The next messages, with their file lines."""
        for message, line in zip(messages, line_numbers, strict=True):
            if self._full:
                break
            self._head.append(message)
            self._lines.append(line)
            self._chars += _line_chars(message)
            self._full = len(self._head) > _SCAN_MAX_RECORDS or self._chars > _SCAN_MAX_CHARS
        if self._first_text is None:
            self._first_text = next((text for m in messages if (text := message_preview(m))), None)

    def preview(self, first_damaged_line: int | None) -> str:
        """The preview of all messages added, as :func:`session_preview` gives it."""
        preview, stopped_at = _scan(self._head, self._lines)
        if first_damaged_line is not None and first_damaged_line <= stopped_at:
            return self._first_text or ""
        return preview


def session_preview(
    messages: list[dict[str, Any]],
    *,
    line_numbers: Sequence[int] | None = None,
    first_damaged_line: int | None = None,
) -> str:
    """The preview nanobot lists for a session.

    Normally the first user message's preview within the first 200 records (1M characters),
    else the first assistant's.  When that scan meets a damaged line (``first_damaged_line``
    at or before where it stops), nanobot lists its repaired session instead, whose preview
    is the first message with any preview text.
    """
    preview, stopped_at = _scan(messages, line_numbers)
    if first_damaged_line is not None and first_damaged_line <= stopped_at:
        return next((text for m in messages if (text := message_preview(m))), "")
    return preview
