"""Regenerate the bundled sample store ``data/sessions`` and ``data/damaged`` from a fixed seed.

Never edit those files by hand: change ``sessionkit.synthetic`` and rerun this script
(``tests/test_synthetic.py`` checks that the committed data equals a fresh generation).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sessionkit.synthetic import SAMPLE_SEED, write_sample_data

DATA = Path(__file__).resolve().parent.parent / "data"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, write the sample, print one line per file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA, help="data folder (default: data/)")
    parser.add_argument("--seed", type=int, default=SAMPLE_SEED, help="generation seed")
    args = parser.parse_args(argv)
    for path in write_sample_data(args.out, seed=args.seed):
        print(f"{path.stat().st_size:>9,}  {path.relative_to(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
