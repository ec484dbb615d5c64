"""Seeded fuzzing of loading: damaged copies of generated session files, all checked.

Every mutated file is loaded alone (``sk.load`` plus all three frames) under a time limit.
Each non-blank line is judged by Python's ``json`` as nanobot reads it: a line that loads to
an object must come back with the same value (key order, int/float types, NaN and lone
surrogates included); any other line must be reported as a problem on its line.  Files
that are not regular session files (FIFO, folder, broken links, temp files) must be
reported too.  Each file is then loaded again from the index the first load wrote, which
must give the same frames and messages.  The counts are printed (``pytest -s``) and must all
be zero.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

import sessionkit as sk
import sessionkit.store.index
from sessionkit.nanobot.writer import session_lines
from sessionkit.synthetic import FeatureMix, generate_session, write_store
from sessionkit.tuning import TUNING

SEED = 20261130
N_BASES = 14
TIME_LIMIT = 10
MIX = FeatureMix(verbosity=0.2, blocks=0.2)

Mutation = Callable[[random.Random, list[bytes]], list[bytes]]


HOLDS = "sessionkit holds the line as it is"
FINDINGS: list[str] = []
"""What each nonzero count was, for the failure message."""


class Hang(Exception):
    """A load that ran past the time limit."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- mutations: each takes the file's lines (no line endings) and returns the new lines -----


def pick(rng: random.Random, lines: list[bytes]) -> int:
    return rng.randrange(len(lines))


def message_index(rng: random.Random, lines: list[bytes]) -> int:
    return rng.randrange(1, len(lines)) if len(lines) > 1 else 0


def replaced(index: int, lines: list[bytes], line: bytes) -> list[bytes]:
    return [*lines[:index], line, *lines[index + 1 :]]


def with_field(rng: random.Random, lines: list[bytes], field: str, raw: bytes) -> list[bytes]:
    """A message line with ``"field": raw`` appended (raw JSON text)."""
    i = message_index(rng, lines)
    return replaced(i, lines, lines[i][:-1] + b', "' + field.encode() + b'": ' + raw + b"}")


def as_object(line: bytes) -> dict[str, Any]:
    """A line's object, or an empty one when an earlier mutation damaged it."""
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if type(value) is dict else {}


