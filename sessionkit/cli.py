"""The ``sessionkit`` command: headless summaries of a session store.

Every command exits with the same statuses (:data:`EXIT_STATUS`): 0 healthy, 1 problems found,
2 a usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import sessionkit
from sessionkit.nanobot.reader import SessionPathError
from sessionkit.store.corpus import Corpus, DuplicateKeyWarning
from sessionkit.store.loading import load
from sessionkit.store.sources import check_source
from sessionkit.store.text import encodable, shown

__all__ = ["EXIT_STATUS", "main", "summary_table"]

OK, PROBLEMS, USAGE, INTERRUPTED = 0, 1, 2, 130
EXIT_STATUS = """\
exit status (the same for every command):
  0  healthy: the command ran and found no problem
  1  problems found: damaged lines or files recorded (summary, problems), a file nanobot
     would lose data from or something left to mend (doctor), no session loaded (summary),
     or the tour failed on the store (report; a written report exits 0, problems and all),
     or a write failed (doctor --fix: one line, e.g. disk full; the file is left unchanged),
     or the release failed to answer (request), or a recorded usage problem (usage),
     or an install failed (releases install), or a call failed (experiment)
  2  usage error: bad arguments, or a path that is not a session store (missing, empty,
     not a workspace, sessions folder, .jsonl/.json session file or glob), or a request
     that cannot be made (no such key, turn or step; no release installed), or an
     experiment without --budget-calls, --budget-usd or --dry-run
  130 interrupted (Ctrl-C): stopped at once, nothing partial kept in the cache
"""

_SUMMARY_COLUMNS = [
    "key",
    "format",
    "n_messages",
    "n_user_turns",
    "last_consolidated",
    "tokens",
    "first_message_at",
    "last_message_at",
    "title",
]
_PLAN_COLUMNS = ["setting", "calls", "tokens_per_call", "worst_cost_usd"]
_AGREEMENT_COLUMNS = [
    "setting",
    "calls",
    "answered",
    "compared",
    "agreed",
    "agreement_rate",
    "tokens_per_call",
    "prompt_tokens",
    "cost_usd",
]
_PATHS_HELP = "workspace, sessions folder, file or glob (default: bundled data)"
_RECURSIVE_HELP = "load every workspace and sessions folder below each folder given"
_CONFIG_DIR_HELP = (
    "the config file a nanobot 0.3.5 runs with (--config), or its folder (default "
    "~/.nanobot): where a 0.3.5 workspace's sessions are, <config dir>/sessions/<workspace id>/"
)


def _config_dir_args(args: argparse.Namespace) -> list[str]:
    """``--config-dir X`` when it was given, to repeat in a suggested command."""
    return ["--config-dir", args.config_dir] if args.config_dir else []


def summary_table(corpus: Corpus) -> pd.DataFrame:
    """One summary row per session, in load order."""
    table = corpus.sessions[_SUMMARY_COLUMNS].reset_index(drop=True)
    for column in ("key", "title"):  # text that cannot be encoded is shown escaped
        if not table[column].map(_encodable, na_action="ignore").all():
            table[column] = table[column].map(shown, na_action="ignore")
    return table.astype({"format": "string[python]"})


def _encodable(value: object) -> bool:
    return not isinstance(value, str) or encodable(value)


def _with_total(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` and a ``TOTAL`` row, for reading (no sum of ``last_consolidated`` offsets)."""
    total = {
        "key": "TOTAL",
        "format": "",
        "n_messages": table["n_messages"].sum(),
        "n_user_turns": table["n_user_turns"].sum(),
        "last_consolidated": "",
        "tokens": table["tokens"].sum(min_count=1),
        "first_message_at": table["first_message_at"].min(),
        "last_message_at": table["last_message_at"].max(),
        "title": "",
    }
    rows = table.astype({"last_consolidated": "string[python]"})
    return pd.concat([rows, pd.DataFrame([total])], ignore_index=True)


