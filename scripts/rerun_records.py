"""Rerun committed records from this checkout, under their own run ids.

    python scripts/rerun_records.py [EXPERIMENT/]RUN_ID ... [--results-dir results] [--dry-run]


A record written with uncommitted code (``-dirty`` in its ``git_commit``) cannot be traced to the code that ran;
rerunning it from a clean checkout replaces it with one that can. Each record's stored ``config`` is re-validated
against the current schema and must give the same run id (the identity of what it computes) before it is
overwritten; a record whose config no longer maps to its run id is refused with one line saying so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from lipgnn.errors import ConfigError, LipgnnError


def find(results_dir: Path, name: str) -> Path:
    """The record ``<experiment>/<run id>`` (or a run id that only one experiment folder holds)."""
    pattern = f"runs/{name}.json" if "/" in name else f"runs/*/{name}.json"
    hits = sorted(results_dir.glob(pattern))
    if len(hits) != 1:
        raise ConfigError(f"{name}: {len(hits)} records match {results_dir}/{pattern}; pass <experiment>/<run id>")
    return hits[0]


def with_missing_keys(config: dict) -> dict:
    """A record's config with the keys added since it was written: those that change the numbers at the value that
    reproduces the behaviour from before they existed (``lipgnn.identity.NEUTRAL``, which also keeps the run id),
    the others (how a run executes: threads, allocator, logging) at the schema's default."""
    from lipgnn.config_schema import SCHEMAS, node
    from lipgnn.identity import NEUTRAL

    out = OmegaConf.create(config)
    groups = {"": "config_schema", "train": "base_train", "model": "base_gcnii" if
              str(OmegaConf.select(out, "model.name")) == "gcnii" else "base_model"}
    for group, name in groups.items():
        defaults = OmegaConf.to_container(node(SCHEMAS[(group, name)]), resolve=False)
        for key, value in defaults.items():
            dotted = f"{group}.{key}" if group else key
            if value != "???" and not isinstance(value, dict) and OmegaConf.select(out, dotted, default=None) is None:
                OmegaConf.update(out, dotted, value, force_add=True)
        if not group:
            for key in ("log",):
                for sub, value in (defaults.get(key) or {}).items():
                    if OmegaConf.select(out, f"{key}.{sub}", default=None) is None:
                        OmegaConf.update(out, f"{key}.{sub}", value, force_add=True)
    for key, value in NEUTRAL.items():
        if OmegaConf.select(out, key, default=None) is None or key not in _keys(config):
            OmegaConf.update(out, key, value, force_add=True)
    return OmegaConf.to_container(out)


def _keys(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in tree.items():
        out.add(f"{prefix}{key}")
        if isinstance(value, dict):
            out |= _keys(value, f"{prefix}{key}.")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_ids", nargs="+")
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--dry-run", action="store_true", help="check the run ids, train nothing")
    args = parser.parse_args(argv)
    from lipgnn.config import validate
    from lipgnn.runs import job_id, run
    from lipgnn.runs.registry import declared_kind

    results = Path(args.results_dir)
    try:
        for name in args.run_ids:
            run_id = name.rsplit("/", 1)[-1]
            record = json.loads(find(results, name).read_text(encoding="utf-8"))
            kind = record["config"].get("kind") or declared_kind(record["experiment"])
            if kind == "kim":
                raise ConfigError(f"{run_id}: a kim unit; rerun it with python train.py "
                                  f"experiment={record['experiment']} kim.unit=<unit> seed=<seed> overwrite=true")
            cfg = OmegaConf.create({**with_missing_keys(record["config"]), "kind": kind})
            cfg.results_dir, cfg.overwrite = str(results), True
            if job_id(cfg) != run_id:
                raise ConfigError(f"{run_id}: its config now gives run id {job_id(cfg)}; not rerun")
            validate(cfg)
            if args.dry_run:
                print(f"{run_id}: ok ({record.get('git_commit')})")
                continue
            new = run(cfg, progress=False)
            print(f"{run_id}: {new.get('status')} best_test {new.get('best', {}).get('test')} (was "
                  f"{record.get('best', {}).get('test')}), git {new.get('git_commit')}", flush=True)
    except LipgnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
