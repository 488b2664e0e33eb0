"""Command-line entry points: ``lipgnn-train`` (== ``python train.py``) and ``lipgnn`` (utility subcommands)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from lipgnn.errors import LipgnnError

# An absolute path: Hydra would otherwise look for a Python package named "conf" (editable install = repo root).
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_train(cfg: DictConfig) -> float | None:
    from lipgnn.train.run import run

    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        record = run(cfg, progress=False if multirun else None)
    except LipgnnError as exc:
        if multirun:
            raise  # the sweep goes on; Hydra reports the failed job at the end
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    best = record.get("best") or {}
    return best.get("val")


def train_main() -> None:
    _hydra_train()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lipgnn", description="lipgnn utilities")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("sweep-status", help="runs done / diverged / failed / missing for an experiment")
    status.add_argument("experiment", help="experiment name, e.g. table3")
    status.add_argument("--results-dir", default="results")
    status.add_argument("overrides", nargs="*", help="the sweep's overrides, e.g. budget=cpu")
    from lipgnn.lipschitz.cli import add_parser as add_lipschitz_parser

    add_lipschitz_parser(sub)
    # Overrides may come before or after --results-dir: collect the leftovers too.
    args, extra = parser.parse_known_args(argv)
    unknown = [item for item in extra if item.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "lipschitz":
        from lipgnn.lipschitz.cli import run as run_lipschitz

        return run_lipschitz(args, extra)
    if args.command == "sweep-status":
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from lipgnn.sweep import print_sweep_status

        # `experiment=table3` is how train.py spells it: accept it here too.
        experiment = args.experiment.removeprefix("experiment=")
        try:
            return print_sweep_status(experiment, args.results_dir, [*args.overrides, *extra])
        except (HydraException, OmegaConfBaseException, LipgnnError) as exc:
            message = str(exc).strip()
            first = message.splitlines()[0] if message else type(exc).__name__
            print(f"error: {first} (usage: lipgnn sweep-status table3 budget=cpu)", file=sys.stderr)
            return 2
    return 1
