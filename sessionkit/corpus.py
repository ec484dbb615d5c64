"""A loaded session store: sessions by key, their problems, and lazily built DataFrames."""

from __future__ import annotations

import difflib
import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import pandas as pd

from sessionkit.counting import DEFAULT_CACHE, Method
from sessionkit.fields import message_field
from sessionkit.frames import (
    FRAME_TIMES,
    fits_frame,
    messages_frame,
    problems_frame,
    sessions_frame,
)
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.reader import (
    Problem,
    SessionPathError,
    find_session_files,
    leftover_temp_files,
    parse_timestamp,
    read_session_file,
)
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.uncountable import uncountable_reason

__all__ = ["Corpus", "default_data_dir", "load", "resolve_session"]

PathLike = str | Path


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: loading allocates millions of acyclic dicts, and
    repeated full collections over them would cost more than the parse itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_PACKAGE = Path(__file__).resolve().parent
REPOSITORY_DATA = _PACKAGE.parent / "data"
"""The sample store of a source checkout (generated, 15 sessions)."""
PACKAGED_SAMPLE = _PACKAGE / "_sample"
"""Two of its sessions, shipped inside the wheel (see pyproject's force-include)."""


def default_data_dir() -> Path:
    """The bundled sample store, the default everywhere: the checkout's ``data/``, else (an
    installed wheel) the two sessions packaged as ``sessionkit/_sample``."""
    for path in (REPOSITORY_DATA, PACKAGED_SAMPLE):
        if (path / "sessions").is_dir():
            return path
    raise SessionPathError(
        f"no bundled sample data ({REPOSITORY_DATA} and {PACKAGED_SAMPLE} are missing); "
        "pass the path of a nanobot workspace or sessions folder"
    )


