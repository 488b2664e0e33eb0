"""Rebuild the paper's Tables 1–3 from run records: ``python scripts/make_tables.py --results-dir results``.

Reads ``<results-dir>/runs/table{1,2,3}/*.json`` only (no training, no GPU, no network) and writes
``<out-dir>/table{1,2,3}.{md,tex,csv}`` (default out-dir: ``<results-dir>/tables``).
"""

from __future__ import annotations

import argparse
import sys

from lipgnn.results.tables import TABLES, make_tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results", help="folder holding runs/<experiment>/")
    parser.add_argument("--out-dir", default=None, help="output folder (default: <results-dir>/tables)")
    parser.add_argument("--tables", nargs="+", choices=sorted(TABLES), default=sorted(TABLES))
    parser.add_argument("--budget", default=None, help="only records of this budget (e.g. cpu, paper)")
    args = parser.parse_args(argv)
    for path in make_tables(args.results_dir, args.out_dir, tuple(args.tables), args.budget):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