def _write(table: pd.DataFrame, fmt: str) -> None:
    """``table`` on stdout as CSV, JSON records (times to the microsecond) or aligned text.

    Text is aligned by display width (wide CJK characters count two columns); a text column
    is made one wider than its header, so its header stands two spaces clear as numbers' do.
    """
    if fmt == "csv":
        table.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        records = json.loads(table.to_json(orient="records", date_format="iso", date_unit="us"))
        sys.stdout.write(json.dumps(records, indent=2, ensure_ascii=False) + "\n")
    else:
        options = ("display.max_rows", None, "display.width", 200)
        with pd.option_context(*options, "display.unicode.east_asian_width", True):
            room = {c: len(c) + 1 for c in table.columns if table[c].dtype == "string"}
            print(table.to_string(index=False, na_rep="-", col_space=room))


def _load(args: argparse.Namespace, tokens: str | None) -> Corpus:
    """The corpus a command's paths name, its notes told on stderr (they leave the exit status
    alone); duplicate keys are told by its problems line, not by a warning per file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DuplicateKeyWarning)
        corpus = load(
            args.path or None,
            tokens=tokens,  # type: ignore[arg-type]  # argparse's choices
            config_dir=args.config_dir,
            recursive=args.recursive,
        )
    for row in corpus.notes.itertuples(index=False):
        print(f"note: {shown(f'{row.path}: {row.reason}')}", file=sys.stderr)
    return corpus


def _summary(args: argparse.Namespace) -> int:
    corpus = _load(args, args.tokens)
    shown = shlex.join(args.path) or "the bundled data"
    n_problems = len(corpus.problems)
    recursive = ["--recursive"] if args.recursive else []
    hint = shlex.join(["sessionkit", "problems", *args.path, *recursive, *_config_dir_args(args)])
    if not len(corpus):
        print(
            f"sessionkit: error: no session could be loaded from {shown} "
            f"({n_problems} problem(s); see `{hint}`)",
            file=sys.stderr,
        )
        return PROBLEMS
    table = summary_table(corpus)
    _write(_with_total(table) if args.format == "table" else table, args.format)
    if n_problems:
        print(f"{n_problems} problem(s) found; see `{hint}`", file=sys.stderr)
        return PROBLEMS
    return OK


def _problems(args: argparse.Namespace) -> int:
    corpus = _load(args, None)
    if args.format == "table" and corpus.problems.empty:
        print("no problems found")
    else:
        _write(corpus.problems, args.format)
    return PROBLEMS if len(corpus.problems) else OK


def _report(args: argparse.Namespace) -> int:
    from sessionkit.views.report import ReportError, write_report

    if args.path is not None:
        check_source(args.path)
    try:
        out = write_report(
            args.path,
            args.output,
            timeout=args.timeout,
            show_code=not args.no_code,
            config_dir=args.config_dir,
            overwrite=args.overwrite,
            create=args.create,
        )
    except ReportError as exc:
        print(f"sessionkit: report failed: {exc}", file=sys.stderr)
        return PROBLEMS
    except SessionPathError:
        raise
    except (FileExistsError, FileNotFoundError) as exc:  # --output names no new file
        print(f"sessionkit: error: {exc.strerror}", file=sys.stderr)
        return USAGE
    print(f"wrote {out}")
    return OK


def _doctor_text(table: pd.DataFrame, fixed: bool) -> None:
    """One block per file: what the release that wrote it loses, what sessionkit keeps, the fix."""
    from sessionkit.writers.checkup import loser

    if table.empty:
        print("nothing to fix")
        return
    for row in table.itertuples(index=False):
        print(f"{row.file}  ({row.kind})")
        if row.nanobot_loses:
            overwrite = "; its next save overwrites the file" if row.next_save_overwrites else ""
            print(f"  {loser(row.policy)} loses: {row.nanobot_loses}{overwrite}")
        if not pd.isna(row.sessionkit_keeps):
            print(f"  sessionkit keeps:    {row.sessionkit_keeps} messages")
        if row.problems:
            print(f"  problems:            {row.problems}")
        if row.fix:
            print(f"  {'fixed:' if fixed else '--fix:'}{' ' * 15}{row.fix}")
    if not fixed:
        losing = int(table["next_save_overwrites"].sum())
        mends = int(table["fix"].str.startswith(("rewrite", "move")).sum())
        unknown = int(table["nanobot_loses"].str.startswith("not known").sum())
        later = f"; {unknown} written by a later release (loss not known)" if unknown else ""
        print(
            f"{len(table)} file(s); nanobot 0.2.2 would lose something from {losing}{later}; "
            f"`--fix` mends {mends}"
        )


def _doctor(args: argparse.Namespace) -> int:
    """Exits as the store is left: 1 while anything in it is wrong (after ``--fix``: what
    the fix cannot mend, such as a value nanobot resets)."""
    from sessionkit.writers.checkup import doctor, fix, has_problems

    if (args.backup_dir or args.create) and not args.fix:
        print(
            "sessionkit: error: --backup-dir and --create are only used with --fix", file=sys.stderr
        )
        return USAGE
    try:
        table = (
            fix(args.path, args.backup_dir, config_dir=args.config_dir, create=args.create)
            if args.fix
            else doctor(args.path, config_dir=args.config_dir)
        )
    except ValueError as exc:
        print(f"sessionkit: error: {exc}", file=sys.stderr)
        return USAGE
    except SessionPathError:
        raise
    except OSError as exc:  # a failed write (disk full, ...): the file is left as it was
        print(f"sessionkit: error: {exc.strerror or exc}", file=sys.stderr)
        return PROBLEMS
    if args.format == "table":
        _doctor_text(table, args.fix)
    else:
        _write(table, args.format)
    after = doctor(args.path, config_dir=args.config_dir) if args.fix else table
    return PROBLEMS if has_problems(after) else OK


def _cache(args: argparse.Namespace) -> int:
    """``cache info``: the cache folder, its size, the index's bytes and files per kind, the
    installed releases; ``cache clear``: remove sessionkit's own files there (index, token
    counts, kits, experiment plans; answers with ``--answers``), nothing else."""
    from sessionkit.calls.installs import installed, releases_dir
    from sessionkit.store.cachedir import (
        cache_contents,
        clear_cache_dir,
        default_cache_dir,
        folder_size,
    )

    root = (Path(args.cache_dir) if args.cache_dir else default_cache_dir()).expanduser()
    if root.exists() and not root.is_dir():
        print(f"sessionkit: error: {root} is not a folder", file=sys.stderr)
        return USAGE
    if args.action == "clear":
        files, size = clear_cache_dir(root, answers=args.answers)
        print(f"removed {files} file(s), {size:,} bytes, from {root}")
        kept = cache_contents(root).get("answers")
        if kept:
            print(f"kept {kept[0]} model answer(s), {kept[1]:,} bytes (--answers removes them)")
        return OK
    contents = cache_contents(root)
    files = sum(n for n, _ in contents.values())
    size = sum(b for _, b in contents.values())
    print(f"folder: {root}{'' if root.is_dir() else ' (not created yet)'}")
    print(f"size:   {size:,} bytes in {files} file(s)")
    index = [contents.get(kind, (0, 0)) for kind in ("entries", "replays", "derived")]
    print(
        f"index:  {sum(b for _, b in index):,} bytes in {sum(n for n, _ in index)} file(s) "
        "(entries, replays, derived window stacks)"
    )
    for kind, (n, b) in sorted(contents.items()):
        print(f"  {kind:<9}{n:>7} file(s) {b:>15,} bytes")
    installs = releases_dir()
    versions = ", ".join(installed()) or "none"
    n, b = folder_size(installs)
    print(
        f"releases: {installs} ({versions}; {b:,} bytes in {n} file(s); `cache clear` leaves "
        "them, `sessionkit releases remove VERSION` removes one)"
    )
    forks = root / "forks"
    if forks.is_dir():
        print(f"forks:  {forks} ({folder_size(forks)[0]} file(s); `cache clear` leaves them)")
    return OK


def _releases(args: argparse.Namespace) -> int:
    """``releases install [VERSION...]``: install nanobot releases into the user's cache (from
    the package index; ``--missing``: only those sessionkit does not find already);
    ``releases list [VERSION...]``: the releases sessionkit finds, and where;
    ``releases remove VERSION...``: remove venvs ``install`` made."""
    from sessionkit.calls.installs import (
        ReleaseNotInstalled,
        find_release,
        install,
        installed,
        releases_dir,
        remove,
    )
    from sessionkit.nanobot.policies import POLICIES

    known = [p.version for p in POLICIES.values()]
    wanted = args.version or known
    unknown = [v for v in wanted if v not in known]
    if unknown:
        listed = shown(", ".join(unknown))
        print(
            f"sessionkit: error: unknown release {listed} (known: {', '.join(known)})",
            file=sys.stderr,
        )
        return USAGE
    if args.missing and args.action != "install":
        print("sessionkit: error: --missing is only used with install", file=sys.stderr)
        return USAGE
    if args.action == "remove":
        if not args.version:
            print("sessionkit: error: name the release(s) to remove, e.g. 0.3.5", file=sys.stderr)
            return USAGE
        for version in wanted:
            try:
                print(f"nanobot-ai {version}: removed {remove(version)}")
            except ReleaseNotInstalled as exc:
                print(f"sessionkit: error: {exc}", file=sys.stderr)
                return PROBLEMS
            except OSError as exc:
                print(f"sessionkit: error: nanobot-ai {version}: {exc}", file=sys.stderr)
                return PROBLEMS
        return OK
    if args.action == "install":
        for version in wanted:
            if args.missing:
                try:
                    print(f"nanobot-ai {version}: {find_release(version)} (already there)")
                    continue
                except ReleaseNotInstalled:
                    pass
            try:
                print(f"nanobot-ai {version}: {install(version)}")
            except (RuntimeError, OSError) as exc:
                print(f"sessionkit: error: {exc}", file=sys.stderr)
                return PROBLEMS
        return OK
    ours = installed()
    for version in wanted:
        try:
            python = find_release(version)
        except ReleaseNotInstalled:
            print(
                f"nanobot-ai {version}: not installed (`sessionkit releases install {version}` "
                f"puts it in {releases_dir() / version})"
            )
            continue
        if python == Path(sys.executable):
            where = "this environment"
        elif ours.get(version) == python:
            where = "installed by sessionkit"
        else:
            where = "the nanobot command on PATH"
        print(f"nanobot-ai {version}: {python} ({where})")
    return OK


def _request(args: argparse.Namespace) -> int:
    """``request PATH KEY TURN``: the exact request a release sent for one call, as a table of
    its parts and their tokens, or (``--format json``) the request itself."""
    import difflib

    from sessionkit.calls.assembly import request, workspace_of
    from sessionkit.calls.installs import ReleaseNotInstalled
    from sessionkit.calls.kits import KitError
    from sessionkit.nanobot.policies import get_policy

    corpus = load(args.path, tokens=None, config_dir=args.config_dir)
    if args.key not in corpus:
        close = difflib.get_close_matches(args.key, corpus.keys(), n=1)
        guess = f"did you mean {close[0]}? " if close else ""
        hint = shlex.join(["sessionkit", "summary", args.path, *_config_dir_args(args)])
        message = (
            f"no session with key {args.key} in {args.path} ({guess}{len(corpus)} session(s); "
            f"their keys: `{hint}`)"
        )
        print(f"sessionkit: error: {shown(message)}", file=sys.stderr)
        return USAGE
    session = corpus[args.key]
    if args.workspace is None and workspace_of(session) is None:
        print(
            f"sessionkit: error: {shown(session.path)} is not in a nanobot workspace's sessions "
            "folder: pass --workspace <the workspace whose files the prompt reads>",
            file=sys.stderr,
        )
        return USAGE
    if args.config is not None:
        print(
            "sessionkit: note: --config is deprecated; pass --config-dir (the config file "
            "nanobot ran with, or its folder)",
            file=sys.stderr,
        )
    try:
        built = request(
            session,
            turn=args.turn,
            step=args.step,
            workspace=args.workspace,
            config_dir=args.config if args.config is not None else args.config_dir,
            nanobot=args.nanobot,
        )
    except (IndexError, ValueError, ReleaseNotInstalled) as exc:
        # The library's hint names its keyword; here the option says the same.
        message = str(exc).replace("pass nanobot=", "pass --nanobot ")
        print(f"sessionkit: error: {shown(message)}", file=sys.stderr)
        return USAGE
    except KitError as exc:
        print(f"sessionkit: error: {shown(str(exc))}", file=sys.stderr)
        return PROBLEMS
    for note in built.notes:
        print(f"sessionkit: note: {shown(note)}", file=sys.stderr)
    if args.format == "json":
        print(shown(built.to_json()))  # a lone surrogate as its JSON escape, \ud800
        return OK
    label = get_policy(built.release).label
    print(shown(f"{label} request for {built.session_key}, turn {built.turn}, step {built.step}"))
    print(
        f"{len(built.messages)} messages, {len(built.tools)} tools, {built.tokens:,} tokens "
        "(the release's estimate; parts counted alone need not add up to it)"
    )
    _write(built.parts.assign(part=built.parts["part"].map(shown)), "table")
    return OK


def _usage(args: argparse.Namespace) -> int:
    """``usage PATH``: LLM calls nanobot recorded, totals by session, day or model."""
    from zoneinfo import ZoneInfo

    from sessionkit.accounting.ledger import usage
    from sessionkit.accounting.report import usage_table, with_total

    zone = ZoneInfo(args.tz) if args.tz else None
    calls = usage(args.path, config_dir=args.config_dir, tz=zone, model=args.model, estimate=False)
    table = usage_table(calls, args.by, zone)
    _write(with_total(table) if args.format == "table" else table, args.format)
    summary, problems = calls.summary, calls.problems
    print(
        f"{summary['calls']} logged call(s): {summary['exact']} tied exactly, {summary['time']} "
        f"by time, {summary['unattributed']} unattributed ({summary['ambiguous']} ambiguous); "
        f"{summary['daily_rows']} daily total(s); session times read as {summary['tz']}",
        file=sys.stderr,
    )
    for row in calls.notes.itertuples(index=False):
        print(f"note: {row.path}: {row.reason}", file=sys.stderr)
    for row in problems.itertuples(index=False):
        print(f"problem: {row.path}: {row.reason}", file=sys.stderr)
    return PROBLEMS if len(problems) else OK


def _values(text: str, option: str) -> list[int | None]:
    """A comma-separated list of counts: ``none`` is no limit (0), ``default`` the release's."""
    out: list[int | None] = []
    for part in text.split(","):
        word = part.strip().lower()
        if word in ("none", "default"):
            out.append(0 if word == "none" else None)
        elif word.isdigit():
            out.append(int(word))
        else:
            raise ValueError(
                f"{option} takes counts separated by commas (none: no limit, default: the "
                f"release's), e.g. 20,120; not {text!r}"
            )
    return out


