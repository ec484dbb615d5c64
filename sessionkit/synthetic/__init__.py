"""Deterministic synthetic nanobot 0.2.2 sessions, so tests and benchmarks never need real chats.

Everything is driven by a seeded :class:`random.Random` passed in by the caller (no global
random state, no wall clock), so one seed always gives the same bytes.  Files are written
exactly as nanobot 0.2.2's ``SessionManager.save`` writes them: one
``json.dumps(record, ensure_ascii=False)`` line per record, metadata first.

``vocabulary`` holds the text banks, ``sessions`` one generated session, ``stores`` stores
written to disk, ``sample`` the bundled sample store.
"""

from sessionkit.synthetic.sample import SAMPLE_SEED, write_sample_data
from sessionkit.synthetic.sessions import FeatureMix, generate_session
from sessionkit.synthetic.stores import CorpusStats, generate_corpus, to_jsonl, write_store

__all__ = [
    "SAMPLE_SEED",
    "CorpusStats",
    "FeatureMix",
    "generate_corpus",
    "generate_session",
    "to_jsonl",
    "write_sample_data",
    "write_store",
]
