"""Refresh the generated blocks of README.md and docs/*.md: ``python scripts/make_docs.py`` (``make docs``).

Reads committed files only (results/demo/, results/bench/, conf/, lipgnn/config_schema.py) and rewrites the content
between each ``<!-- auto:NAME -->`` / ``<!-- /auto:NAME -->`` pair of the pages in ``lipgnn.docs.PAGES``; every
other byte is kept. ``--check`` writes nothing and exits 1 when a page is stale.
"""

from __future__ import annotations

import argparse
import sys

from lipgnn.docs import refresh
from lipgnn.errors import LipgnnError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="the repository root (default: here)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    try:
        results = refresh(args.root, write=not args.check)
    except LipgnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for result in results:
        state = ("stale (run make docs)" if args.check else "updated") if result.changed else "up to date"
        print(f"{result.path}: {state}")
    return 1 if args.check and any(r.changed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
