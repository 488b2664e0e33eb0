"""Sweeps that survive: expansion counts, SIGKILL + rerun, failures, divergence, status, concurrency."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_TREES, files_under, run_cli

from lipgnn.store import load_records
from lipgnn.sweep import expand, sub_sweeps, sweep_jobs, sweep_status

# Hand-counted from conf/grid/*_cpu.yaml: the product of each sub-sweep's axes (the main sweep + each extra).
CPU_COUNTS = {
    "table1": 5 * 3 * 2 * 3 * 5,   # variants x datasets x rates x depths x seeds
    "table2": 2 * 2 * 3 * 5,       # variants x datasets x depths x seeds
    "table3": 4 * 2 * 2 * 2 * 2 * 5,  # variants x datasets x depths x lr x dropout x seeds
    "fig2": 2 * 5,
    "fig3": 2 * 4 * 5,
    "fig4": 2 * 4 * 2 * 5 + 4 * 2 * 2 * 2 * 5,  # 200 epochs; the 1000-epoch extra adds dropout
    "fig5": 4 * 11 + (2 * 5 + 6 + 5 + 5) * 2,  # seed 11 everywhere; seeds 12, 13 by depth (GAT family; d=2: all)
    "fig5_legacy": 9 * 5,
    "fig6": 8 * 2 * 4 * 2 * 3 + 8 * 2 * 2 * 2,  # variants x datasets x depths x lr x seeds 0-2; seeds 3-4 at 30
    "fig6_protocol": 4 * 5 + 2 * 5,  # GT, GT-Lip (both formulas), GT-Lip + LN at 30; GT-Lip + LN at 10, 20
}
PAPER_COUNTS = {
    "table3": 4 * 2 * 2 * 4 * 4 * 2 * 3 * 4 * 5,
    "fig2": 2 * 5,
    "fig5": 9 * 11 * 2,      # tree depths 2-10 x variants x seeds 11, 12
    "fig5_legacy": 9 * 9 * 10,
    "fig6_protocol": 5 * 2 * 7 * 5,  # GT variants (Lip with both formulas) x datasets x depths x seeds
}


@pytest.mark.parametrize(("experiment", "count"), sorted(CPU_COUNTS.items()))
def test_cpu_sweeps_expand_to_the_intended_runs(experiment: str, count: int) -> None:
    jobs = sweep_jobs(experiment, ["budget=cpu"])
    assert len(jobs) == count
    assert len({tuple(job) for job in jobs}) == count


@pytest.mark.parametrize(("experiment", "count"), sorted(PAPER_COUNTS.items()))
def test_paper_sweeps_expand_to_the_papers_grid(experiment: str, count: int) -> None:
    assert len(sweep_jobs(experiment, ["budget=paper"])) == count


def test_command_line_overrides_replace_a_grid_axis() -> None:
    jobs = sweep_jobs("table3", ["budget=cpu", "seed=7"])
    assert len(jobs) == CPU_COUNTS["table3"] // 5
    assert all("seed=7" in job for job in jobs)


# ------------------------------------------------------------------ the lipgnn sweeper: params, then each extra


def test_the_grid_is_the_main_sweep_then_each_extra_every_job_once() -> None:
    """Main sweep crossed first, then each extra crossed on its own, in order; a job two sub-sweeps share runs once
    (at its first place); an extra does not inherit the main sweep's axes."""
    sweeper = {"params": {"variant": "gat,gat_lip", "seed": "0,1"},
               "extra": [{"variant": "gat", "seed": "1,2", "train.epochs": 1000}, {"seed": 1, "variant": "gat_lip"}]}
    assert expand(sweeper, "cpu") == [
        ["variant=gat", "seed=0"], ["variant=gat", "seed=1"], ["variant=gat_lip", "seed=0"],
        ["variant=gat_lip", "seed=1"],
        ["variant=gat", "seed=1", "train.epochs=1000"], ["variant=gat", "seed=2", "train.epochs=1000"]]
    # the second extra is variant=gat_lip seed=1 again (written in another order): the same job, launched once
    assert [len(s) for s in sub_sweeps(sweeper["params"], sweeper["extra"])] == [4, 2, 1]


