"""The bundled sample store (``data/``): named sessions in every layout, and damaged files."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sessionkit.nanobot.naming import session_filename, storage_key
from sessionkit.synthetic.sessions import FeatureMix, SessionData, generate_session
from sessionkit.synthetic.stores import to_jsonl, write_store

SAMPLE_SEED = 20261130


_SAMPLE_MIX = FeatureMix(verbosity=0.25, long_tool_output=0.2, title=0.0)


@dataclass(frozen=True)
class _Sample:
    """One bundled session: how to generate it and how to lay it out on disk."""

    key: str
    n_turns: int
    mix: dict[str, float] = field(default_factory=dict)
    title: str | None = None
    user_edited: bool = False
    consolidated: bool = False
    layout: str = "jsonl"
    assistant_only: bool = False
    leading_orphan: bool = False


_SAMPLES = (
    _Sample("telegram:12345", 640, consolidated=True, title="Homelab helper"),
    _Sample("cli:direct", 200, {"tool_turn": 0.8, "code": 0.4, "long_tool_output": 0.35}),
    _Sample(
        "webui:abc123",
        120,
        {"media": 0.15, "blocks": 0.1},
        title="<think>The user is asking about nginx restarts.</think>Fixing nginx restarts",
        consolidated=True,
    ),
    _Sample("webui:f00d42", 80, title="My Lisbon trip", user_edited=True),
    _Sample("discord:987", 100, {"command": 0.2}),
    _Sample(
        "slack:C01:thread",
        100,
        {"echo": 0.15, "time_prefix": 0.15},
        title="Weekly git summary",
        consolidated=True,
    ),
    _Sample(
        "telegram:777",
        90,
        {"chinese": 0.9},
        title="<think>用户想改标题</think>会议记录",
        user_edited=True,
    ),
    _Sample(
        "feishu:ou_5f3a",
        90,
        {"chinese": 0.7, "reasoning": 0.5},
        title="<think>用户在问天气。</think>东京天气",
        consolidated=True,
    ),
    _Sample("whatsapp:+15551234567", 80, {"media": 0.3, "image_only": 0.6}),
    _Sample("email:alice@example.com", 60, {"verbosity": 0.5, "delivery": 0.1}),
    _Sample("dingtalk:staff42", 90, {"orphan_tool": 0.05}, leading_orphan=True),
    _Sample("telegram:42", 200, assistant_only=True),
    _Sample("qq:10001", 80, layout="no-metadata"),
    _Sample("webui:def456", 90, title="Provider state demo", layout="provider-state"),
    _Sample("cli:legacy", 50, layout="legacy-json"),
)


def _sample_session(spec: _Sample, seed: int) -> SessionData:
    mix = replace(_SAMPLE_MIX, consolidated=float(spec.consolidated), **spec.mix)
    record, messages = generate_session(
        f"{seed}:{spec.key}",
        spec.key,
        spec.n_turns,
        mix=mix,
        assistant_only=spec.assistant_only,
        leading_orphan=spec.leading_orphan,
    )
    head: dict[str, Any] = {}
    if spec.title is not None:
        head["title"] = spec.title
    if spec.user_edited:
        head["title_user_edited"] = True
    record["metadata"] = head | record["metadata"]
    return record, messages


def _write_sample(folder: Path, spec: _Sample, seed: int) -> Path:
    record, messages = _sample_session(spec, seed)
    if spec.layout == "jsonl":
        return write_store(folder, [(record, messages)])[0]
    if spec.layout == "no-metadata":
        path = folder / session_filename(spec.key)
        path.write_bytes(to_jsonl(messages).encode("utf-8"))
        return path
    if spec.layout == "provider-state":
        later = {k: v for k, v in record.items() if k != "last_consolidated"}
        later |= {"last_archived": 0, "last_consolidated": record["last_consolidated"]}
        response_id = "resp_" + "".join(random.Random(spec.key).choices("0123456789abcdef", k=32))
        state = {
            "kind": "openai_responses",
            "provider": "openai:default",
            "model": "gpt-5",
            "version": 1,
            "payload": {"response_id": response_id},
            "pending_messages": [],
        }
        path = folder / f"{storage_key(spec.key)}.jsonl"
        lines = [later, {"_type": "provider_state", "state": state}, *messages]
        path.write_bytes(to_jsonl(lines).encode("utf-8"))
        return path
    legacy = {"key": spec.key, "created_at": record["created_at"], "history": messages}
    path = folder / "legacy_chat.json"
    path.write_bytes((json.dumps(legacy, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
    return path


def _damaged_files(seed: int) -> dict[str, bytes]:
    """File name -> bytes for each deliberately damaged session (one problem each, mostly)."""

    def lines(name: str, **changes: Any) -> list[bytes]:
        """A small valid session's lines, with ``changes`` applied to its metadata record."""
        key = f"damaged:{name}"
        mix = replace(_SAMPLE_MIX, verbosity=0.15, consolidated=0.0)
        record, messages = generate_session(f"{seed}:{key}", key, 8, mix=mix)
        record.update(changes)
        return [line.encode("utf-8") for line in to_jsonl([record, *messages]).splitlines()]

    def joined(parts: list[bytes]) -> bytes:
        return b"".join(p + b"\n" for p in parts)

    def cut(line: bytes, n: int) -> bytes:
        """The first ``n`` bytes of a line, dropping a split UTF-8 character (one problem only)."""
        return line[:n].decode("utf-8", "ignore").encode("utf-8")

    def with_line(name: str, bad: bytes) -> bytes:
        parts = lines(name)
        parts.insert(len(parts) // 2, bad)
        return joined(parts)

    files: dict[str, bytes] = {}
    parts = lines("truncated_last_line")
    files["truncated_last_line"] = joined(parts[:-1]) + cut(parts[-1], len(parts[-1]) // 2)
    files["not_json_line"] = with_line("not_json_line", b"<<<<<<< HEAD")
    files["non_object_array"] = with_line("non_object_array", b"[1, 2]")
    files["non_object_string"] = with_line("non_object_string", b'"text"')
    parts = lines("invalid_utf8")
    stamp = json.loads(parts[len(parts) // 2 - 1])["timestamp"]
    latin1 = {"role": "user", "content": "café crème, s'il vous plaît", "timestamp": stamp}
    parts.insert(len(parts) // 2, json.dumps(latin1, ensure_ascii=False).encode("latin-1"))
    files["invalid_utf8"] = joined(parts)
    files["last_consolidated_string"] = joined(
        lines("last_consolidated_string", last_consolidated="7")
    )
    files["last_consolidated_out_of_range"] = joined(
        lines("last_consolidated_out_of_range", last_consolidated=999_999)
    )
    files["empty"] = b""
    files["blank_lines"] = b"\n\n   \n\t\n\n"
    files["crlf_line_endings"] = joined(lines("crlf_line_endings")).replace(b"\n", b"\r\n")
    files["created_at_not_iso"] = joined(lines("created_at_not_iso", created_at="30/11/2026 09:15"))
    parts = lines("several_problems", created_at="yesterday", last_consolidated=999_999)
    parts[3] = parts[3] + b"\r"
    parts.insert(5, b"")
    parts.insert(6, b"not json at all")
    files["several_problems"] = joined(parts[:-1]) + cut(parts[-1], 40)
    return {session_filename(f"damaged:{name}"): data for name, data in files.items()}


def write_sample_data(out_dir: str | Path, *, seed: int = SAMPLE_SEED) -> list[Path]:
    """Regenerate the bundled sample: ``<out_dir>/sessions`` and ``<out_dir>/damaged``.

    Both folders are replaced, so a rerun gives byte-identical output and no stale files.

    Parameters
    ----------
    out_dir
        The data folder (``data/`` in the repository).
    seed
        Seed; the committed data uses :data:`SAMPLE_SEED`.

    Returns
    -------
    list[Path]
        Every file written, sessions first.
    """
    root = Path(out_dir)
    sessions, damaged = root / "sessions", root / "damaged"
    for folder in (sessions, damaged):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    paths = [_write_sample(sessions, spec, seed) for spec in _SAMPLES]
    for name, data in _damaged_files(seed).items():
        path = damaged / name
        path.write_bytes(data)
        paths.append(path)
    return paths
