"""Rebuild the paper's Figures 2–6 from run records: ``python scripts/make_figures.py --results-dir results``.

Reads ``<results-dir>/runs/fig{2..6}/*.json`` only (no training, no GPU, no network) and writes
``<out-dir>/fig{2..6}.{png,pdf}`` (default out-dir: ``<results-dir>/figures``). A figure without records
is still written, saying "no records yet".
"""

from __future__ import annotations

import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows

from lipgnn.results.figures import FIGURES, make_figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results", help="folder holding runs/<experiment>/")
    parser.add_argument("--out-dir", default=None, help="output folder (default: <results-dir>/figures)")
    parser.add_argument("--figures", nargs="+", choices=sorted(FIGURES), default=sorted(FIGURES))
    args = parser.parse_args(argv)
    for path in make_figures(args.results_dir, args.out_dir, tuple(args.figures)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
