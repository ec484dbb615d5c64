"""An experiment's plan: every call to ask (each row, model, edit and sample) with its exact
body, the digest its answer is kept under, and its worst-case price."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import orjson
import pandas as pd

from sessionkit.accounting.pricing import price_calls
from sessionkit.calls.frame import row_settings
from sessionkit.experiments.answers import answer_key
from sessionkit.experiments.bodies import Edit, body_of
from sessionkit.experiments.endpoint import Target
from sessionkit.experiments.piece_counts import piece_counter
from sessionkit.experiments.plan_store import Entry, PlanStore, entry_key
from sessionkit.experiments.rebuild import Rebuilder
from sessionkit.nanobot.session import Session
from sessionkit.store import memo
from sessionkit.store.forked import SHARED, can_fork, forked_pool
from sessionkit.tuning import TUNING

__all__ = ["Planned", "Planner", "priced", "worst_costs"]


@dataclass(frozen=True)
class Planned:
    """One call to ask: the row (its position in the calls frame), model, edit and sample;
    the answer's digest, the token estimate and allowed output; the body's bytes (empty until
    :meth:`Planner.with_payloads` builds them for a plan kept from an earlier run); or why the
    row's request could not be rebuilt (``error``; no digest)."""

    call: int
    model: str
    edit: str | None
    sample: int
    payload: bytes = b""
    digest: str = ""
    estimate: int = 0
    max_output: int = -1
    error: str | None = None


class Planner:
    """Every call to ask of ``rows``: each row, model, edit and sample (``rebuild``: the
    keywords :func:`sessionkit.request` takes besides the row's own); with persistence on
    (``cache``), what an earlier run planned for the same calls is taken from the cache
    instead of rebuilt (rows of a governed release, whose kit sessionkit does not build, and
    edits that are functions are always rebuilt)."""

    def __init__(
        self,
        rows: pd.DataFrame,
        sessions: Mapping[str, Session],
        chosen: Target,
        models: Sequence[str],
        variants: Sequence[tuple[str | None, Edit]],
        samples: int,
        rebuild: Mapping[str, Any],
        cache: object,
    ) -> None:
        self.records = rows.to_dict("records")
        self.sessions, self.chosen = sessions, chosen
        self.models, self.variants, self.samples = models, variants, samples
        self.count = piece_counter()
        self.builder = Rebuilder(sessions, rebuild, self.count)
        self.kept = PlanStore(cache)
        self.target = (chosen.url, sorted(chosen.params.items()), samples)
        self.keepable = all(edit is None or isinstance(edit, str) for _, edit in variants)
        """Whether the plan may be kept: no edit is a function, which no key can name."""
        self.files: dict[tuple[str, str], str | None] = {}
        """Each session and release's kept file (:meth:`_file`)."""

    def _file(self, key: str, policy: str) -> str | None:
        """The kept file of a session and release (None: not kept), found once per plan."""
        if (key, policy) not in self.files:
            digest = self.builder.kit_digest(key, policy)
            version = memo.version(self.sessions[key])
            self.files[key, policy] = (
                None
                if digest is None or version is None or not self.keepable
                else self.kept.file_of(version, policy, digest, self.target)
            )
        return self.files[key, policy]

    def _row(self, call: int, row: Mapping[str, Any]) -> list[Planned]:
        """The row's calls, rebuilt."""
        try:
            built = self.builder.request(
                str(row["session_key"]),
                str(row["policy"]),
                int(row["turn"]),
                int(row["step"]),
                row_settings(row),
            )
        except (IndexError, ValueError) as exc:
            error = f"the request cannot be rebuilt: {exc}"
            return [
                Planned(call, model, name, sample, error=error)
                for model in self.models
                for name, _ in self.variants
                for sample in range(self.samples)
            ]
        planned = []
        for model in self.models:
            for name, edit in self.variants:
                try:
                    body, estimate = body_of(
                        built, model, self.chosen.params, edit, self.count, self.chosen.wire
                    )
                except ValueError as exc:
                    error = f"the request cannot be sent: {exc}"
                    planned += [
                        Planned(call, model, name, sample, error=error)
                        for sample in range(self.samples)
                    ]
                    continue
                payload = orjson.dumps(body)
                limit = body.get("max_completion_tokens", body.get("max_tokens"))
                allowed = int(limit) if isinstance(limit, int) else -1
                planned += [
                    Planned(
                        call,
                        model,
                        name,
                        sample,
                        payload,
                        answer_key(self.chosen.url, body, sample),
                        estimate,
                        allowed,
                    )
                    for sample in range(self.samples)
                ]
        return planned

    def _kept_row(self, call: int, entries: Mapping[str, Any], keys: list[str]) -> list[Planned]:
        """The row's calls as kept (none: one is missing or not a kept entry)."""
        planned = []
        at = 0
        for model in self.models:
            for name, _ in self.variants:
                entry = entries.get(keys[at])
                at += 1
                if not _is_entry(entry):
                    return []
                digest, estimate, allowed, error = cast(Entry, entry)
                if error is None and len(digest) != self.samples:
                    return []
                planned += [
                    Planned(call, model, name, sample, b"", digest[sample], estimate, allowed)
                    if error is None
                    else Planned(call, model, name, sample, error=error)
                    for sample in range(self.samples)
                ]
        return planned

    def plan(self, *, bodies: bool = True) -> list[Planned]:
        """Every call, in order; what was rebuilt is kept for the next run (``bodies``: the
        bodies of the calls rebuilt too; a dry run needs none)."""
        found: dict[int, list[Planned]] = {}
        todo: list[tuple[int, str | None, list[str]]] = []
        for call, row in enumerate(self.records):
            name = self._file(str(row["session_key"]), str(row["policy"]))
            keys = []
            if name is not None:
                settings = row_settings(row)
                keys = [
                    entry_key(int(row["turn"]), int(row["step"]), settings, m, cast(str, e))
                    for m in self.models
                    for _, e in self.variants
                ]
                found[call] = self._kept_row(call, self.kept.entries(name), keys)
            if not found.get(call):
                todo.append((call, name, keys))
        found.update(self._rebuilt([call for call, _, _ in todo], bodies))
        for call, name, keys in todo:
            if name is not None:
                self._keep(name, keys, found[call])
        self.kept.flush()
        return [item for call in range(len(self.records)) for item in found[call]]

    def rebuilt_rows(self, calls: Sequence[int], bodies: bool) -> list[tuple[int, list[Planned]]]:
        """The calls of rows ``calls``, rebuilt here (without their bodies unless ``bodies``)."""
        return [
            (call, [p if bodies else replace(p, payload=b"") for p in self._row(call, row)])
            for call, row in ((call, self.records[call]) for call in calls)
        ]

    def _rebuilt(self, calls: list[int], bodies: bool) -> Iterator[tuple[int, list[Planned]]]:
        """The calls of rows ``calls``, rebuilt: in forked workers from
        :data:`TUNING`'s ``parallel_plan_rows`` rows, each task a run of rows in frame order
        (so mostly of one session, whose history pieces its worker counts once)."""
        workers = os.cpu_count() or 1
        if len(calls) < TUNING.parallel_plan_rows or workers < 2 or not can_fork():
            yield from self.rebuilt_rows(calls, bodies)
            return
        runs = [run.tolist() for run in np.array_split(calls, 4 * workers) if len(run)]
        with forked_pool(workers, large_results=bodies, planner=self) as pool:
            tasks = [pool.submit(_rebuild_run, run, bodies) for run in runs]
            for task in as_completed(tasks):
                yield from task.result()

    def _keep(self, name: str, keys: list[str], planned: list[Planned]) -> None:
        """Keep a rebuilt row's calls: one entry per model and edit, its samples' digests."""
        for at, key in enumerate(keys):
            first = planned[at * self.samples]
            digests = [p.digest for p in planned[at * self.samples : (at + 1) * self.samples]]
            self.kept.put(name, key, [digests, first.estimate, first.max_output, first.error])

    def with_payloads(self, planned: list[Planned], todo: Sequence[int]) -> list[Planned]:
        """``planned`` with the bodies of the calls ``todo`` names built (those kept from an
        earlier run have none); a body that no longer matches its kept digest replaces it."""
        missing = sorted({planned[at].call for at in todo if not planned[at].payload})
        out = list(planned)
        fresh = {call: self._row(call, self.records[call]) for call in missing}
        for at in todo:
            item = out[at]
            if item.payload or item.call not in fresh:
                continue
            out[at] = next(
                p
                for p in fresh[item.call]
                if (p.model, p.edit, p.sample) == (item.model, item.edit, item.sample)
            )
        return out