def test_a_command_line_value_replaces_that_axis_in_the_main_sweep_and_every_extra() -> None:
    sweeper = {"params": {"seed": "0,1", "depth": 2}, "extra": [{"seed": "3,4", "depth": 30, "train.epochs": 1000}]}
    assert expand(sweeper, "cpu", ["seed=7", "budget=cpu"]) == [
        ["seed=7", "depth=2", "budget=cpu"], ["seed=7", "depth=30", "train.epochs=1000", "budget=cpu"]]
    assert expand(sweeper, "cpu", ["train.epochs=5"])[-1] == ["seed=4", "depth=30", "train.epochs=5"]
    # the paper's budget without a grid file: the experiment's design
    assert expand({"design": {"seed": "range(2)"}}, "paper") == [["seed=0"], ["seed=1"]]
    assert expand({"design": {"seed": "range(2)"}}, "cpu") == [[]]


@pytest.mark.parametrize("extra", ["[seed]", "{seed: 1}", "[{seed: {a: 1}}]", "[{}]", "[{seed: 'range(1'}]"])
def test_a_bad_extra_entry_is_one_line(extra: str) -> None:
    from lipgnn.errors import ConfigError
    from lipgnn.sweep import check_command_line

    with pytest.raises(ConfigError) as error:
        check_command_line(["-m", *TINY_TREES, f"hydra.sweeper.extra={extra}"])
    assert str(error.value).startswith("hydra.sweeper.extra") and "\n" not in str(error.value)


