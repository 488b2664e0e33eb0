"""Sweeps on a real SLURM cluster: submit, time out, get preempted, resume, be cancelled, fail, finish.

The tests marked ``slurm`` run ``python train.py -m … hydra/launcher=slurm_cpu`` against the one-node cluster
of ``scripts/slurm_local.sh`` (CI starts it before the suite) and are skipped, with one line saying so, when it
is not up. They never submit to any other cluster: SLURM_CONF is the local cluster's. A requeued job waits
about two minutes in SLURM's BeginTime; the tests release it at once (``scontrol update StartTime=now``).
The first tests need no cluster: the job-state watcher that replaces ``sacct`` where it has no accounting.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import DATA_ROOT, ROOT, TINY_TREES, files_under, run_cli

from lipgnn.store import checkpoint_file

SCRIPT = ROOT / "scripts" / "slurm_local.sh"
CHECKPOINT = checkpoint_file(".", "experiment", "run").name  # the checkpoint's file name in a run's folder
LAUNCHER = ["hydra/launcher=slurm_cpu", "hydra.launcher.mem_gb=1"]
# Record fields that legitimately differ between two runs of one configuration.
RUN_TIMING = ("wall_time_s", "resumed_from")
# About 20 s of training on one core (200 epochs x 0.1 s), checkpointed every 5 epochs.
RESUMABLE = ["dataset=cora", "model=gat", "depth=4", "model.hidden=256", "train.epochs=200",
             "train.checkpoint_every=5", "train.num_threads=1", "log.progress=false", "results_dir=res",
             "experiment_name=resume"]


# ------------------------------------------------------------------------------------- without a cluster
def _fake_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **scripts: str) -> Path:
    """Put executables named after ``scripts``' keys (bodies: their values) first on PATH; returns a file
    that collects their command lines."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{body}\n')
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return calls


NO_ACCOUNTING = "echo 'Slurm accounting storage is disabled' >&2; exit 1"


def test_without_accounting_job_states_come_from_squeue_with_one_warning(tmp_path: Path, monkeypatch,
                                                                           caplog) -> None:
    from lipgnn.slurm import install_queue_watcher

    # 7_1 is still pending in an array range, 7_2 is running, 8_0 was cancelled, 9_0 the controller forgot.
    calls = _fake_commands(tmp_path, monkeypatch, sacct=NO_ACCOUNTING, squeue=(
        "printf '7_[1,3]|PENDING\\n7_2|RUNNING\\n8_0|CANCELLED\\n7_4|REQUEUE_HOLD\\n'"))
    watcher = install_queue_watcher()
    for job in ("7_1", "7_2", "7_3", "7_4", "8_0", "9_0"):
        watcher.register_job(job)
    for _ in range(3):
        watcher.update()
    states = {job: watcher.get_state(job, mode="cache") for job in ("7_1", "7_2", "7_3", "7_4", "8_0", "9_0")}
    assert states == {"7_1": "PENDING", "7_2": "RUNNING", "7_3": "PENDING", "7_4": "PENDING",
                      "8_0": "CANCELLED", "9_0": "ENDED"}
    assert not watcher.is_done("7_4", mode="cache") and watcher.is_done("9_0", mode="cache")
    warnings = [r.getMessage() for r in caplog.records if "sacct" in r.getMessage()]
    assert warnings == ["sacct cannot report job states here (Slurm accounting storage is disabled): reading "
                        "them from squeue instead"]
    assert "--jobs=7,8,9" in calls.read_text()


def test_a_controller_that_does_not_answer_leaves_states_unknown(tmp_path: Path, monkeypatch) -> None:
    from lipgnn.slurm import install_queue_watcher

    # "Invalid job id" means every job asked about has been forgotten (ended); any other error means nothing.
    _fake_commands(tmp_path, monkeypatch, sacct=NO_ACCOUNTING,
                   squeue="echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1")
    watcher = install_queue_watcher()
    watcher.register_job("5_0")
    watcher.update()
    assert watcher.get_state("5_0", mode="cache") == "UNKNOWN" and not watcher.is_done("5_0", mode="cache")
    (tmp_path / "bin" / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id "
                                             "specified' >&2; exit 1\n")
    watcher.update()
    assert watcher.get_state("5_0", mode="cache") == "ENDED"


