"""The ``sessionkit`` command: headless summaries of a session store."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from sessionkit.corpus import Corpus, load
from sessionkit.nanobot.reader import SessionPathError

__all__ = ["main", "summary_table"]

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


def summary_table(corpus: Corpus) -> pd.DataFrame:
    """Per-session summary rows followed by one ``TOTAL`` row."""
    table = corpus.sessions[_SUMMARY_COLUMNS].copy()
    totals = {
        "key": "TOTAL",
        "n_messages": table["n_messages"].sum(),
        "n_user_turns": table["n_user_turns"].sum(),
        "last_consolidated": table["last_consolidated"].sum(),
        "tokens": table["tokens"].sum(min_count=1),
        "first_message_at": table["first_message_at"].min(),
        "last_message_at": table["last_message_at"].max(),
    }
    table["format"] = table["format"].astype("string")
    return pd.concat([table, pd.DataFrame([totals])], ignore_index=True)


def _summary(args: argparse.Namespace) -> int:
    corpus = load(args.path or None, tokens=args.tokens)
    table = summary_table(corpus)
    if args.format == "csv":
        table.to_csv(sys.stdout, index=False)
    elif args.format == "json":
        sys.stdout.write(table.to_json(orient="records", date_format="iso", indent=2) + "\n")
    else:
        with pd.option_context("display.max_rows", None, "display.width", 200):
            print(table.to_string(index=False, na_rep="-"))
    n_problems = len(corpus.problems)
    if n_problems:
        print(f"{n_problems} problem(s) found; see Corpus.problems", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    from sessionkit.report import ReportError, write_report

    try:
        out = write_report(args.path, args.output, timeout=args.timeout, show_code=not args.no_code)
    except ReportError as exc:
        print(f"sessionkit: report failed: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sessionkit", description="Analyse nanobot conversation histories."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    summary = commands.add_parser("summary", help="per-session table and totals")
    summary.add_argument(
        "path", nargs="*", help="workspace, sessions folder, file or glob (default: bundled data)"
    )
    summary.add_argument("--format", choices=["table", "csv", "json"], default="table")
    summary.add_argument(
        "--tokens",
        choices=["tiktoken", "fallback"],
        default="tiktoken",
        help="exact cl100k count (default) or nanobot's chars//4 fallback",
    )
    summary.set_defaults(run=_summary)
    report = commands.add_parser(
        "report", help="run the tour notebook headless and write one HTML report"
    )
    report.add_argument(
        "path", nargs="?", help="workspace, sessions folder, file or glob (default: bundled data)"
    )
    report.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    report.add_argument("--no-code", action="store_true", help="leave code cells out")
    report.add_argument("--timeout", type=int, default=600, help="seconds any one cell may run")
    report.set_defaults(run=_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a bad path)."""
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except SessionPathError as exc:
        print(f"sessionkit: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
