"""Generated sessions written as stores: JSONL files byte-identical to nanobot's own save."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sessionkit.nanobot.naming import Naming, session_filename
from sessionkit.nanobot.writer import jsonl_line
from sessionkit.synthetic.sessions import FeatureMix, Record, SessionData, generate_session


@dataclass(frozen=True)
class CorpusStats:
    """What :func:`generate_corpus` wrote."""

    n_sessions: int
    n_messages: int
    n_bytes: int
    paths: list[Path] = field(repr=False)


def to_jsonl(records: Iterable[Record]) -> str:
    """Records as nanobot 0.2.2's ``SessionManager.save`` writes them: one JSON line each."""
    return "".join(map(jsonl_line, records))


def write_store(
    sessions_dir: str | Path,
    sessions: Iterable[SessionData],
    *,
    naming: Naming = "nanobot-0.2",
) -> list[Path]:
    """Write sessions as ``<stem>.jsonl`` files, byte-identical to nanobot's own save.

    Parameters
    ----------
    sessions_dir
        Folder to write into (created if missing).
    sessions
        ``(metadata_record, messages)`` pairs, as :func:`generate_session` returns.
    naming
        ``"nanobot-0.2"`` (safe key, ``telegram_123.jsonl``) or ``"nanobot-0.3"``
        (base64url of the key without padding).

    Returns
    -------
    list[Path]
        The files written, in input order.

    Raises
    ------
    ValueError
        When two keys map to the same file name.
    """
    folder = Path(sessions_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for record, messages in sessions:
        path = folder / session_filename(record["key"], naming)
        if path in paths:
            raise ValueError(f"two sessions map to {path.name}")
        path.write_bytes(to_jsonl([record, *messages]).encode("utf-8"))
        paths.append(path)
    return paths


_CORPUS_CHANNELS = ("telegram", "discord", "slack", "webui", "cli", "feishu", "whatsapp", "email")


def generate_corpus(
    out_dir: str | Path,
    *,
    n_sessions: int = 1000,
    target_messages: int = 400_000,
    seed: int = 0,
    mix: FeatureMix = FeatureMix(),
) -> CorpusStats:
    """Write a benchmark store of about ``target_messages`` messages over ``n_sessions`` files.

    Session lengths are skewed (a few very long, many short) like real stores; each
    session's turn count is set from the budget still left, so the total lands close to
    the target.  At the default ``mix`` lines average about 1.2 KB.

    Parameters
    ----------
    out_dir
        The sessions folder to write (nanobot 0.2 file names).
    n_sessions, target_messages
        Corpus shape.
    seed
        Seed for the whole corpus.
    mix
        Feature probabilities and text length scale.

    Returns
    -------
    CorpusStats
        Sessions, messages and bytes written, and the file paths.
    """
    rng = random.Random(seed)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    n_messages = n_bytes = 0
    per_turn = 3.5
    turns_done = 0
    for i in range(n_sessions):
        left = max(target_messages - n_messages, n_sessions - i)
        want = left / (n_sessions - i) * min(rng.lognormvariate(-0.4, 0.9), 8.0)
        n_turns = max(1, round(want / per_turn))
        key = f"{_CORPUS_CHANNELS[i % len(_CORPUS_CHANNELS)]}:{100_000 + i}"
        record, messages = generate_session(rng, key, n_turns, mix=mix)
        data = to_jsonl([record, *messages]).encode("utf-8")
        path = folder / session_filename(key)
        path.write_bytes(data)
        paths.append(path)
        n_messages += len(messages)
        n_bytes += len(data)
        turns_done += n_turns
        per_turn = n_messages / turns_done
    return CorpusStats(n_sessions, n_messages, n_bytes, paths)


# ---------------------------------------------------------------------------------------------
# The bundled sample store (``data/``): what each file exercises is listed in data/README.md.