def test_with_accounting_sacct_is_read_as_before(tmp_path: Path, monkeypatch, caplog) -> None:
    from lipgnn.slurm import install_queue_watcher

    calls = _fake_commands(tmp_path, monkeypatch, sacct="printf 'JobID|State|NodeList\\n3_0|COMPLETED|n1\\n'",
                           squeue="exit 1")
    watcher = install_queue_watcher()
    watcher.register_job("3_0")
    watcher.update()
    assert watcher.get_state("3_0", mode="cache") == "COMPLETED"
    assert "squeue" not in calls.read_text() and not caplog.records


# ------------------------------------------------------------------------------------------ the cluster
def _slurm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), env={**os.environ, **env}, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def cluster() -> dict[str, str]:
    """The environment that points SLURM's commands at the local cluster; skips when it is not up."""
    if shutil.which("sbatch") is None:
        pytest.skip("no SLURM here (scripts/slurm_local.sh up installs and starts a one-node cluster as root)")
    out = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip("the local SLURM cluster is not up (start it with scripts/slurm_local.sh up)")
    return {"SLURM_CONF": out.stdout.strip().removeprefix("export SLURM_CONF=")}


class Sweep:
    """``python train.py -m <args>`` on the cluster, in the background, in ``cwd``; the jobs it submitted."""

    def __init__(self, cwd: Path, args: list[str], env: dict[str, str], experiment: str) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.env, self.log = env, cwd / "sweep.log"
        self.requeued: dict[str, float] = {}  # job -> when it was first seen waiting after a requeue
        self.submitit = cwd / "res" / "multirun" / experiment / ".submitit"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "-m", *args, *LAUNCHER], cwd=cwd,
                                         env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)

    def jobs(self) -> list[str]:
        """Job ids (``<job>_<task>`` of an array, ``<job>`` alone for a one-job sweep), from submitit's folders."""
        names = [p.name for p in self.submitit.glob("*") if p.is_dir()] if self.submitit.is_dir() else []
        arrays = {name.split("_")[0] for name in names if "_" in name}
        return sorted(name for name in names if "_" in name or name not in arrays)

    def states(self) -> dict[str, tuple[str, str]]:
        """job id -> (state, reason) of the sweep's jobs the controller still knows."""
        mains = sorted({job.split("_")[0] for job in self.jobs()})
        if not mains:
            return {}
        out = _slurm(self.env, "squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%r",
                     f"--jobs={','.join(mains)}")
        rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 2]
        return {job: (state, reason) for job, state, reason in rows}

    def release_requeued(self) -> None:
        """Start the requeued jobs rather than after SLURM's two-minute requeue delay. Not in the second of
        the requeue: slurmd refuses a job whose credential is from the second its previous run's was revoked in;
        and not with a start time in the future, which waits for the scheduler's next periodic pass."""
        now = time.monotonic()
        held = {job for job, (state, reason) in self.states().items() if state == "PENDING" and reason == "BeginTime"}
        self.requeued = {job: self.requeued.get(job, now) for job in held}
        for job, since in self.requeued.items():
            if now - since >= 2:
                _slurm(self.env, "scontrol", "update", f"JobId={job}", "StartTime=now")

    def wait(self, timeout: float, tick: Callable[[], None] | None = None) -> int:
        """Wait for the sweep command to end, releasing requeued jobs; returns its exit status."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the sweep still ran after {timeout:.0f}s:\n{self.output()[-3000:]}")
            self.release_requeued()
            if tick is not None:
                tick()
            time.sleep(0.5)
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        mains = sorted({job.split("_")[0] for job in self.jobs()})
        if mains:
            _slurm(self.env, "scancel", *mains)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def job_logs(self, job: str | None = None) -> str:
        """What the jobs (or one job) printed, across their requeues."""
        pattern = f"{job}/*_log.*" if job else "*/*_log.*"
        return "".join(p.read_text(errors="replace") for p in sorted(self.submitit.glob(pattern)))


@pytest.fixture
def sweeps():
    """Sweeps started by a test; whatever still runs at its end is stopped and its jobs cancelled."""
    started: list[Sweep] = []

    def start(*args, **kwargs) -> Sweep:
        started.append(Sweep(*args, **kwargs))
        return started[-1]

    yield start
    for sweep in started:
        sweep.stop()


def _records(folder: Path) -> dict[str, dict]:
    """run_id -> record of every (completed, diverged or failed) record under ``folder``."""
    out = {}
    for path in files_under(folder / "res" / "runs"):
        record = json.loads(path.read_text())
        out[record["run_id"]] = record
    return out


def _outcome(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in RUN_TIMING}


@pytest.fixture(scope="module")
def uninterrupted(cluster, tmp_path_factory) -> Callable[[], dict]:
    """The RESUMABLE run trained in one go on this machine (started in the background at first use, so that
    it trains while the cluster does): call the result to wait for its record."""
    if DATA_ROOT is None:
        pytest.skip("Planetoid files absent (set LIPGNN_DATA to a folder holding Cora/raw/...)")
    folder = tmp_path_factory.mktemp("uninterrupted")
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *RESUMABLE], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def record() -> dict:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
        (only,) = _records(folder).values()
        return only

    yield record
    if proc.poll() is None:
        proc.kill()


@pytest.mark.slurm
def test_a_sweep_on_slurm_gives_the_local_launchers_records(cluster, sweeps, tmp_path: Path) -> None:
    args = [*TINY_TREES, "model=gcn,gat", "seed=0,1", "train.epochs=4", "train.num_threads=1", "results_dir=res",
            "experiment_name=grid"]
    slurm = sweeps(tmp_path / "slurm", args, cluster, "grid")
    local = run_cli(["-m", *args, "hydra/launcher=local", "hydra.launcher.n_jobs=1"], tmp_path)
    assert local.returncode == 0, local.stderr
    assert slurm.wait(180) == 0, slurm.output()
    on_slurm, here = _records(tmp_path / "slurm"), _records(tmp_path)
    assert len(on_slurm) == 4 and sorted(on_slurm) == sorted(here)
    assert {r["status"] for r in on_slurm.values()} == {"completed"}
    for run_id, record in on_slurm.items():
        assert _outcome(record) == _outcome(here[run_id]), run_id
    # One line about sacct for the whole sweep (the cluster keeps no accounting), however long it polled.
    assert slurm.output().count("sacct") == 1 and "Bypassing" not in slurm.output()
    assert len(slurm.jobs()) == 4


def _last_time_limit_check(env: dict[str, str], timeout: float = 40) -> float:
    """When the controller last checked the jobs' time limits (``time.time()`` scale): its log says so at
    SlurmctldDebug=debug2, as scripts/slurm_local.sh configures it. Waits for the first check of a fresh one."""
    log = Path(env["SLURM_CONF"]).parent / "slurmctld.log"
    deadline = time.monotonic() + timeout
    while True:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 1_000_000))
            lines = [line for line in f.read().decode(errors="replace").splitlines()
                     if "Testing job time limits" in line]
        if lines:
            stamp = lines[-1][1:lines[-1].index("]")]
            return datetime.datetime.fromisoformat(stamp).timestamp()  # the log's local time, as time.time()
        if time.monotonic() > deadline:
            pytest.fail(f"no time-limit check in {log} (SlurmctldDebug=debug2 logs them); restart the cluster "
                        "with scripts/slurm_local.sh down && scripts/slurm_local.sh up")
        time.sleep(1)


@pytest.mark.slurm
def test_a_job_past_its_time_limit_checkpoints_requeues_and_resumes(cluster, sweeps, uninterrupted,
                                                                     tmp_path: Path) -> None:
    # SLURM signals a job at its first time-limit check (one every 30 s) after start + timeout - signal_delay -
    # 30 s: with timeout_min=1 and signal_delay_s=29, the first check after the job's first second. The job is
    # submitted held and released 12-18 s before a check: it is signalled after a checkpoint and before it ends,
    # and its resumed part has the next 30 s to finish (or is signalled again, and requeued again).
    sweep = sweeps(tmp_path, [*RESUMABLE, "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=29",
                              "hydra.launcher.max_num_timeout=20", "+hydra.launcher.additional_parameters.hold=true"],
                   cluster, "resume")
    deadline = time.monotonic() + 120
    while not any(reason == "JobHeldUser" for _, reason in sweep.states().values()):
        assert sweep.proc.poll() is None and time.monotonic() < deadline, sweep.output()
        time.sleep(0.5)
    last = _last_time_limit_check(cluster)
    next_check = last + 30 * (1 + (time.time() - last) // 30)
    if next_check - time.time() < 12:
        next_check += 30
    time.sleep(max(0.0, next_check - time.time() - 15))
    (job,) = sweep.jobs()
    assert _slurm(cluster, "scontrol", "release", job).returncode == 0
    assert sweep.wait(300) == 0, sweep.output()
    logs = sweep.job_logs()
    assert "this job is timed-out" in logs and "Requeued job" in logs, logs[-3000:]
    (record,) = _records(tmp_path).values()
    assert record["status"] == "completed" and record["resumed_from"] >= 5  # from a checkpoint, not epoch 0
    assert f"resuming from epoch {record['resumed_from']}" in logs
    assert _outcome(record) == _outcome(uninterrupted())


@pytest.mark.slurm
def test_a_preempted_job_is_requeued_and_resumes(cluster, sweeps, uninterrupted, tmp_path: Path) -> None:
    sweep = sweeps(tmp_path, RESUMABLE, cluster, "resume")
    checkpoint = tmp_path / "res" / "checkpoints" / "resume"
    preempted: list[str] = []

    def preempt_after_a_checkpoint() -> None:
        if not preempted and list(checkpoint.glob(f"*/{CHECKPOINT}")):
            (job,) = sweep.jobs()
            assert _slurm(cluster, "scontrol", "requeue", job).returncode == 0
            preempted.append(job)

    assert sweep.wait(300, tick=preempt_after_a_checkpoint) == 0, sweep.output()
    assert preempted
    (record,) = _records(tmp_path).values()
    assert record["status"] == "completed" and record["resumed_from"] >= 5
    assert f"resuming from epoch {record['resumed_from']}" in sweep.job_logs()
    assert _outcome(record) == _outcome(uninterrupted())


@pytest.mark.slurm
def test_a_cancelled_job_is_missing_and_a_relaunch_runs_only_it(cluster, sweeps, data_root, tmp_path: Path,
                                                                capsys) -> None:
    from lipgnn.cli import main

    # A declared experiment (fig2), so that sweep-status knows the grid; made small from the command line.
    grid = ["budget=cpu", "variant=gat", "seed=0,1", "depth=4", "model.hidden=256", "train.epochs=80",
            "train.checkpoint_every=5", "train.num_threads=1", "log.grad_norms=false"]
    args = ["experiment=fig2", *grid, "log.progress=false", "results_dir=res"]
    sweep = sweeps(tmp_path, args, cluster, "fig2")
    checkpoints = tmp_path / "res" / "checkpoints" / "fig2"
    cancelled: list[str] = []

    def cancel_seed_1_after_a_checkpoint() -> None:
        if not cancelled and list(checkpoints.glob(f"*-s1-*/{CHECKPOINT}")):
            job = sweep.jobs()[1]  # the array follows the sweep's order: seed 0, seed 1
            assert _slurm(cluster, "scancel", job).returncode == 0
            cancelled.append(job)

    assert sweep.wait(240, tick=cancel_seed_1_after_a_checkpoint) != 0
    assert cancelled and "CANCELLED" in sweep.output()
    (done,) = _records(tmp_path).values()
    assert done["seed"] == 0 and done["status"] == "completed"
    done_mtime = next((tmp_path / "res" / "runs").rglob("*.json")).stat().st_mtime_ns

    assert main(["sweep-status", "fig2", *grid, "--results-dir", str(tmp_path / "res")]) == 0
    status = capsys.readouterr().out
    match = re.search(r"missing +(\S+-s1-\S+) +\(checkpoint: epoch (\d+) of 80\)", status)
    assert match and "1 done, 0 diverged, 0 failed, 1 missing (1 with a checkpoint to resume)" in status, status

    relaunch = sweeps(tmp_path, args, cluster, "fig2")
    assert relaunch.wait(240) == 0, relaunch.output()
    records = _records(tmp_path)
    assert records[match.group(1)]["status"] == "completed"
    assert records[match.group(1)]["resumed_from"] == int(match.group(2))
    assert next(p for p in (tmp_path / "res" / "runs").rglob("*-s0-*.json")).stat().st_mtime_ns == done_mtime
    # The finished job of the relaunch skipped its run; only the cancelled one trained.
    new_jobs = [job for job in relaunch.jobs() if job.split("_")[0] != cancelled[0].split("_")[0]]
    assert "skipped" in relaunch.job_logs(new_jobs[0]) and "[completed]" in relaunch.job_logs(new_jobs[1])


@pytest.mark.slurm
def test_a_failing_job_leaves_a_failure_record_and_the_others_finish(cluster, sweeps, tmp_path: Path) -> None:
    args = [*TINY_TREES, "seed=0,1,2", "train.epochs=3", "train.num_threads=1", "results_dir=res",
            "experiment_name=faults"]
    sweep = sweeps(tmp_path, args, {**cluster, "LIPGNN_FAULT": "raise@-s1-"}, "faults")
    assert sweep.wait(180) != 0  # the sweep says that a job failed
    records = {r["seed"]: r for r in _records(tmp_path).values()}
    assert records[0]["status"] == records[2]["status"] == "completed"
    assert records[1]["status"] == "failed" and "injected fault" in records[1]["error"]
    assert len(sweep.jobs()) == 3 and "injected fault" in sweep.output()