def test_a_bad_extra_entry_stops_train_py_in_one_line_before_any_job(tmp_path: Path) -> None:
    out = run_cli(["-m", *TINY_TREES, "train.epochs=1", "results_dir=res", "hydra.sweeper.extra=[seed]"], tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: hydra.sweeper.extra[0]"), out.stderr
    assert not (tmp_path / "res").exists()


def test_train_py_multirun_launches_the_extras_through_the_lipgnn_sweeper(tmp_path: Path) -> None:
    """conf/config.yaml selects hydra/sweeper=lipgnn: a real multirun launches the main sweep and every extra,
    a job they share once (Hydra's own BasicSweeper would refuse the ``extra`` key)."""
    out = run_cli(["-m", *TINY_TREES, "train.epochs=1", "seed=0", "experiment_name=extras", "results_dir=res",
                   "hydra/launcher=local", "hydra.sweeper.extra=[{train.lr: '0.01,0.02'},{train.lr: 0.01}]"], tmp_path)
    assert out.returncode == 0, out.stderr
    launched = [line for line in (out.stdout + out.stderr).splitlines() if "] \t#" in line]
    assert len(launched) == 3, launched  # the main job, lr 0.01 and 0.02 (the second extra's job is the first's)
    records = [json.loads(p.read_text()) for p in files_under(tmp_path / "res" / "runs")]
    assert sorted(r["config"]["train"]["lr"] for r in records) == [0.005, 0.01, 0.02]


def test_skip_done_launches_only_the_jobs_without_a_finished_record(tmp_path: Path) -> None:
    """hydra.sweeper.skip_done=true: a relaunch submits only the runs whose record is missing or failed (on SLURM,
    one array task each), not every job of the sweep."""
    from lipgnn.config import compose
    from lipgnn.runs import run

    base = ["-m", *TINY_TREES, "train.epochs=1", "experiment_name=skip", "results_dir=res", "hydra/launcher=local"]
    for seed in (0, 1):  # the first launch, in this process
        run(compose([*base[1:-1], f"seed={seed}", f"results_dir={tmp_path / 'res'}", "log.progress=false"]))
    failed = next((tmp_path / "res" / "runs" / "skip").glob("*-s1-*.json"))
    failed.write_text(failed.read_text().replace('"status": "completed"', '"status": "failed"'))
    again = run_cli([*base, "seed=0,1,2", "hydra.sweeper.skip_done=true"], tmp_path)
    assert again.returncode == 0, again.stderr
    launched = [line.split(" : ")[1] for line in (again.stdout + again.stderr).splitlines() if "] \t#" in line]
    assert [[o for o in job.split() if o.startswith("seed=")] for job in launched] == [["seed=1"], ["seed=2"]]
    assert "skip_done: 1 of 3 jobs have a finished record; launching 2" in again.stdout + again.stderr
    done = run_cli([*base, "seed=0,1,2", "hydra.sweeper.skip_done=true"], tmp_path)  # nothing left: nothing runs
    assert done.returncode == 0 and "] \t#" not in done.stdout + done.stderr, done.stderr


def test_sweep_status_and_check_grid_expand_a_grid_with_extras_alike(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One expander: the runs sweep-status lists for a grid with extras are exactly the records check_grid places
    inside it, each at its own sub-sweep's epoch budget; a run of neither is outside for both."""
    import shutil

    import pandas as pd
    from omegaconf import OmegaConf

    from lipgnn import sweep
    from lipgnn.config import CONF_DIR
    from lipgnn.identity import run_id
    from lipgnn.results import grid
    from lipgnn.store import write_record

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "grid" / "fig2_cpu.yaml").write_text(
        "# @package _global_\nhydra:\n  sweeper:\n    params:\n      variant: gat,gat_lip\n      seed: 0\n"
        "    extra:\n      - train.epochs: 7\n        variant: gat\n        seed: 1,2\n"
        "      - variant: gat_lip\n        seed: 3\n        depth: 4\n")
    monkeypatch.setattr(sweep, "CONF_DIR", str(conf))
    monkeypatch.setattr(grid, "CONF_DIR", conf)
    cfgs = sweep.expand_sweep("fig2", ["budget=cpu"])
    stray = sweep.expand_sweep("fig2", ["budget=cpu", "variant=gat", "seed=1", "train.epochs=9"])[0]
    results = tmp_path / "results"
    for cfg in [*cfgs, stray]:
        write_record(results, {"run_id": run_id(cfg), "experiment": "fig2", "status": "completed", "config": {}})
    status = sweep.sweep_status("fig2", results, ["budget=cpu"])
    assert len(status.rows) == 2 + 2 + 1 and all(state == "completed" for _, state in status.rows)
    assert status.outside == [(run_id(stray), "completed")]
    df = pd.DataFrame({"config": [OmegaConf.to_container(c, resolve=True) for c in [*cfgs, stray]],
                       "experiment": "fig2", "budget": "cpu"})
    check = grid.check_grid(df, conf)
    assert check.in_grid.tolist() == [True] * len(cfgs) + [False]
    assert check.declared_epochs.tolist()[:-1] == [float(c.train.epochs) for c in cfgs] == [100.0, 100.0, 7.0, 7.0,
                                                                                            100.0]
    assert len(grid.declared_grid("fig2", "cpu", conf).points) == len(status.rows)


SWEEP = ["-m", *TINY_TREES, "train.epochs=4", "seed=0,1,2", "experiment_name=faults", "results_dir=res",
         "train.checkpoint_every=1"]


def _records(root: Path) -> dict[int, dict]:
    out = {}
    for path in files_under(root / "res" / "runs"):
        record = json.loads(path.read_text())
        out[record["seed"]] = record
    return out


def test_sigkilled_sweep_reruns_to_exactly_one_record_per_run(tmp_path: Path) -> None:
    killed = run_cli(SWEEP, tmp_path, env={"LIPGNN_FAULT": "kill@-s1-:2"})
    assert killed.returncode == -9
    first = _records(tmp_path)
    assert set(first) == {0}
    mtime = next((tmp_path / "res" / "runs").rglob("*.json")).stat().st_mtime_ns
    rerun = run_cli(SWEEP, tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    records = _records(tmp_path)
    assert set(records) == {0, 1, 2} and all(r["status"] == "completed" for r in records.values())
    assert records[1]["resumed_from"] == 2  # seed 1 continued from its checkpoint, not from scratch
    assert "skipped" in rerun.stdout + rerun.stderr
    assert next(p for p in (tmp_path / "res" / "runs").rglob("*-s0-*.json")).stat().st_mtime_ns == mtime
    names = [p.name for p in files_under(tmp_path / "res" / "runs")]
    assert len(names) == 3 and not [n for n in names if n.startswith(".") or n.endswith(".tmp")]


def test_exception_in_one_job_is_recorded_and_the_rest_finish(tmp_path: Path) -> None:
    out = run_cli(SWEEP, tmp_path, env={"LIPGNN_FAULT": "raise@-s1-"})
    assert out.returncode != 0  # the sweep's exit status says that a job failed
    records = _records(tmp_path)
    assert records[0]["status"] == records[2]["status"] == "completed"
    assert records[1]["status"] == "failed" and "injected fault" in records[1]["error"]
    assert records[1]["config"]["seed"] == 1
    rerun = run_cli(SWEEP, tmp_path)  # a failed run is retried, finished ones are not
    assert rerun.returncode == 0
    assert {r["status"] for r in _records(tmp_path).values()} == {"completed"}
    # locks/ holds the runs in progress only: none once the sweep ended, whether its runs completed or failed
    assert [p for p in (tmp_path / "res" / "locks").rglob("*") if p.is_file()] == []


def test_nan_in_one_job_is_a_diverged_record_and_the_sweep_succeeds(tmp_path: Path) -> None:
    out = run_cli(SWEEP, tmp_path, env={"LIPGNN_FAULT": "nan@-s2-:3"})
    assert out.returncode == 0, out.stderr
    records = _records(tmp_path)
    assert records[2]["status"] == "diverged" and records[2]["history"]["epoch"] == [1, 2]
    assert records[0]["status"] == records[1]["status"] == "completed"
    df = load_records(tmp_path / "res", "faults")
    assert sorted(df.status) == ["completed", "completed", "diverged"]


def test_sweep_status_names_what_is_done_and_missing(tmp_path: Path) -> None:
    from lipgnn.store import write_record

    overrides = ["budget=cpu", "variant=gat,gat_lip", "seed=0"]
    rows = sweep_status("fig2", tmp_path, overrides).rows
    assert [status for _, status in rows] == ["missing", "missing"]
    assert rows[0][0].startswith("gat-none-cora-L20-s0-") and rows[1][0].startswith("gat-lip-cora-L20-s0-")
    for (run_id, _), status in zip(rows, ("diverged", "failed"), strict=True):
        write_record(tmp_path, {"run_id": run_id, "experiment": "fig2", "status": status, "config": {}})
    # A record no job of the declared grid produces (e.g. another epoch count) is listed apart.
    write_record(tmp_path, {"run_id": "gat-none-cora-L20-s0-0000000000", "experiment": "fig2",
                            "status": "completed", "config": {}})
    status = sweep_status("fig2", tmp_path, overrides)
    assert [s for _, s in status.rows] == ["diverged", "failed"]
    assert status.outside == [("gat-none-cora-L20-s0-0000000000", "completed")]


def test_sweep_status_cli_takes_train_py_spelling_and_fails_in_one_line(tmp_path: Path, capsys) -> None:
    from lipgnn.cli import main

    # `experiment=fig2` (as train.py spells it) is the same as the bare name; missing runs are reported, and
    # the command still succeeds (so `make sweep-status` does not fail).
    assert main(["sweep-status", "experiment=fig2", "budget=cpu", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fig2 budget=cpu: 10 runs in the declared grid — 0 done, 0 diverged, 0 failed, 10 missing" in out
    # An experiment with no conf/experiment file is ad hoc: its records are listed by status.
    from lipgnn.store import write_record

    write_record(tmp_path, {"run_id": "gat-lip-cs-L2-s0-abc", "experiment": "mysweep", "status": "diverged",
                            "config": {}})
    assert main(["sweep-status", "mysweep", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "diverged  gat-lip-cs-L2-s0-abc" in out and "1 runs in the records (ad-hoc" in out
    # A malformed override: exit 2 and one line on stderr, no traceback.
    for argv in (["sweep-status", "fig2", "budget==cpu"], ["sweep-status", "fig2", "budget=nope"]):
        assert main([*argv, "--results-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_sweep_status_shows_how_far_a_checkpointed_run_got(tmp_path: Path, capsys) -> None:
    from lipgnn.cli import main
    from lipgnn.store import checkpoint_file
    from lipgnn.store.checkpoint import save_checkpoint
    from lipgnn.sweep import expand_sweep

    overrides = ["budget=cpu", "variant=gat,gat_lip", "seed=0"]
    (first, _), (second, _) = sweep_status("fig2", tmp_path, overrides).rows
    planned = int(expand_sweep("fig2", overrides)[0].train.epochs)
    save_checkpoint(checkpoint_file(tmp_path, "fig2", first),
                    {"epoch": 7, "best_train": {"epoch": 7, "train": 0.9125, "test": 0.5}})
    # A file that is no lipgnn checkpoint (damaged, foreign, planted) is named as such, from its header alone.
    broken = checkpoint_file(tmp_path, "fig2", second)
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"PK\x03\x04 not a checkpoint")
    status = sweep_status("fig2", tmp_path, overrides)
    assert [s for _, s in status.rows] == ["missing", "missing"]  # no record yet: still to run
    assert status.resumable == {first: f"epoch 7 of {planned}, best train 91.25%"}
    assert main(["sweep-status", "fig2", *overrides, "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"missing   {first}  (checkpoint: epoch 7 of {planned}, best train 91.25%)" in out
    assert status.invalid[second].startswith(f"{broken} is not a valid lipgnn checkpoint")
    assert f"missing   {second}  (checkpoint not used: {broken} is not a valid lipgnn checkpoint" in out
    assert "2 missing (1 with a checkpoint to resume);" in out