class Corpus:
    """Sessions by key plus the problems met loading them; frames are built on first use.

    Parameters
    ----------
    sessions
        The sessions; keys must be unique (later duplicates are recorded as problems).
    problems
        Problems already met while reading.
    tokens
        How the ``tokens`` columns are counted: ``"tiktoken"`` (nanobot's exact count),
        ``"fallback"`` (nanobot's estimate without tiktoken) or ``None`` (not counted).
    """

    def __init__(
        self,
        sessions: Iterable[Session] = (),
        problems: Iterable[Problem] = (),
        *,
        tokens: Method | None = "tiktoken",
    ) -> None:
        self._problems = list(problems)
        self._sessions: dict[str, Session] = {}
        for session in sessions:
            first = self._sessions.get(session.key)
            if first is not None:
                self._problems.append(
                    Problem(
                        str(session.path),
                        None,
                        f"duplicate session key {session.key!r} (already loaded from "
                        f"{first.path}); this file was skipped",
                    )
                )
                continue
            self._sessions[session.key] = session
        self.token_method = tokens

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(self._sessions.values())

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def __getitem__(self, key: str) -> Session:
        try:
            return self._sessions[key]
        except KeyError:
            close = difflib.get_close_matches(str(key), list(self._sessions), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise KeyError(f"no session {key!r} in this corpus{hint}") from None

    def __repr__(self) -> str:
        n_messages = sum(len(s.messages) for s in self)
        return (
            f"<Corpus: {len(self)} sessions, {n_messages} messages, {len(self._problems)} problems>"
        )

    def keys(self) -> list[str]:
        """Session keys in load order."""
        return list(self._sessions)

    @cached_property
    def messages(self) -> pd.DataFrame:
        """One row per message (see :data:`sessionkit.schema.MESSAGES`)."""
        with _no_gc():
            return messages_frame(list(self), tokens=self.token_method, cache=DEFAULT_CACHE)

    @cached_property
    def sessions(self) -> pd.DataFrame:
        """One row per session (see :data:`sessionkit.schema.SESSIONS`)."""
        damaged: dict[str, int] = {}
        for problem in self._problems:
            if problem.skipped and problem.line_no is not None:
                damaged[problem.path] = min(
                    problem.line_no, damaged.get(problem.path, problem.line_no)
                )
        return sessions_frame(list(self), self.messages, first_damaged_lines=damaged)

    @cached_property
    def problems(self) -> pd.DataFrame:
        """One row per damaged line or file, and per message nanobot cannot count (see
        :data:`sessionkit.schema.PROBLEMS`)."""
        return problems_frame(self._problems + _uncountable_problems(self) + _time_problems(self))


def _uncountable_problems(sessions: Iterable[Session]) -> list[Problem]:
    """One problem per message whose tokens nanobot cannot count."""
    return [
        Problem(str(session.path), line_no, reason)
        for session in sessions
        for message, line_no in zip(
            session.messages, session.line_numbers or [None] * len(session.messages), strict=True
        )
        if (reason := uncountable_reason(message))
    ]


_OUT_OF_FRAME = (
    f"is outside what a frame's time column holds ({FRAME_TIMES[0]:%Y-%m-%d} .. "
    f"{FRAME_TIMES[1]:%Y-%m-%d}): missing (NaT) in corpus.{{frame}}, kept as stored in the Session"
)


def _stamp_outside(value: object) -> bool:
    """Whether a message timestamp is a valid time a frame cannot hold (only years outside
    1678..2261 are parsed to find out)."""
    if type(value) is not str or "1678" <= value[:4] <= "2261":
        return False
    parsed = parse_timestamp(value)
    return parsed is not None and not fits_frame(parsed)


def _time_problems(sessions: Iterable[Session]) -> list[Problem]:
    """One problem per valid time too early or too late for a frame (shown as NaT there)."""
    problems = []
    for session in sessions:
        for field in ("created_at", "updated_at"):
            value = getattr(session, field)
            if value is not None and not fits_frame(value):
                reason = f"metadata {field} {value.isoformat()} " + _OUT_OF_FRAME.format(
                    frame="sessions"
                )
                problems.append(Problem(str(session.path), None, reason))
        stamps = message_field(session.messages, "timestamp")
        lines = session.line_numbers or [None] * len(stamps)
        problems.extend(
            Problem(
                str(session.path),
                line_no,
                f"timestamp {stamp!r} " + _OUT_OF_FRAME.format(frame="messages"),
            )
            for stamp, line_no in zip(stamps, lines, strict=True)
            if _stamp_outside(stamp)
        )
    return problems


def load(
    path: PathLike | list[PathLike] | tuple[PathLike, ...] | None = None,
    *,
    tokens: Method | None = "tiktoken",
    config_dir: PathLike | None = None,
    policy: str | None = None,
) -> Corpus:
    """Load every session under ``path`` into a :class:`Corpus`; never writes.

    Parameters
    ----------
    path
        A nanobot workspace (0.2 and 0.3.0 keep sessions in its ``sessions/``; 0.3.5 in
        ``<config_dir>/sessions/<workspace id>/``), a sessions folder, one session file, a
        glob, or a list of these.  Default: the bundled sample store.
    tokens
        Token counting for the frames: ``"tiktoken"``, ``"fallback"`` or ``None``.
    config_dir
        Where a 0.3.5 nanobot keeps its config (the folder of its ``--config`` file);
        default ``~/.nanobot``.
    policy
        Replay every session with this release's policy (see ``sessionkit.POLICIES``) instead
        of the release that wrote its file.

    Raises
    ------
    SessionPathError
        When a path does not exist or holds no session files.
    """
    source = default_data_dir() if path is None else path
    chosen = None if policy is None else get_policy(policy).name
    files = find_session_files(source, config_dir)
    sessions: list[Session] = []
    problems: list[Problem] = []
    with _no_gc():
        for file in files:
            session, found = _read_isolated(file)
            problems.extend(found)
            if session is not None:
                session.policy = chosen or session.policy
                sessions.append(session)
    problems.extend(leftover_temp_files(source, config_dir))
    return Corpus(sessions, problems, tokens=tokens)


def _read_isolated(file: Path) -> tuple[Session | None, list[Problem]]:
    """:func:`read_session_file`, with any failure it did not foresee kept to this one file."""
    try:
        return read_session_file(file)
    except Exception as exc:  # a bug must cost one file, never the whole corpus
        reason = f"not loaded: sessionkit failed reading it ({type(exc).__name__}: {exc!s:.200})"
        return None, [Problem(str(file), None, reason)]


def resolve_session(
    source: Session | Corpus, key: str | None = None, *, key_name: str = "key"
) -> Session:
    """``source`` itself when it is a Session, else the session ``key`` of the Corpus.

    ``key_name`` is the caller's parameter name, used in the error messages.
    """
    if isinstance(source, Session):
        if key is not None and key != source.key:
            raise ValueError(f"{key_name} {key!r} given with session {source.key!r}")
        return source
    if key is None:
        raise TypeError(f"a Corpus needs {key_name}=..., the key of the session to use")
    session = source[key]
    if not isinstance(session, Session):
        raise TypeError(f"{type(source).__name__}[{key!r}] is not a Session")
    return session
