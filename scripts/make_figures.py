"""Rebuild the papers' figures from run records: ``python scripts/make_figures.py --results-dir results``.

Loops over the artifact registry (lipgnn/results/artifacts/): reads ``<results-dir>/runs/<experiment>/*.json``
only (no training, no GPU, no network) and writes ``<out-dir>/<artifact>.{png,pdf}`` (default out-dir:
``<results-dir>/figures``). A figure without records is still written, saying "no records yet".
"""

from __future__ import annotations

import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows

from lipgnn.results import registry
from lipgnn.results.engine import make_figures


def main(argv: list[str] | None = None) -> int:
    names = registry.names("figure")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results", help="folder holding runs/<experiment>/")
    parser.add_argument("--out-dir", default=None, help="output folder (default: <results-dir>/figures)")
    parser.add_argument("--only", "--figures", dest="only", nargs="+", choices=names, default=None,
                        help="only these artifacts (default: every figure artifact)")
    args = parser.parse_args(argv)
    for path in make_figures(args.results_dir, args.out_dir, tuple(args.only) if args.only else None):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