def _turns(text: str) -> list[int]:
    """Zero-based user turns: ``0-3,7`` is 0, 1, 2, 3 and 7."""
    chosen: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"--turns takes turns and ranges such as 0-3,7; not {text!r}")
        chosen.update(range(int(first), int(last or first) + 1))
    return sorted(chosen)


def _experiment_calls(args: argparse.Namespace, corpus: Corpus) -> pd.DataFrame:
    """The rows of a requests frame the options select: the session, the settings grid, the
    turns."""
    from sessionkit.calls.frame import requests

    grid: dict[str, list[object]] = {}
    if args.policy:
        grid["policy"] = [p.strip() for p in args.policy.split(",")]
    for option, name in (("--max-messages", "max_messages"), ("--max-tokens", "max_tokens")):
        if getattr(args, name) is not None:
            grid[name] = list(_values(getattr(args, name), option))
    turns = _turns(args.turns) if args.turns is not None else None
    if args.key is not None and args.key not in corpus:
        raise ValueError(f"no session with key {args.key} in {args.path}")
    calls = requests(
        corpus,
        args.key,
        grid=grid or None,
        workspace=args.workspace,
        config_dir=args.config_dir,
        nanobot=args.nanobot,
    )
    return calls if turns is None else calls[calls["turn"].isin(turns)]


