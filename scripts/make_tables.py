"""Rebuild the papers' tables from run records: ``python scripts/make_tables.py --results-dir results``.

Loops over the artifact registry (lipgnn/results/artifacts/): reads ``<results-dir>/runs/<experiment>/*.json``
only (no training, no GPU, no network) and writes ``<out-dir>/<artifact>.{md,tex,csv}`` (default out-dir:
``<results-dir>/tables``).
"""

from __future__ import annotations

import argparse
import sys

from lipgnn.results import registry
from lipgnn.results.engine import make_tables


def main(argv: list[str] | None = None) -> int:
    names = registry.names("table")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results", help="folder holding runs/<experiment>/")
    parser.add_argument("--out-dir", default=None, help="output folder (default: <results-dir>/tables)")
    parser.add_argument("--only", "--tables", dest="only", nargs="+", choices=names, default=None,
                        help="only these artifacts (default: every table artifact)")
    parser.add_argument("--budget", default=None, help="only records of this budget (e.g. cpu, paper)")
    args = parser.parse_args(argv)
    for path in make_tables(args.results_dir, args.out_dir, tuple(args.only) if args.only else None, args.budget):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
