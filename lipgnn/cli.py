"""Command-line entry points: ``lipgnn-train`` (== ``python train.py``) and ``lipgnn`` (utility subcommands)."""

from __future__ import annotations

import argparse
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from lipgnn import numerics
from lipgnn.config import CONF_DIR
from lipgnn.errors import LipgnnError, RunInterrupted
from lipgnn.sweep import check_command_line
from lipgnn.train import gc_pause

__all__ = ["main", "train_main"]


def _parallel_jobs() -> int:
    launcher = HydraConfig.get().launcher
    n_jobs = launcher.get("n_jobs") if "JoblibLauncher" in str(launcher.get("_target_", "")) else None
    return int(n_jobs) if isinstance(n_jobs, int) and n_jobs > 0 else 1


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_train(cfg: DictConfig) -> float | None:
    gc_pause.pause()  # through the heavy imports, until the run's data loads (lipgnn.train.gc_pause)
    from lipgnn.runs import run

    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        record = run(cfg, progress=False if multirun else None, parallel_jobs=_parallel_jobs() if multirun else 1)
    except RunInterrupted as exc:
        print(exc, file=sys.stderr)
        sys.exit(130)
    except LipgnnError as exc:
        if multirun:
            raise  # the sweep goes on; Hydra reports the failed job at the end
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    best = record.get("best") or {}
    return best.get("val")


def where(overrides: list[str]) -> str:
    """Where ``train.py <overrides>`` would write and read: its record, its checkpoint, the data root and cache."""
    from lipgnn.config import compose
    from lipgnn.runs import job_id
    from lipgnn.store import checkpoint_file, run_record_path

    cfg = compose(overrides)
    rid = job_id(cfg)
    rows = {"run id": rid, "record": str(run_record_path(str(cfg.results_dir), str(cfg.experiment_name), rid)),
            "checkpoint": str(checkpoint_file(str(cfg.results_dir), str(cfg.experiment_name), rid)),
            "data root": f"{cfg.dataset.root}  (dataset.root; default $LIPGNN_DATA, else ./data)",
            "data cache": f"{cfg.dataset.cache_dir}  (dataset.cache_dir; default $LIPGNN_CACHE, else .cache/lipgnn)"}
    return "\n".join(f"{name + ':':12s}{value}" for name, value in rows.items())


def train_main() -> None:
    argv = sys.argv[1:]
    numerics.start(argv)  # numerics=portable: the libraries' pins, set before they load (a restart when needed)
    if "--where" in argv:  # the resolved paths of one run, nothing trained
        try:
            print(where([a for a in argv if a != "--where"]))
        except LipgnnError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        return
    if any(a in ("--cfg", "-c") for a in argv) and "--resolve" not in argv:
        sys.argv.append("--resolve")  # print results_dir and the data paths as the run will use them
    # Every job is composed and validated before Hydra starts any: bad input = one line, exit 2, nothing written.
    try:
        check_command_line(sys.argv[1:])
    except LipgnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        _hydra_train()
    except KeyboardInterrupt:  # Ctrl-C outside a run (while Hydra composes or launches)
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["energy"]:  # its own parser: Hydra-style overrides plus --m/--plot
        from lipgnn.diagnostics.cli import main as energy_main

        return energy_main(argv[1:])
    if argv[:1] == ["verify"]:  # its own parser: records to rerun and how
        from lipgnn.verify import main as verify_main

        return verify_main(argv[1:])
    if argv[:1] == ["diagnose"]:  # its own parser: a factory and Hydra-style overrides
        from lipgnn.diagnostics.diagnose_cli import main as diagnose_main

        return diagnose_main(argv[1:])
    parser = argparse.ArgumentParser(prog="lipgnn", description="lipgnn utilities")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("energy", help="per-layer energies of an untrained model (Guan & He §2): lipgnn energy --help")
    sub.add_parser("verify", help="rerun committed records on this machine and report whether they reproduce: "
                                  "lipgnn verify --help")
    sub.add_parser("diagnose", help="per-layer energies, MAD, gradients, Lipschitz bounds of a suite model or "
                                    "your own (file.py:factory): lipgnn diagnose --help")
    status = sub.add_parser("sweep-status", help="runs done / diverged / failed / missing for an experiment")
    status.add_argument("experiment", help="experiment name, e.g. table3, or an ad-hoc experiment_name")
    status.add_argument("--results-dir", default=None, help="default: results (outputs for ad-hoc experiments)")
    status.add_argument("overrides", nargs="*", help="the sweep's overrides, e.g. budget=cpu")
    summarize = sub.add_parser("summarize", help="mean ± std per configuration and per-run curves of a results folder")
    summarize.add_argument("results_dir", help="a results_dir, e.g. outputs")
    summarize.add_argument("--experiment", default=None, help="one experiment folder only")
    summarize.add_argument("--out", default=None, help="where the table and PNG go (default: <results_dir>/summary)")
    pull = sub.add_parser("pull-wandb", help="a W&B project's run records into a results folder")
    pull.add_argument("project", help="entity/project, as logger.entity/logger.project named it")
    pull.add_argument("--results-dir", default="results", help="where the records go (default: results)")
    pull.add_argument("--experiment", default=None, help="one experiment's runs only, e.g. table3")
    pull.add_argument("--overwrite", action="store_true", help="replace local records that differ from W&B's")
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
    if args.command == "pull-wandb":
        from lipgnn.results.wandb_records import describe, pull_records

        try:
            counts = pull_records(args.project, args.results_dir, args.experiment, overwrite=args.overwrite)
        except LipgnnError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(describe(counts, args.results_dir))
        return 0
    if args.command == "summarize":
        from lipgnn.summarize import summarize as run_summary

        try:
            return run_summary(args.results_dir, args.experiment, args.out)
        except LipgnnError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.command == "sweep-status":
        from lipgnn.config import AD_HOC_EXPERIMENT
        from lipgnn.sweep import is_declared, print_sweep_status

        # `experiment=table3` is how train.py spells it: accept it here too.
        experiment = args.experiment.removeprefix("experiment=").removeprefix("experiment_name=")
        results_dir = args.results_dir or ("results" if is_declared(experiment) and experiment != AD_HOC_EXPERIMENT
                                           else "outputs")
        try:
            return print_sweep_status(experiment, results_dir, [*args.overrides, *extra])
        except Exception as exc:  # Hydra/OmegaConf raise several unrelated types for a bad override
            from lipgnn.config import format_error

            print(f"error: {format_error(exc)} (usage: lipgnn sweep-status table3 budget=cpu)", file=sys.stderr)
            return 2
    return 1