def _experiment(args: argparse.Namespace) -> int:
    """``experiment PATH``: the selected calls asked again per setting under a budget, and how
    often each setting's answers take the session's action (``--dry-run``: the plan)."""
    import os

    from sessionkit.calls.installs import ReleaseNotInstalled
    from sessionkit.experiments.agreement import agreement_by_setting
    from sessionkit.experiments.experiment import experiment

    if not args.dry_run and args.budget_calls is None and args.budget_usd is None:
        print(
            "sessionkit: error: experiment sends requests only under a budget: pass "
            "--budget-calls N and/or --budget-usd X, or --dry-run for the plan",
            file=sys.stderr,
        )
        return USAGE
    if args.api_key_env is not None and args.api_key_env not in os.environ:
        print(
            f"sessionkit: error: --api-key-env names {shown(args.api_key_env)}, which is not "
            "set in the environment",
            file=sys.stderr,
        )
        return USAGE
    corpus = load(args.path, tokens=None, config_dir=args.config_dir)
    try:
        out = experiment(
            _experiment_calls(args, corpus),
            corpus,
            models=args.models.split(",") if args.models else None,
            endpoint=args.endpoint,
            api_key=os.environ[args.api_key_env] if args.api_key_env else None,
            budget_calls=args.budget_calls,
            budget_usd=args.budget_usd,
            samples=args.samples,
            concurrency=args.concurrency,
            dry_run=args.dry_run,
            workspace=args.workspace,
            config_dir=args.config_dir,
            nanobot=args.nanobot,
            cache=False if args.no_cache else None,
        )
    except (IndexError, ValueError, ReleaseNotInstalled) as exc:
        print(f"sessionkit: error: {shown(str(exc))}", file=sys.stderr)
        return USAGE
    table = agreement_by_setting(out)
    summary = out.summary
    if args.dry_run:
        _write(table[_PLAN_COLUMNS], args.format)
        print(
            f"plan: {summary['planned']} call(s), "
            f"{int(out['estimated_prompt_tokens'].sum()):,} prompt tokens (estimated), worst "
            f"case ${summary['worst_cost_usd']:.4f}, to {shown(summary['host'])}; "
            f"{summary['stored']} answer(s) already kept; nothing sent",
            file=sys.stderr,
        )
    else:
        _write(table[_AGREEMENT_COLUMNS], args.format)
        print(
            f"{summary['answered']} answered, {summary['stored']} stored, {summary['failed']} "
            f"failed, {summary['over budget']} over budget; spent ${summary['spent_usd']:.4f} "
            f"at {shown(summary['host'])}",
            file=sys.stderr,
        )
    for kind, rows in (("note", out.notes), ("problem", out.problems)):
        for row in rows.itertuples(index=False):
            print(f"{kind}: {shown(row.reason)}", file=sys.stderr)
    return PROBLEMS if len(out.problems) or summary["failed"] else OK


