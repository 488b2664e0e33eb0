"""Refresh the number blocks of the reproduction report: ``python scripts/make_report.py --results-dir results``.

Reads ``<results-dir>/runs/*/*.json`` only (no training, no network) and rewrites the content between each
``<!-- auto:NAME -->`` / ``<!-- /auto:NAME -->`` marker pair of ``<results-dir>/REPRODUCTION.md`` (the entry
point and the LipschitzNorm part) and of each other paper's part, ``<results-dir>/reproduction/<paper>.md``;
all text outside the markers is kept byte for byte. A missing part is created as a skeleton with every block.
``--check`` writes nothing and exits 1 when a part is stale.
"""

from __future__ import annotations

import argparse
import logging
import sys

from lipgnn.errors import LipgnnError
from lipgnn.results import registry
from lipgnn.results.report import MAIN_PAPER, REPORT_NAME, update_report, update_reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results", help="folder holding runs/<experiment>/")
    parser.add_argument("--report", default=None,
                        help=f"the main part's file (default: <results-dir>/{REPORT_NAME}); only that part is built")
    parser.add_argument("--paper", nargs="+", choices=registry.PAPERS, default=None, help="only these papers' parts")
    parser.add_argument("--append-missing", action="store_true",
                        help="append blocks whose markers are absent from the report (default: warn only)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a part differs from what the records give")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    try:
        if args.report is not None:
            results = [update_report(args.results_dir, args.report, append_missing=args.append_missing,
                                     write=not args.check, paper=MAIN_PAPER)]
        else:
            results = update_reports(args.results_dir, append_missing=args.append_missing, write=not args.check,
                                     papers=tuple(args.paper) if args.paper else None)
    except LipgnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale = False
    for result in results:
        if args.check:
            print(f"{result.path}: {'stale (run make report)' if result.changed else 'up to date'}")
            stale |= result.changed
        elif result.created:
            print(f"wrote {result.path} (new skeleton with blocks: {', '.join(result.updated)})")
        else:
            state = "updated" if result.changed else "unchanged"
            print(f"{state} {result.path}: blocks {', '.join(result.updated) or '-'}"
                  + (f"; appended {', '.join(result.appended)}" if result.appended else "")
                  + (f"; no markers for {', '.join(result.missing)}" if result.missing else ""))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
