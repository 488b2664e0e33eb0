"""Recompute every run record's id with :func:`lipgnn.identity.run_id` and rename the files that changed.

    python scripts/migrate_run_ids.py [--results-dir results] [--dry-run]

For each ``<results_dir>/runs/<experiment>/<run_id>.json``: renames the config keys of :data:`RENAMED`
(``norm.variant`` -> ``norm.formula``) in the stored config, computes the id from that config, and, where
it differs, writes the record under the new name (with the new ``run_id``) and removes the old file.
Never overwrites: when two records would share one new id, or the new name is already taken, both are
left as they are and reported (exit status 1). Safe to run again: records already migrated are skipped.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from lipgnn.identity import RENAMED, run_id
from lipgnn.runs import import_record
from lipgnn.store import read_record, record_paths


def _rename_keys(config: dict) -> bool:
    changed = False
    for old, new in RENAMED.items():
        *parents, leaf = old.split(".")
        node = config
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            new_leaf = new.split(".")[-1]  # renames stay within their group
            node.setdefault(new_leaf, node.pop(leaf))
            changed = True
    return changed


# Records of the gh_depth and kim job kinds (lipgnn.runs) carry ids their kinds derive and look up to skip finished
# work: renaming them would make the run layer redo them.
OWN_RUNNER_EXPERIMENTS = frozenset({"gh_depth", "kim_bounds", "kim_divergence", "kim_invertibility", "lip_estimates"})


def _energy_run_id(config: dict) -> str:
    from omegaconf import OmegaConf

    from lipgnn.runs.kinds.energy import energy_id, energy_options

    return energy_id(config, energy_options(OmegaConf.create(config)))


# Job kinds whose ids are the training identity plus their own options: migrated with the kind's id function,
# so that the run layer finds the record and skips the unit.
RUNNER_IDS = {"gh_energy": _energy_run_id}


def plan(results_dir: Path) -> tuple[list[tuple[Path, dict, str]], list[str]]:
    """(path, migrated record, new id) for each record to rewrite, and the duplicate reports."""
    targets: dict[Path, list[Path]] = defaultdict(list)
    moves: list[tuple[Path, dict, str]] = []
    for path in record_paths(results_dir):
        record = read_record(path)
        if record is None or record.get("experiment") in OWN_RUNNER_EXPERIMENTS:
            continue
        renamed = _rename_keys(record.get("config") or {})
        new_id = RUNNER_IDS.get(record.get("experiment"), run_id)(record["config"])
        new_path = path.with_name(f"{new_id}.json")
        targets[new_path].append(path)
        if renamed or new_id != record["run_id"] or new_path != path:
            moves.append((path, {**record, "run_id": new_id}, new_id))
    problems = []
    for new_path, sources in targets.items():
        if len(sources) > 1:
            problems.append(f"duplicate: {', '.join(str(s) for s in sources)} would all become {new_path.name}")
    clash = {s for sources in targets.values() if len(sources) > 1 for s in sources}
    return [m for m in moves if m[0] not in clash], problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default="results", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    args = parser.parse_args(argv)
    moves, problems = plan(args.results_dir)
    renamed = 0
    for path, record, new_id in moves:
        new_path = path.with_name(f"{new_id}.json")
        action = "rewrite" if new_path == path else f"rename -> {new_path.name}"
        print(f"{path}: {action}")
        if args.dry_run:
            continue
        written = import_record(args.results_dir, record)
        assert written == new_path, (written, new_path)
        if new_path != path:
            path.unlink()
            renamed += 1
    for line in problems:
        print(line, file=sys.stderr)
    total = len(record_paths(args.results_dir))
    verb = "would change" if args.dry_run else "changed"
    print(f"{total} records; {verb} {len(moves)} ({renamed} renamed); {len(problems)} duplicate groups left alone")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
