"""The generated corpus both benchmarks measure: made once, kept in ``benchmarks/.corpus/``."""

from __future__ import annotations

import argparse
from pathlib import Path

CORPORA = Path(__file__).resolve().parent / ".corpus"


def corpus_folder(n_sessions: int, n_messages: int, seed: int) -> Path:
    """The sessions folder of the corpus generated with these settings."""
    return CORPORA / f"corpus-{n_sessions}-{n_messages}-{seed}" / "sessions"


def ensure_corpus(folder: Path, n_sessions: int, n_messages: int, seed: int) -> None:
    """Generate the sessions folder once (deterministic for a seed); later runs reuse it."""
    if folder.is_dir() and any(folder.glob("*.jsonl")):
        return
    from sessionkit.synthetic import generate_corpus

    print(f"generating {n_sessions:,} sessions / {n_messages:,} messages in {folder} ...")
    stats = generate_corpus(folder, n_sessions=n_sessions, target_messages=n_messages, seed=seed)
    print(f"  {stats.n_messages:,} messages, {stats.n_bytes / 1e6:.0f} MB", flush=True)


def add_corpus_options(parser: argparse.ArgumentParser) -> None:
    """The options both benchmarks take to pick (or generate) their corpus."""
    parser.add_argument("--corpus", type=Path, help="sessions folder (generated if missing)")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--seed", type=int, default=0)


def chosen_corpus(args: argparse.Namespace) -> Path:
    """The sessions folder the parsed options name: ``--corpus``, else the generated one."""
    return (args.corpus or corpus_folder(args.sessions, args.messages, args.seed)).resolve()