def _rebuild_run(calls: list[int], bodies: bool) -> list[tuple[int, list[Planned]]]:
    """In a forked worker: the rows ``calls`` of the planner that forked it, rebuilt."""
    planner: Planner = SHARED["planner"]
    return planner.rebuilt_rows(calls, bodies)


def _is_entry(entry: Any) -> bool:
    """Whether a kept value is an entry :class:`PlanStore` wrote (a damaged file's is not)."""
    if not (isinstance(entry, list) and len(entry) == 4):
        return False
    digests, estimate, allowed, error = entry
    return (
        isinstance(digests, list)
        and all(isinstance(d, str) for d in digests)
        and isinstance(estimate, int)
        and isinstance(allowed, int)
        and (error is None or isinstance(error, str))
    )


def priced(
    planned: Sequence[Planned], provider: str | None, counts: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """genai-prices' price now of each planned call's ``counts`` (rows of input, cache read,
    cache write and output tokens; -1: unknown, NaN cost), and the problems met."""
    if not planned:
        return np.zeros(0), []
    moment = np.full(len(planned), int(time.time() * 1000), dtype=np.int64)
    found = price_calls([p.model for p in planned], [provider] * len(planned), moment, counts)
    return found.cost, found.problems


def worst_costs(planned: Sequence[Planned], provider: str | None) -> tuple[np.ndarray, list[str]]:
    """Each call's worst case: its estimate plus :data:`TUNING`'s margin, and its whole
    allowed output (NaN: no body, no limit or no price)."""
    margin = 1 + TUNING.experiment_prompt_margin
    counts = np.array(
        [[math.ceil(p.estimate * margin) if p.digest else -1, 0, 0, p.max_output] for p in planned],
        dtype=np.int64,
    ).reshape(-1, 4)
    return priced(planned, provider, counts)
