"""Refresh the number blocks of results/REPRODUCTION.md: ``python scripts/make_report.py --results-dir results``.

Reads ``<results-dir>/runs/*/*.json`` only (no training, no network) and rewrites the content between each
``<!-- auto:NAME -->`` / ``<!-- /auto:NAME -->`` marker pair of the report (default
``<results-dir>/REPRODUCTION.md``); all text outside the markers is kept byte for byte. A missing report is
created as a skeleton with every block. ``--check`` writes nothing and exits 1 when the report is stale.
"""

from __future__ import annotations

import argparse
import logging
import sys

from lipgnn.errors import LipgnnError
from lipgnn.results.report import BLOCK_NAMES, REPORT_NAME, update_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results", help="folder holding runs/<experiment>/")
    parser.add_argument("--report", default=None, help=f"report file (default: <results-dir>/{REPORT_NAME})")
    parser.add_argument("--append-missing", action="store_true",
                        help="append blocks whose markers are absent from the report (default: warn only)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the report differs from what the records give")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    try:
        result = update_report(args.results_dir, args.report, append_missing=args.append_missing,
                               write=not args.check)
    except LipgnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{result.path}: {'stale (run make report)' if result.changed else 'up to date'}")
        return 1 if result.changed else 0
    if result.created:
        print(f"wrote {result.path} (new skeleton with blocks: {', '.join(BLOCK_NAMES)})")
    else:
        state = "updated" if result.changed else "unchanged"
        print(f"{state} {result.path}: blocks {', '.join(result.updated) or '-'}"
              + (f"; appended {', '.join(result.appended)}" if result.appended else "")
              + (f"; no markers for {', '.join(result.missing)}" if result.missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