def truncate(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    i = pick(rng, lines)
    return replaced(i, lines, lines[i][: rng.randrange(len(lines[i]))])


def bit_flip(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    i = pick(rng, lines)
    line = bytearray(lines[i])
    at = rng.randrange(len(line))
    line[at] ^= 1 << rng.randrange(8)
    return replaced(i, lines, bytes(line))


def invalid_utf8(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    i = pick(rng, lines)
    at = rng.randrange(len(lines[i]))
    return replaced(
        i, lines, lines[i][:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80"]) + lines[i][at:]
    )


def huge_int(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    return with_field(rng, lines, "n", b"1" + b"0" * rng.choice([4300, 5000]))


def big_ints(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    value = rng.choice([2**64, 2**64 + 1, -(2**63) - 1, 10**30, 2**64 - 1, -(2**63)])
    return with_field(rng, lines, "n", str(value).encode())


def deep_nesting(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    depth = rng.choice([50, 700, 1020, 3000])
    return with_field(rng, lines, "deep", b"[" * depth + b"]" * depth)


def text_not_string(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    i = message_index(rng, lines)
    record = as_object(lines[i])
    record["content"] = [{"type": "text", "text": rng.choice([5, [1], {"a": 1}, True])}]
    return replaced(i, lines, json.dumps(record).encode())


def lone_surrogate(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    return with_field(
        rng, lines, "s", rng.choice([b'"\\ud800"', b'"x\\udfff y"', b'"\\udc00\\ud800"'])
    )


def nan_values(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    return with_field(
        rng, lines, "v", rng.choice([b"NaN", b"Infinity", b"-Infinity", b"[NaN, 1e400]"])
    )


def non_object(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    bad = rng.choice([b"[1, 2]", b'"text"', b"null", b"42", b"true", b"{}garbage", b"<<<<<<< HEAD"])
    at = rng.randrange(len(lines) + 1)
    return [*lines[:at], bad, *lines[at:]]


def line_endings(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    ending = rng.choice([b"\r", b"\r\r\n", b" \x0c", b"\n\n"])
    return [b"".join(line + ending for line in lines)]


def blank_and_odd_space(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    at = rng.randrange(len(lines) + 1)
    return [*lines[:at], rng.choice([b"", b"   ", b"\t", b"\xc2\xa0", b"\x1c"]), *lines[at:]]


def odd_metadata(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    meta = as_object(lines[0])
    field, value = rng.choice(
        [
            ("metadata", None),
            ("metadata", [1]),
            ("created_at", "9999-12-31T23:59:59"),
            ("created_at", "0001-01-01T00:00:00"),
            ("updated_at", "yesterday"),
            ("created_at", 3),
            ("last_consolidated", "7"),
            ("last_consolidated", -1),
            ("last_consolidated", 10**6),
            ("last_consolidated", True),
            ("key", 7),
            ("key", ""),
            ("key", "t:\ud800"),
        ]
    )
    meta[field] = value
    return replaced(0, lines, json.dumps(meta).encode())


def huge_offset(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    meta = as_object(lines[0])
    meta["last_consolidated"] = 0
    text = json.dumps(meta).replace('"last_consolidated": 0', '"last_consolidated": 1' + "0" * 5000)
    return replaced(0, lines, text.encode())


def damaged_metadata(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    bad = rng.choice([b"null", lines[0][: len(lines[0]) // 2], b"\xff" + lines[0]])
    return replaced(0, lines, bad)


def out_of_range_times(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    i = message_index(rng, lines)
    record = as_object(lines[i])
    record["timestamp"] = rng.choice(
        [
            "2300-01-01T00:00:00",
            "1600-01-01T00:00:00",
            "9999-12-31T23:59:59",
            "2026-01-01T00:00:00+05:00",
            "now",
            7,
        ]
    )
    return replaced(i, lines, json.dumps(record).encode())


def duplicate_keys(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    i = message_index(rng, lines)
    return replaced(i, lines, lines[i][:-1] + b', "role": "tool", "content": 1.0}')


def control_and_nul(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    i = pick(rng, lines)
    at = rng.randrange(len(lines[i]))
    return replaced(
        i, lines, lines[i][:at] + rng.choice([b"\x00", b"\x01", b"\x7f"]) + lines[i][at:]
    )


def bom_and_empty(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    return rng.choice([[b"\xef\xbb\xbf" + lines[0], *lines[1:]], [], [b"", b"  "]])


def extra_records(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    extra = rng.choice([lines[0], b'{"_type": "provider_state", "id": 1}', b'{"_type": 5}'])
    at = rng.randrange(len(lines) + 1)
    return [*lines[:at], extra, *lines[at:]]


def several(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    for mutation in rng.sample(LINE_MUTATIONS[:-1], 3):
        lines = mutation(rng, lines) or [b""]
    return lines


LINE_MUTATIONS: list[Mutation] = [
    truncate,
    bit_flip,
    invalid_utf8,
    huge_int,
    big_ints,
    deep_nesting,
    text_not_string,
    lone_surrogate,
    nan_values,
    non_object,
    line_endings,
    blank_and_odd_space,
    odd_metadata,
    huge_offset,
    damaged_metadata,
    out_of_range_times,
    duplicate_keys,
    control_and_nul,
    bom_and_empty,
    extra_records,
    several,
]


# --- files that are not session files ----------------------------------------------------


def special_files(folder: Path, source: Path) -> list[Path]:
    """A FIFO, a folder, a broken link, a symlink loop, a device, temp files and an
    undecodable name, next to a good session; returns those that must be reported."""
    folder.mkdir()
    (folder / "good_1.jsonl").write_bytes(source.read_bytes())
    names = ("fifo.jsonl", "dir.jsonl", "gone.jsonl", "loop.jsonl", "null.jsonl")
    reported = [folder / n for n in names]
    os.mkfifo(reported[0])
    reported[1].mkdir()
    reported[2].symlink_to("missing.jsonl")
    reported[3].symlink_to("loop.jsonl")
    reported[4].symlink_to(os.devnull)
    for temp in (".good_1.0123456789ab.tmp", "good_1.jsonl.tmp"):
        (folder / temp).write_bytes(source.read_bytes()[:100])
        reported.append(folder / temp)
    lines = source.read_bytes().splitlines()[1:]
    (folder / os.fsdecode(b"t_\xff.jsonl")).write_bytes(b"\n".join(lines) + b"\n")
    return reported


# --- judging a load ------------------------------------------------------------------------


def nanobot_lines(raw: bytes) -> list[tuple[int, bytes]]:
    """(1-based number, bytes) of each line as nanobot's text-mode reading splits them."""
    text = io.TextIOWrapper(
        io.BytesIO(raw), encoding="utf-8", errors="surrogateescape", newline=None
    )
    return [
        (n, line.rstrip("\n").encode("utf-8", "surrogateescape")) for n, line in enumerate(text, 1)
    ]


def judge(line: bytes) -> tuple[str, Any]:
    """``("blank", None)``, ``("object", value)`` or ``("damaged", None)``, by nanobot's json."""
    try:
        text = line.decode("utf-8").strip()
        if not text:
            return "blank", None
        value = json.loads(text)
    except (ValueError, RecursionError):
        return "damaged", None
    return ("object", value) if type(value) is dict else ("damaged", None)


def past_limits(line: bytes) -> tuple[str, Any]:
    """``("yes", value)`` for valid JSON that nanobot's ``json`` refuses over one of its
    limits (an integer's length, nesting), ``("maybe", None)`` for a line nested too deep
    for any parser here to tell, else ``("no", None)``."""
    try:
        text = line.decode("utf-8").strip()
        json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "no", None
    except (ValueError, RecursionError):
        pass
    else:
        return "no", None
    try:
        return "yes", json.loads(text, parse_int=Decimal)
    except RecursionError:
        try:
            return "yes", orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return ("maybe" if "depth limit" in str(exc) else "no"), None
    except ValueError:
        return "no", None


def check_held(path: Path, session: sk.Session | None, problems: Any, counts: Counter[str]) -> None:
    """Every line past ``json``'s limits that is not a kept metadata record is held as it is,
    and written back unchanged when the session is saved."""
    lines = dict(nanobot_lines(path.read_bytes()))
    must, may = set(), set()
    for n, line in lines.items():
        verdict, value = past_limits(line)
        if verdict == "yes" and not (type(value) is dict and value.get("_type") == "metadata"):
            must.add(n)
        elif verdict == "maybe":
            may.add(n)
    mine = problems[problems["path"] == str(path.resolve())]
    numbers = [int(n) for n, r in zip(mine.line_no, mine.reason, strict=True) if HOLDS in r]
    held = [text for _, text in session.held_lines] if session is not None else []
    counts["held lines"] += len(held)
    if not must <= set(numbers) <= must | may:
        counts["valid lines lost"] += 1
        FINDINGS.append(f"{path.parent.name}: held {numbers}, must hold {sorted(must)}")
    elif held != [lines[n].decode("utf-8") for n in numbers]:
        counts["values changed"] += 1
        FINDINGS.append(f"{path.parent.name}: a held line changed")
    elif held:
        try:
            written = iter(session_lines(session).split(b"\n"))  # type: ignore[arg-type]
        except ValueError:  # text no UTF-8 output holds (a lone surrogate): not saved
            return
        if not all(text.encode("utf-8") in written for text in held):
            counts["values changed"] += 1
            FINDINGS.append(f"{path.parent.name}: a held line is not written back")


def check_file(path: Path, counts: Counter[str]) -> None:
    """Load one mutated file and count what went wrong."""
    try:
        with time_limit(TIME_LIMIT):
            corpus = sk.load(path, tokens="fallback")
            corpus.messages, corpus.sessions  # noqa: B018 - every frame must build
            problems = corpus.problems
    except Hang:
        counts["hangs"] += 1
        return
    except Exception as exc:
        counts["crashes"] += 1
        FINDINGS.append(f"{path.parent.name}: {type(exc).__name__}: {exc!s:.120}")
        return
    reported = {(p, n) for p, n in zip(problems["path"], problems["line_no"], strict=True)}
    where = str(path.resolve())
    session = next(iter(corpus), None)
    kept = (
        dict(zip(session.line_numbers, session.messages, strict=True))
        if session is not None
        else {}
    )
    records = [repr(r) for r in session.records] if session is not None else []
    metas = []
    for n, line in nanobot_lines(path.read_bytes()):
        kind, value = judge(line)
        if kind == "damaged":
            counts["damaged lines"] += 1
            found = "damaged lines unreported" if (where, n) not in reported else None
        elif kind == "object":
            counts["valid lines"] += 1
            found = None
            if value.get("_type") == "metadata":
                metas.append(value)
            elif value.get("_type") == "provider_state":
                found = "valid lines lost" if repr(value) not in records else None
            elif n not in kept:
                found = "valid lines lost"
            elif repr(kept[n]) != repr(value):
                found = "values changed"
        else:
            found = None
        if found:
            counts[found] += 1
            FINDINGS.append(f"{path.parent.name} line {n}: {found}: {line[:80]!r}")
    check_index(path, corpus, counts)
    check_held(path, session, problems, counts)
    if metas and session is not None:
        meta = metas[-1]
        key = meta.get("key")
        if repr(session.metadata) != repr(meta.get("metadata", {})) or (
            isinstance(key, str) and key and session.key != key
        ):
            counts["values changed"] += 1
            FINDINGS.append(f"{path.parent.name}: metadata changed")


def _shown(frame: Any) -> str:
    """A frame's dtypes, values and index as text (pandas' own comparisons hash strings,
    which a lone surrogate breaks)."""
    columns = {c: (repr(frame[c].dtype), frame[c].tolist()) for c in frame}
    return repr((columns, frame.index.tolist()))


def check_index(path: Path, cold: sk.Corpus, counts: Counter[str]) -> None:
    """Load the file again from the index the first load wrote: every frame, and the
    messages parsed on demand, must equal the first load's."""
    warm = sk.load(path, tokens="fallback")
    same = [_shown(c) for c in (cold.messages, cold.sessions, cold.problems)] == [
        _shown(w) for w in (warm.messages, warm.sessions, warm.problems)
    ] and [repr(s.messages) for s in cold] == [repr(s.messages) for s in warm]
    if not same:
        counts["index differs"] += 1
        FINDINGS.append(f"{path.parent.name}: the index gives other frames or messages")


def mutants(folder: Path, rng: random.Random) -> Iterator[Path]:
    bases = write_store(
        folder / "bases",
        [
            generate_session(rng, f"{channel}:{n}", rng.randint(2, 5), mix=MIX)
            for n, channel in enumerate(["telegram", "discord", "slack", "cli"] * 4)
        ][:N_BASES],
    )
    for base in bases:
        lines = base.read_bytes().splitlines()
        for kind, mutation in enumerate(LINE_MUTATIONS):
            out = folder / "mutants" / f"{base.stem}-{kind}" / base.name
            out.parent.mkdir(parents=True)
            new = mutation(rng, list(lines))
            ending = rng.choice([b"\n", b"\r\n"]) if mutation is not line_endings else b""
            out.write_bytes(
                b"".join(line + ending for line in new)[: None if rng.random() < 0.9 else -1]
            )
            yield out


def test_fuzzed_files_never_crash_hang_lose_change_or_hide_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index the files just written
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "index"))
    rng = random.Random(SEED)
    counts: Counter[str] = Counter()
    for path in mutants(tmp_path, rng):
        counts["mutated files"] += 1
        check_file(path, counts)
    base = next((tmp_path / "bases").iterdir())
    for i in range(3):
        expected = special_files(tmp_path / f"special{i}", base)
        counts["mutated files"] += len(expected) + 1
        try:
            with time_limit(TIME_LIMIT):
                corpus = sk.load(tmp_path / f"special{i}", tokens="fallback")
                corpus.messages, corpus.sessions  # noqa: B018
                paths = set(corpus.problems["path"])
        except Hang:
            counts["hangs"] += 1
            continue
        except Exception:
            counts["crashes"] += 1
            continue
        counts["damaged lines"] += len(expected)
        counts["damaged lines unreported"] += sum(str(p) not in paths for p in expected)
        counts["valid lines lost"] += len(corpus) != 2
    summary = {
        k: counts[k] for k in ("mutated files", "valid lines", "damaged lines", "held lines")
    }
    failures = {
        k: counts[k]
        for k in (
            "crashes",
            "hangs",
            "valid lines lost",
            "values changed",
            "damaged lines unreported",
            "index differs",
        )
    }
    print(f"\nfuzz load: {summary} {failures}", *FINDINGS[:20], sep="\n")
    assert failures == dict.fromkeys(failures, 0)
    assert counts["mutated files"] >= 300
    assert counts["held lines"] >= 20
    assert len(list((tmp_path / "index").rglob("*.arrow"))) >= 250  # the warm loads used it
