"""A session store as Dask DataFrames: files in byte-balanced partitions, each read by ``sk.load``.

A partition is a contiguous run of the files ``find_session_files`` lists (a session is never
split), loaded by :func:`sessionkit.load` on a worker, so ``read_messages(path).compute()`` holds
the rows of ``sk.load(path).messages`` in the same order.  What differs after ``compute()``:

- the index restarts at 0 in each partition: ``.reset_index(drop=True)`` gives pandas' index;
- categories are the union of the partitions', in order of first appearance, as ``str``
  (``union_categoricals`` makes them so): ``session_key`` and ``role`` keep pandas' order,
  while pandas sorts ``channel`` and ``format``;
- ``windows``, ``file_cap`` and ``requests`` rows come partition by partition, each partition
  in pandas' order (blocks of settings): sort by the settings columns, ``session_key`` and
  ``at`` (``turn`` and ``step``) to compare;
- ``read_problems`` lists leftover temp files last, and each partition's duplicate keys with it;
- a session key stored in two files of different partitions is read twice (``sk.load`` keeps
  the first file and records the second in ``problems``).

Workers need sessionkit installed and the store at the same path (a shared filesystem).  Inside
a worker nothing starts a process pool (Dask's worker processes are daemons, which may not fork).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import dask
import dask.dataframe as dd
import pandas as pd
from dask.dataframe.utils import clear_known_categories

import sessionkit
from sessionkit import schema
from sessionkit.calls.installs import ReleaseNotInstalled, find_release
from sessionkit.conventions import entry_point
from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.reader import find_session_files, leftover_temp_files
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.workspace import config_file
from sessionkit.store.corpus import Corpus
from sessionkit.store.counting import Method
from sessionkit.store.frames import problems_frame
from sessionkit.store.sources import PathLike, default_data_dir

__all__ = [
    "PARTITION_BYTES",
    "PARTITION_MESSAGES",
    "file_cap",
    "partition_files",
    "read_messages",
    "read_problems",
    "read_sessions",
    "requests",
    "to_parquet",
    "windows",
]

Paths = PathLike | list[PathLike] | tuple[PathLike, ...]

PARTITION_BYTES = 64 << 20
"""Default partition size for paths: about 64 MiB of session files (~55,000 messages)."""
PARTITION_MESSAGES = 50_000
"""Default partition size for an in-memory Corpus, in messages."""


def _balanced(weights: Sequence[int], npartitions: int) -> list[slice]:
    """Contiguous slices of ``weights`` with about equal sums; none empty, at most ``npartitions``."""
    total = sum(weights) or 1
    # each item joins the part its weight's midpoint falls in: contiguous and balanced
    parts = [
        min(npartitions - 1, int(npartitions * (end - weight / 2) / total))
        for end, weight in zip(itertools.accumulate(weights), weights, strict=True)
    ]
    starts = [i for i in range(len(parts)) if i == 0 or parts[i] != parts[i - 1]]
    return [slice(a, b) for a, b in zip(starts, [*starts[1:], len(parts)], strict=True)]


def _size(path: Path) -> int:
    """Bytes of a session file (0 when it cannot be stat'ed: reading reports it)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def partition_files(paths: Paths | None = None, npartitions: int | None = None) -> list[list[Path]]:
    """The session files under ``paths`` in contiguous groups of about equal bytes.

    Parameters
    ----------
    paths
        What :func:`sessionkit.load` takes (default: the bundled sample store).
    npartitions
        How many groups at most (default: one per :data:`PARTITION_BYTES`).
    """
    files = find_session_files(default_data_dir() if paths is None else paths)
    sizes = [_size(f) for f in files]
    n = npartitions or max(1, math.ceil(sum(sizes) / PARTITION_BYTES))
    return [files[part] for part in _balanced(sizes, n)]


def _session_groups(corpus: Corpus, npartitions: int | None) -> list[list[Session]]:
    """The corpus' sessions in contiguous groups of about equal message counts."""
    sessions = list(corpus)
    sizes = [len(s) for s in sessions]  # an indexed session counts without parsing
    n = npartitions or max(1, math.ceil(sum(sizes) / PARTITION_MESSAGES))
    return [sessions[part] for part in _balanced(sizes, n)]


def _meta(empty: pd.DataFrame) -> pd.DataFrame:
    """``empty`` as Dask meta: categoricals without declared categories are data-dependent."""
    unknown = [
        name
        for name, dtype in empty.dtypes.items()
        if isinstance(dtype, pd.CategoricalDtype) and len(dtype.categories) == 0
    ]
    return clear_known_categories(empty, cols=unknown)


def _messages_part(files: list[PathLike], tokens: Method | None, cache: bool) -> pd.DataFrame:
    return sessionkit.load(files, tokens=tokens, cache=cache).messages


def _sessions_part(files: list[PathLike], tokens: Method | None, cache: bool) -> pd.DataFrame:
    return sessionkit.load(files, tokens=tokens, cache=cache).sessions


def _problems_part(files: list[PathLike]) -> pd.DataFrame:
    return sessionkit.load(files, tokens=None).problems


# Dask turns string columns into its own string dtype by default (NaN for missing); sessionkit's
# keep <NA> (and Python storage where a value is no valid Unicode), so results equal the pandas
# frames exactly.
def _python_strings() -> Any:
    return dask.config.set({"dataframe.convert-string": False})


def _from_files(
    part: Callable[..., pd.DataFrame],
    meta: pd.DataFrame,
    paths: Paths | None,
    npartitions: int | None,
    **kwargs: Any,
) -> dd.DataFrame:
    groups = partition_files(paths, npartitions)
    with _python_strings():
        return dd.from_map(part, groups, meta=_meta(meta), enforce_metadata=False, **kwargs)


def read_messages(
    paths: Paths | None = None,
    *,
    tokens: Method | None = "tiktoken",
    npartitions: int | None = None,
    cache: bool = True,
) -> dd.DataFrame:
    """``sk.load(paths).messages`` as a Dask DataFrame (columns: :data:`schema.MESSAGES`).

    Parameters
    ----------
    paths
        A workspace, sessions folder, file, glob or a list of these (default: the sample store).
    tokens
        Token counting, as :func:`sessionkit.load` takes it.
    npartitions
        How many partitions at most (default: one per :data:`PARTITION_BYTES` of files).
    cache
        Use each worker's persistent index (:mod:`sessionkit.store.index`), as ``sk.load`` does.
    """
    meta = schema.empty_frame(schema.MESSAGES)
    return _from_files(_messages_part, meta, paths, npartitions, tokens=tokens, cache=cache)


def read_sessions(
    paths: Paths | None = None,
    *,
    tokens: Method | None = "tiktoken",
    npartitions: int | None = None,
    cache: bool = True,
) -> dd.DataFrame:
    """``sk.load(paths).sessions`` as a Dask DataFrame (columns: :data:`schema.SESSIONS`);
    parameters as :func:`read_messages`."""
    meta = schema.empty_frame(schema.SESSIONS)
    return _from_files(_sessions_part, meta, paths, npartitions, tokens=tokens, cache=cache)


def read_problems(paths: Paths | None = None, *, npartitions: int | None = None) -> dd.DataFrame:
    """``sk.load(paths).problems`` as a Dask DataFrame (columns: :data:`schema.PROBLEMS`);
    leftover temp files, found here, form the last partition."""
    meta = schema.empty_frame(schema.PROBLEMS)
    found = _from_files(_problems_part, meta, paths, npartitions)
    temp = leftover_temp_files(default_data_dir() if paths is None else paths)
    if not temp:
        return found
    with _python_strings():
        return dd.concat([found, dd.from_pandas(problems_frame(temp), npartitions=1)])


def _sessions(group: list[Path] | list[Session]) -> Corpus | list[Session]:
    """A group of files loaded (tokens are not needed), or a group of sessions as it is."""
    files = cast("list[PathLike]", group)  # when its first item is a Path
    return sessionkit.load(files, tokens=None) if isinstance(group[0], Path) else group


def _windows_part(group: list[Path] | list[Session], grid: dict[str, Any]) -> pd.DataFrame:
    return sessionkit.windows(_sessions(group), **grid, workers=1, progress=False)


def _file_cap_part(group: list[Path] | list[Session], options: dict[str, Any]) -> pd.DataFrame:
    return sessionkit.file_cap(_sessions(group), **options, progress=False)


def _per_session(
    part: Callable[..., pd.DataFrame],
    meta: pd.DataFrame,
    source: Paths | Corpus | None,
    npartitions: int | None,
    options: dict[str, Any],
) -> dd.DataFrame:
    """``part(group, options)`` over groups of files, or of a Corpus' sessions (then shipped
    to the workers inside the task graph)."""
    groups: Iterable[list[Path]] | Iterable[list[Session]] = (
        _session_groups(source, npartitions)
        if isinstance(source, Corpus)
        else partition_files(source, npartitions)
    )
    with _python_strings():
        return dd.from_map(part, groups, args=[options], meta=_meta(meta), enforce_metadata=False)


def windows(
    paths_or_corpus: Paths | Corpus | None = None,
    *,
    npartitions: int | None = None,
    **grid: Any,
) -> dd.DataFrame:
    """:func:`sessionkit.windows` of every session, partition by partition (columns:
    :data:`schema.WINDOWS`); rows come partition by partition (see the module docstring).

    Parameters
    ----------
    paths_or_corpus
        What :func:`read_messages` takes, or a :class:`~sessionkit.Corpus` in memory.
    npartitions
        How many partitions at most (default: per :data:`PARTITION_BYTES` of files, or per
        :data:`PARTITION_MESSAGES` of a Corpus).
    **grid
        The keywords of :func:`sessionkit.windows` except ``workers`` and ``progress``
        (one process per task, no progress bar): its settings, and ``grid=`` to sweep.
    """
    meta = sessionkit.windows([], **grid, workers=1, progress=False)
    return _per_session(_windows_part, meta, paths_or_corpus, npartitions, grid)


def file_cap(
    paths_or_corpus: Paths | Corpus | None = None,
    *,
    npartitions: int | None = None,
    **options: Any,
) -> dd.DataFrame:
    """:func:`sessionkit.file_cap` of every session, partition by partition (columns:
    :data:`schema.FILE_CAP`); ``options`` are its keywords except ``progress``, the rest as
    :func:`windows`."""
    meta = sessionkit.file_cap([], **options, progress=False)
    return _per_session(_file_cap_part, meta, paths_or_corpus, npartitions, options)


def _requests_part(group: list[Path] | list[Session], options: dict[str, Any]) -> pd.DataFrame:
    return sessionkit.requests(_sessions(group), **options, workers=1, progress=False)


def _interpreters(policy: str | Sequence[str] | None, nanobot: Any) -> dict[str, str]:
    """The interpreter of each release the rows may need, found here: ``nanobot`` (one, or
    a mapping by version) where it holds the release, else where :func:`find_release`
    looks; one that does not hold it is passed on as given (so every worker says so too)."""
    requested = policy  # release names, not release objects
    names = [requested] if isinstance(requested, str) else list(requested or POLICIES)
    found = {}
    for version in sorted({get_policy(name).version for name in names} - {""}):
        chosen = nanobot.get(version) if isinstance(nanobot, Mapping) else nanobot
        try:
            found[version] = os.fspath(find_release(version, chosen))
        except ReleaseNotInstalled:
            if chosen is not None:
                found[version] = os.fspath(chosen)
    return found


@entry_point(config="config_dir")
def requests(
    paths_or_corpus: Paths | Corpus | None = None,
    *,
    npartitions: int | None = None,
    workspace: PathLike | None = None,
    config_dir: PathLike | None = None,
    nanobot: Any = None,
    **options: Any,
) -> dd.DataFrame:
    """:func:`sessionkit.requests` of every session, partition by partition (columns:
    :data:`schema.REQUESTS`); rows come partition by partition, as :func:`windows`' do.

    The release interpreters are found here, on the client, and the workspace and config
    file (``config_dir``: the file or its folder; ``config=`` is its deprecated spelling) made
    absolute, so every worker asks for the same kits: the first to need one reads it
    from the kit cache (or asks the release and keeps it there), the others read it back.
    Workers need the releases at the same paths and share the kit cache when they share
    the user's cache folder (``SESSIONKIT_CACHE_DIR``); a release not installed is reported
    by each worker's warning, in its log.  ``options`` are the other keywords of
    :func:`sessionkit.requests` except ``workers`` and ``progress``; the rest as
    :func:`windows`.
    """
    options |= {
        "workspace": Path(workspace).expanduser().resolve() if workspace is not None else None,
        "config_dir": None if config_dir is None else config_file(config_dir).resolve(),
        "nanobot": _interpreters(options.get("policy"), nanobot),
    }
    meta = sessionkit.requests([], **options, workers=1, progress=False)
    return _per_session(_requests_part, meta, paths_or_corpus, npartitions, options)


def to_parquet(frame: dd.DataFrame, path: PathLike, **kwargs: Any) -> None:
    """Write ``frame`` as a Parquet dataset: one file per partition, no index.

    ``dd.read_parquet(path)`` reads back equal partitions: every dtype is kept (pandas'
    metadata in the files) except that string columns come back pyarrow-backed, and
    categoricals have their categories unknown until computed.  Parquet cannot hold a lone
    surrogate (a key or text that is not valid Unicode): such a frame fails to write.
    ``kwargs`` go to :meth:`dask.dataframe.DataFrame.to_parquet`.
    """
    frame.to_parquet(path, write_index=False, **kwargs)
