"""The generated corpus both benchmarks measure: made once, kept in ``benchmarks/.corpus/``."""

from __future__ import annotations

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
