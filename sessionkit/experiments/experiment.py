"""``sessionkit.experiment``: the exact requests of selected calls asked again (other models,
edits of the current message, several samples), under a budget, as a results frame."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from sessionkit.calls.assembly import config_of, workspace_of
from sessionkit.conventions import entry_point
from sessionkit.experiments.answers import Answer, AnswerStore, Failure, usage_counts
from sessionkit.experiments.asking import ask
from sessionkit.experiments.bodies import Edit, calls_checked
from sessionkit.experiments.budget import Budget
from sessionkit.experiments.endpoint import Target, target
from sessionkit.experiments.judging import (
    ModelJudge,
    judge_calls,
    judge_target,
    model_judge,
    score_of,
)
from sessionkit.experiments.plan import Planned, Planner, priced, worst_costs
from sessionkit.experiments.pool import Job, Sent, send_all
from sessionkit.experiments.results import OUTCOMES, Judge, Scorer, results_frame
from sessionkit.nanobot.anthropic_wire_035 import model_name
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.workspace import config_file
from sessionkit.schema import PROBLEMS, REQUEST_SETTINGS, Reported, frame
from sessionkit.store.corpus import Corpus, resolve_session
from sessionkit.tuning import TUNING

__all__ = ["experiment"]


def _checked(
    samples: int, concurrency: int, budget_calls: int | None, budget_usd: float | None
) -> None:
    """Refuse a count or budget that is no number of the right kind, naming it."""
    for name, value, least in (("samples", samples, 1), ("concurrency", concurrency, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an int of at least {least}, not {value!r}")
    if budget_calls is not None and (
        isinstance(budget_calls, bool) or not isinstance(budget_calls, int) or budget_calls < 0
    ):
        raise ValueError(f"budget_calls must be an int of 0 or more, not {budget_calls!r}")
    if budget_usd is not None and (
        isinstance(budget_usd, bool)
        or not isinstance(budget_usd, int | float)
        or not budget_usd >= 0
    ):
        raise ValueError(f"budget_usd must be a number of 0 or more, not {budget_usd!r}")


def _config(
    sessions: Sequence[Session],
    workspace: str | os.PathLike[str] | None,
    config_dir: str | os.PathLike[str] | None,
) -> Path | None:
    """The nanobot config the target comes from: ``config_dir``'s, else the first session's."""
    if config_dir is not None:
        return config_file(config_dir)
    root = Path(workspace) if workspace is not None else workspace_of(sessions[0])
    return None if root is None else config_of(root, sessions[0])


def _variants(
    models: str | Sequence[str] | None, edits: Mapping[str, Edit] | None, chosen: Target
) -> tuple[list[str], list[tuple[str | None, Edit]]]:
    """The models asked (as the body names them: Anthropic's API without an ``anthropic/``
    prefix) and the edits (name and edit; unnamed: as stored)."""
    if models is None:
        if chosen.model is None:
            raise ValueError("the nanobot config names no model: pass models=['<model>']")
        models = [chosen.model]
    named = [models] if isinstance(models, str) else list(models)
    if not named or not all(isinstance(m, str) and m for m in named):
        raise ValueError(f"models must be a model name or a list of them, not {models!r}")
    if chosen.wire == "anthropic":
        named = list(dict.fromkeys(model_name(m) for m in named))
    if edits is None:
        return named, [(None, None)]
    if not isinstance(edits, Mapping) or not edits:
        raise TypeError("edits must map names to edits (a text, a function or None)")
    return named, [(str(name), edit) for name, edit in edits.items()]


def _send(
    planned: Sequence[Planned],
    todo: Sequence[int],
    worst: np.ndarray,
    chosen: Target,
    budget: Budget,
    concurrency: int,
    store: AnswerStore,
    progress: bool | None,
) -> Sent:
    """Send the calls ``todo`` names under ``budget``, keeping each answer as it comes."""
    headers = chosen.headers()

    def send(job: Job) -> Answer | Failure:
        result = ask(client, chosen.url, headers, planned[job.at].payload, chosen.wire)
        if isinstance(result, Answer):
            store.put(planned[job.at].digest, result)
        return result

    prices: dict[tuple[str, tuple[int, ...]], float] = {}

    def cost_of(job: Job, answer: Answer) -> float:
        """The answer's price: what a dollar budget settles at (none: not needed), priced
        once per model and usage."""
        if budget.usd is None:
            return float("nan")
        counts = usage_counts(answer)
        key = (planned[job.at].model, tuple(counts))
        if key not in prices:
            found = priced([planned[job.at]], chosen.provider, np.array([counts], dtype=np.int64))
            prices[key] = float(found[0][0])
        return prices[key]

    shown = progress if progress is not None else len(todo) >= TUNING.experiment_progress_calls
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with (
        httpx.Client(limits=limits) as client,
        tqdm(total=len(todo), disable=not shown, desc="experiment", unit="call") as bar,
    ):
        jobs = [Job(at, float(worst[at])) for at in todo]
        return send_all(jobs, send, cost_of, budget, concurrency, lambda: bar.update(1))


def _model_judged(
    out: pd.DataFrame,
    judge: ModelJudge,
    chosen: Target,
    budget: Budget,
    concurrency: int,
    store: AnswerStore,
    progress: bool | None,
    dry_run: bool,
) -> tuple[list[str], list[str]]:
    """Ask ``judge`` about each answered or stored result, after the answers, under the same
    budget, its answers kept like theirs; ``judge_score`` set in place.  Returns the problems
    (no prompt, a failed call, no score in its answer) and notes (results not judged)."""
    asked = judge_target(judge, chosen)
    calls, problems = judge_calls(judge, out, asked)
    worst, unpriced = worst_costs(calls, asked.provider)
    results: dict[int, Answer | Failure] = {}
    for at, call in enumerate(calls):
        kept = store.get(call.digest)
        if kept is not None:
            results[at] = kept
    todo = [at for at in range(len(calls)) if at not in results]
    if todo and not dry_run:
        results.update(
            _send(calls, todo, worst, asked, budget, concurrency, store, progress).results
        )
    scores = out["judge_score"].to_numpy(copy=True)
    for at, call in enumerate(calls):
        result = results.get(at)
        if isinstance(result, Failure):
            problems.append(f"judge call failed on result {call.call}: {result.error}")
        elif isinstance(result, Answer):
            scores[call.call] = score_of(result.text)
            if np.isnan(scores[call.call]):
                shown = (result.text or "")[:80]
                problems.append(f"judge gave no score in [0, 1] on result {call.call}: {shown!r}")
    out["judge_score"] = scores
    missing = sum(1 for at in range(len(calls)) if at not in results)
    why = "a dry run asks no judge" if dry_run else "over budget"
    notes = [f"{missing} result(s) not judged ({why})"] if missing else []
    return [*unpriced, *problems], notes


def _reasons(where: str, reasons: Sequence[str]) -> pd.DataFrame:
    """``reasons`` as a :data:`~sessionkit.schema.PROBLEMS` frame, all found at ``where``."""
    n = len(reasons)
    return frame(PROBLEMS, {"path": [where] * n, "line_no": [None] * n, "reason": list(reasons)})


@entry_point()
def experiment(
    calls: pd.DataFrame,
    source: Session | Corpus,
    *,
    models: str | Sequence[str] | None = None,
    edits: Mapping[str, Edit] | None = None,
    endpoint: str | None = None,
    api_key: str | None = None,
    params: Mapping[str, Any] | None = None,
    budget_calls: int | None = None,
    budget_usd: float | None = None,
    samples: int = 1,
    concurrency: int = 8,
    dry_run: bool = False,
    judge: Judge | None = None,
    workspace: str | os.PathLike[str] | None = None,
    config_dir: str | os.PathLike[str] | None = None,
    nanobot: str | os.PathLike[str] | None = None,
    runtime: Mapping[str, Any] | None = None,
    cache: bool | None = None,
    progress: bool | None = None,
) -> Reported:
    """Ask an endpoint each selected call's exact request again and compare its answers with
    what the session did (the columns of :data:`sessionkit.schema.EXPERIMENTS`).

    Parameters
    ----------
    calls, source
        Rows of a :func:`sessionkit.requests` frame (any settings grid and release) and the
        Corpus or Session it was made from; each row's request is rebuilt by
        :func:`sessionkit.request` for its release and setting.
    models, edits
        The models asked (default: the config's), and edits of the current message by name:
        the new text of the request's last user message, a function from the messages (a
        copy) to the messages sent, or None (as stored); default: as stored.  Each call is
        asked per model, edit and sample.
    endpoint, api_key, params
        An OpenAI-compatible base URL (``.../v1``), its key and request parameters
        (``temperature``, ``max_tokens``, ...); by default what the provider entry of the
        nanobot config (``config_dir``, else the workspace's) names, the key from the config
        (``${VAR}`` read from the environment) or the provider's variable.  A config whose
        provider speaks Anthropic's own API (``anthropic``, ``kimi_coding``,
        ``minimax_anthropic``, as 0.3.5 chooses it) is asked there, at ``<base>/v1/messages``,
        with the Messages API body 0.3.5's provider builds (0.3.5 rows only; ``params``:
        the agent's ``max_tokens``, ``temperature``, ``reasoning_effort``, ``tool_choice``,
        any other added to the body).  The key goes in the ``Authorization`` (or
        ``x-api-key``) header only: never in the frame, a file or an error.
    budget_calls, budget_usd
        Nothing is sent without one: at most this many calls sent (retries, stored answers
        and calls the endpoint refused cost nothing, a model judge's calls count; 0: stored answers only), at most this
        many dollars (each call reserves its worst case, ``worst_cost_usd``, before it goes;
        a model genai-prices cannot price is refused).  Calls go in plan order.
    samples, concurrency, dry_run
        Answers per call; calls in flight at once; True: the plan (calls, tokens, worst-case
        cost, host) and the answers already kept, nothing sent.
    judge
        Scores each answered or stored result (``judge_score``): a function of its results
        row, or a model with a prompt, :class:`sessionkit.ModelJudge` (or a dict of its
        fields): the prompt formatted with the row's columns is asked after all answers, under
        the same budget (each new judge answer is a call) and kept like answers; the score is
        the first number in the judge's answer when in [0, 1], else none (a problem).
    workspace, config_dir, nanobot, runtime
        As :func:`sessionkit.request` takes them.
    cache, progress
        ``cache=False`` (or ``SESSIONKIT_CACHE=off``) keeps answers in this frame only;
        otherwise each is kept in the private cache under a digest of the endpoint, the
        exact body and the sample, and no later run asks it again.  ``progress``: a bar
        (None: from a few calls sent).

    A call that fails (an HTTP error after retries, a timeout, an answer that is not JSON)
    is a row with ``error`` set; Ctrl-C stops sending and returns what came back.  Returns a
    :class:`sessionkit.schema.Reported` frame: ``.problems`` (requests not rebuilt, prices
    unknown, a judge that failed), ``.notes`` and ``.summary`` (counts, host, dollars).
    """
    calls_checked(calls, REQUEST_SETTINGS)
    _checked(samples, concurrency, budget_calls, budget_usd)
    model = model_judge(judge)
    rows = calls.reset_index(drop=True)
    keys = list(dict.fromkeys(str(k) for k in rows["session_key"]))
    sessions = {k: resolve_session(source, k, key_name="session_key") for k in keys}
    config = _config(list(sessions.values()), workspace, config_dir) if sessions else None
    chosen = target(config, endpoint, api_key, params)
    if model is not None:
        judge_target(model, chosen)  # a judge that cannot be asked is refused before any call
    models_asked, variants = _variants(models, edits, chosen)
    rebuild = {
        "workspace": workspace,
        "config_dir": config_dir,
        "nanobot": nanobot,
        "runtime": runtime,
    }
    planner = Planner(rows, sessions, chosen, models_asked, variants, samples, rebuild, cache)
    planned = planner.plan(bodies=not dry_run)
    worst, problems = worst_costs(planned, chosen.provider)
    store = AnswerStore(cache)
    results: dict[int, Answer | Failure] = {}
    for at, item in enumerate(planned):
        kept = store.get(item.digest) if item.digest else None
        if kept is not None:
            results[at] = kept
    stored = set(results)
    todo = [at for at, item in enumerate(planned) if item.digest and at not in stored]
    budget = Budget(budget_calls, None if budget_usd is None else float(budget_usd))
    notes = []
    if not dry_run:
        if budget_calls is None and budget_usd is None:
            raise ValueError(
                "experiment() sends requests only under a budget: pass budget_calls= and/or "
                "budget_usd= (budget_calls=0 takes stored answers only), or dry_run=True for "
                "the plan"
            )
        unpriced = sorted({planned[at].model for at in todo if np.isnan(worst[at])})
        if budget_usd is not None and unpriced:
            raise ValueError(
                f"budget_usd cannot bound calls to {', '.join(map(repr, unpriced))}: "
                "genai-prices has no price for them; pass budget_calls= instead"
            )
        planned = planner.with_payloads(planned, todo)
        sent = _send(planned, todo, worst, chosen, budget, concurrency, store, progress)
        results.update(sent.results)
        if store.why_not is not None:
            notes.append(
                f"answers are kept in this frame only ({store.why_not}): an interrupted run "
                "cannot resume"
            )
        if sent.interrupted:
            notes.append(
                f"interrupted: {len(todo) - len(sent.results)} call(s) not asked; run again "
                "to ask them"
            )
    out, found = results_frame(
        rows,
        planned,
        results,
        stored,
        worst,
        chosen.host,
        chosen.provider,
        sessions,
        None if model is not None else cast(Scorer | None, judge),
        dry_run,
    )
    if model is not None:
        judged = _model_judged(out, model, chosen, budget, concurrency, store, progress, dry_run)
        found += judged[0]
        notes += judged[1]
    counts = out["outcome"].value_counts()
    summary = {
        "host": chosen.host,
        **{name: int(counts[name]) for name in OUTCOMES},
        "worst_cost_usd": float(np.nansum(worst[todo])) if dry_run else None,
        "spent_usd": float(np.nansum(out["cost_usd"][out["outcome"] == "answered"])),
        "persisted": store.folder is not None,
    }
    problems = [*problems, *found, *dict.fromkeys(p.error for p in planned if p.error)]
    return Reported.of(
        out, _reasons("experiment", problems), summary, notes=_reasons("experiment", notes)
    )