# Each command's help names the statuses in one line; `sessionkit --help` says when each is given.
_EXIT_STATUS_SHORT = (
    "exit status: 0 healthy, 1 problems found, 2 usage error, 130 interrupted "
    "(when each is given: sessionkit --help)"
)
_FORMAT_HELP = "how to print the result: an aligned table (default), csv or json"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sessionkit",
        description="Analyse nanobot conversation histories.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {sessionkit.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add = functools.partial(
        commands.add_parser,
        epilog=_EXIT_STATUS_SHORT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    summary = add("summary", help="per-session table and totals")
    summary.add_argument("path", nargs="*", help=_PATHS_HELP)
    summary.add_argument("--recursive", action="store_true", help=_RECURSIVE_HELP)
    summary.add_argument(
        "--format", choices=["table", "csv", "json"], default="table", help=_FORMAT_HELP
    )
    summary.add_argument(
        "--tokens",
        choices=["tiktoken", "fallback"],
        default="tiktoken",
        help="exact cl100k count (default) or nanobot's chars//4 fallback",
    )
    summary.add_argument("--config-dir", help=_CONFIG_DIR_HELP)
    summary.set_defaults(run=_summary)
    problems = add("problems", help="damaged lines and files: path, line, reason")
    problems.add_argument("path", nargs="*", help=_PATHS_HELP)
    problems.add_argument("--recursive", action="store_true", help=_RECURSIVE_HELP)
    problems.add_argument(
        "--format", choices=["table", "csv", "json"], default="table", help=_FORMAT_HELP
    )
    problems.add_argument("--config-dir", help=_CONFIG_DIR_HELP)
    problems.set_defaults(run=_problems)
    doctor = add("doctor", help="what nanobot would lose from a store, and --fix to mend it")
    doctor.add_argument("path", help="workspace, sessions folder or file")
    doctor.add_argument(
        "--fix",
        action="store_true",
        help="rewrite files nanobot would damage and move leftover temp files to the backup",
    )
    doctor.add_argument(
        "--backup-dir",
        help="where --fix puts originals, damaged lines and temp files "
        "(default: sessionkit-doctor-backup-<time> next to the sessions folder)",
    )
    doctor.add_argument(
        "--create", action="store_true", help="make the missing folders above --backup-dir"
    )
    doctor.add_argument(
        "--format", choices=["table", "csv", "json"], default="table", help=_FORMAT_HELP
    )
    doctor.add_argument("--config-dir", help=_CONFIG_DIR_HELP)
    doctor.set_defaults(run=_doctor)
    report = add("report", help="run the tour notebook headless and write one HTML report")
    report.add_argument("path", nargs="?", help=_PATHS_HELP)
    report.add_argument(
        "-o", "--output", default="report.html", help="HTML file to write (a new file)"
    )
    report.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    report.add_argument("--create", action="store_true", help="make --output's missing folders")
    report.add_argument("--no-code", action="store_true", help="leave code cells out")
    report.add_argument("--timeout", type=int, default=600, help="seconds any one cell may run")
    report.add_argument("--config-dir", help=_CONFIG_DIR_HELP)
    report.set_defaults(run=_report)
    releases = add("releases", help="install nanobot releases sessionkit asks for prompts")
    releases.add_argument("action", choices=["install", "list", "remove"])
    releases.add_argument("version", nargs="*", help="e.g. 0.3.5 (default: every release)")
    releases.add_argument(
        "--missing",
        action="store_true",
        help="install only releases sessionkit does not find already (this environment, PATH)",
    )
    releases.set_defaults(run=_releases)
    req = add("request", help="the exact request one LLM call carried (needs the release)")
    req.add_argument("path", help="workspace, sessions folder or file")
    req.add_argument("key", help="session key")
    req.add_argument("turn", type=int, help="zero-based user turn")
    req.add_argument("--step", type=int, default=0, help="zero-based call within the turn")
    req.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="how to print the request: readable text (default) or its JSON body",
    )
    req.add_argument("--workspace", help="workspace whose files the prompt reads")
    req.add_argument(
        "--config", help="deprecated spelling of --config-dir (the config.json nanobot ran with)"
    )
    req.add_argument("--nanobot", help="python or venv of the installed release")
    req.add_argument("--config-dir", help=_CONFIG_DIR_HELP)
    req.set_defaults(run=_request)
    use = add("usage", help="LLM calls nanobot recorded: tokens, cache share, cost, unattributed")
    use.add_argument("path", help="nanobot data dir (holding llm_usage.sqlite3) or workspace")
    use.add_argument("--by", choices=["session", "day", "model"], default="session")
    use.add_argument(
        "--format", choices=["table", "csv", "json"], default="table", help=_FORMAT_HELP
    )
    use.add_argument("--tz", help="IANA zone nanobot ran in (default: this machine's)")
    use.add_argument("--model", help="model to price 0.2.2/0.3.0 daily totals with")
    use.add_argument("--config-dir", help="data dir of a workspace PATH (default ~/.nanobot)")
    use.set_defaults(run=_usage)
    exp = add(
        "experiment",
        help="ask the calls again per setting (under a budget): how often answers agree",
        description="Ask an OpenAI-compatible endpoint each selected call's exact request "
        "again under each setting, and print per setting how often the answers take the "
        "session's action beside the tokens and dollars per call. Nothing is sent without "
        "--budget-calls or --budget-usd; --dry-run prints the plan. The API key comes from "
        "the nanobot config or --api-key-env and is never printed or written.",
    )
    exp.add_argument("path", help="workspace, sessions folder or file")
    exp.add_argument("--key", help="session key (default: every session)")
    exp.add_argument("--turns", help="zero-based user turns, e.g. 0-3,7 (default: all)")
    exp.add_argument("--policy", help="releases, comma-separated (default: each session's)")
    exp.add_argument(
        "--max-messages",
        help="max_messages values, comma-separated, e.g. 20,120 (none: no limit, default: "
        "the release's)",
    )
    exp.add_argument("--max-tokens", help="max_tokens values, as --max-messages")
    exp.add_argument("--models", help="models asked, comma-separated (default: the config's)")
    exp.add_argument("--samples", type=int, default=1, help="answers per call (default 1)")
    exp.add_argument("--concurrency", type=int, default=8, help="calls in flight (default 8)")
    exp.add_argument(
        "--endpoint", help="OpenAI-compatible base URL (default: the nanobot config's)"
    )
    exp.add_argument(
        "--api-key-env", help="environment variable holding the key (default: the config's)"
    )
    exp.add_argument(
        "--dry-run", action="store_true", help="print the plan (calls, tokens, cost, host)"
    )
    exp.add_argument("--budget-calls", type=int, help="send at most this many calls")
    exp.add_argument("--budget-usd", type=float, help="spend at most this many dollars")
    exp.add_argument(
        "--no-cache", action="store_true", help="keep no answer in the cache (ask again next run)"
    )
    exp.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="how to print agreement per setting (--dry-run: the plan per setting): an "
        "aligned table (default), csv or json",
    )
    exp.add_argument("--workspace", help="workspace whose files the prompt reads")
    exp.add_argument("--nanobot", help="python or venv of the installed release")
    exp.add_argument("--config-dir", help=_CONFIG_DIR_HELP)
    exp.set_defaults(run=_experiment)
    cache = add(
        "cache", help="the cache folder: `cache info` (size, index bytes, files) or `cache clear`"
    )
    cache.add_argument("action", choices=["info", "clear"])
    cache.add_argument(
        "--cache-dir", help="the cache folder (default: $SESSIONKIT_CACHE_DIR or the user's)"
    )
    cache.add_argument(
        "--answers",
        action="store_true",
        help="with clear: also remove the models' answers to experiments (paid to ask again)",
    )
    cache.set_defaults(run=_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see :data:`EXIT_STATUS`)."""
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except SessionPathError as exc:
        print(f"sessionkit: error: {exc}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:
        return OK
    except KeyboardInterrupt:
        print("sessionkit: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
