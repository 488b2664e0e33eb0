"""Nothing planted runs, nothing finished is lost: checkpoints read without unpickling, invalid ones moved aside,
records kept through a failing write, one process per run id, stray records out of every cell, bit-identical
resume on the fused path."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY_TREES, compose_cfg, interrupted_at, run_cli

from lipgnn.identity import run_id as run_id_for
from lipgnn.runs import checkpoint_path, run
from lipgnn.store import checkpoint_file, quarantine_dir, run_record_path
from lipgnn.store.checkpoint import InvalidCheckpoint, load_checkpoint, read_header

CKPT = [*TINY_TREES, "train.epochs=5", "train.checkpoint_every=2"]


class _Payload:
    """A pickle whose loading creates ``marker``: what a planted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.exec, (f"open({self.marker!r}, 'w').write('ran')",)


def _plant(path: Path, marker: Path, how: str) -> None:
    """A hostile file at a checkpoint path: a bare pickle, a torch.save'd one, or one behind a lipgnn header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "pickle":
        path.write_bytes(pickle.dumps({"model": _Payload(marker), "epoch": 2}))
    elif how == "torch":
        torch.save({"model": _Payload(marker), "epoch": 2}, path)
    else:  # the attacker knows the format: a valid header and checksum around a malicious state
        import hashlib
        import struct

        from lipgnn.store.checkpoint import FORMAT_VERSION, MAGIC

        buffer = io.BytesIO()
        torch.save({"model": _Payload(marker), "epoch": 2}, buffer)
        state = buffer.getvalue()
        head = json.dumps({"format": "lipgnn-checkpoint", "version": FORMAT_VERSION, "epoch": 2,
                           "git_commit": "x", "state_sha256": hashlib.sha256(state).hexdigest(),
                           "state_bytes": len(state)}).encode()
        path.write_bytes(MAGIC + struct.pack(">I", len(head)) + head + state)


@pytest.mark.parametrize("how", ["pickle", "torch", "header"])
def test_a_planted_checkpoint_never_runs_on_rerun_and_is_moved_aside(tmp_path: Path, capsys, how: str) -> None:
    marker = tmp_path / "pwned"
    cfg = compose_cfg([*CKPT, f"results_dir={tmp_path / 'res'}"])
    path = checkpoint_path(cfg, run_id_for(cfg))
    _plant(path, marker, how)
    with pytest.raises(InvalidCheckpoint):
        load_checkpoint(path, torch.device("cpu"))
    record = run(cfg)
    assert not marker.exists()
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "not a valid lipgnn checkpoint" in x]
    assert str(path) in line and "starting from epoch 0" in line
    (moved,) = quarantine_dir(tmp_path / "res", "default").iterdir()
    assert record["checkpoint_discarded"]["path"] == str(moved) and record["resumed_from"] is None
    assert record["status"] == "completed" and record["epochs_run"] == 5


def test_a_planted_checkpoint_never_runs_from_the_lipschitz_command(tmp_path: Path, capsys) -> None:
    from lipgnn.cli import main

    marker = tmp_path / "pwned"
    _plant(tmp_path / "weights.pt", marker, "torch")
    code = main(["lipschitz", "dataset=trees", "dataset.tree_depth=2", "dataset.num_trees=16", "depth=2",
                 "model.hidden=8", "--checkpoint", str(tmp_path / "weights.pt"), "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists()
    assert err.startswith("error: --checkpoint ") and "neither a lipgnn checkpoint nor a state dict" in err
    assert err.count("\n") == 1


def test_a_planted_checkpoint_never_runs_from_sweep_status(tmp_path: Path, capsys) -> None:
    from lipgnn.cli import main
    from lipgnn.sweep import sweep_status

    marker = tmp_path / "pwned"
    overrides = ["budget=cpu", "variant=gat", "seed=0"]
    (first, _), = sweep_status("fig2", tmp_path, overrides).rows
    _plant(checkpoint_file(tmp_path, "fig2", first), marker, "torch")
    assert main(["sweep-status", "fig2", *overrides, "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert not marker.exists()
    (line,) = [x for x in out.splitlines() if first in x]
    assert "not a valid lipgnn checkpoint" in line


def test_a_checkpoint_planted_during_a_run_never_runs_on_ctrl_c(tmp_path: Path, monkeypatch) -> None:
    from lipgnn.errors import RunInterrupted
    from lipgnn.train import faults

    marker = tmp_path / "pwned"
    cfg = compose_cfg([*CKPT, f"results_dir={tmp_path}"])
    path = checkpoint_path(cfg, run_id_for(cfg))

    def plant_then_press(run_id: str, epoch: int) -> None:
        if epoch == 3:
            _plant(path, marker, "torch")
            raise KeyboardInterrupt

    monkeypatch.setattr(faults, "maybe_kill", plant_then_press)
    with pytest.raises(RunInterrupted) as err:
        run(cfg)
    assert not marker.exists()
    assert "not a valid lipgnn checkpoint" in str(err.value) and "\n" not in str(err.value)


def test_a_truncated_checkpoint_is_named_moved_aside_and_the_run_starts_fresh(tmp_path: Path, monkeypatch,
                                                                              capsys) -> None:
    cfg = compose_cfg([*CKPT, f"results_dir={tmp_path}"])
    path = checkpoint_path(cfg, run_id_for(cfg))

    with interrupted_at(monkeypatch, 3), pytest.raises(Exception, match="interrupted"):
        run(cfg)
    whole = path.read_bytes()
    for cut in (10, len(whole) - 100):   # no header left; a header whose state was cut short
        path.write_bytes(whole[:cut])
        record = run(cfg)
        out = capsys.readouterr().out
        assert f"{path} is not a valid lipgnn checkpoint" in out and "moved it to" in out
        assert record["resumed_from"] is None and record["checkpoint_discarded"]["reason"].startswith(str(path))
        assert Path(record["checkpoint_discarded"]["path"]).read_bytes() == whole[:cut]  # kept, not deleted
        run_record_path(tmp_path, "default", run_id_for(cfg)).unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
    assert len(list(quarantine_dir(tmp_path, "default").iterdir())) == 2


def test_the_header_is_read_without_the_state(tmp_path: Path, monkeypatch) -> None:
    from lipgnn.store.checkpoint import checkpoint_progress, save_checkpoint

    assert read_header(tmp_path / "no-such-checkpoint.ckpt") is None
    path = tmp_path / "checkpoint.ckpt"
    save_checkpoint(path, {"model": {"w": torch.ones(2)}, "epoch": 7, "git_commit": "abc", "wall_time_s": 1.5,
                           "best_train": {"epoch": 7, "train": 0.5, "test": 0.25}})

    def no_unpickling(*args, **kwargs):
        raise AssertionError("the header must be read without loading the state")

    monkeypatch.setattr(torch, "load", no_unpickling)
    header = read_header(path)
    assert (header["epoch"], header["git_commit"], header["wall_time_s"]) == (7, "abc", 1.5)
    assert checkpoint_progress(path) == (7, {"epoch": 7, "train": 0.5, "test": 0.25})


def test_a_failing_record_write_keeps_the_result_and_a_rerun_writes_it_without_training(
        tmp_path: Path, monkeypatch, capsys) -> None:
    from lipgnn import store
    from lipgnn.errors import RecordNotWritten
    from lipgnn.train.trainer import Trainer

    cfg = compose_cfg([*CKPT, f"results_dir={tmp_path}"])
    target = run_record_path(tmp_path, "default", run_id_for(cfg))
    real = store._atomic_write_text

    def full_disk(path: Path, text: str) -> None:
        if path.parent == target.parent:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, text)

    with monkeypatch.context() as patch:
        patch.setattr(store, "_atomic_write_text", full_disk)
        with pytest.raises(RecordNotWritten) as err:
            run(cfg)
    message = str(err.value)
    assert "\n" not in message and "No space left on device" in message and str(target) in message
    kept = Path(message.split("kept at ")[1].split(":")[0])
    assert kept.is_file() and not target.exists()
    assert not [p for p in tmp_path.rglob("*.tmp")]                # no partial file anywhere
    trained = json.loads(kept.read_text())

    def no_training(*args, **kwargs):
        raise AssertionError("the kept result must be written without training again")

    monkeypatch.setattr(Trainer, "fit", no_training)
    record = run(cfg)
    assert "wrote the record kept at" in capsys.readouterr().out
    assert json.loads(target.read_text()) == trained and record["history"] == trained["history"]
    assert not kept.exists() and not checkpoint_path(cfg, run_id_for(cfg)).exists()


def test_when_the_checkpoint_folder_fails_too_the_result_goes_to_the_temp_folder(tmp_path: Path, monkeypatch) -> None:
    from lipgnn import store
    from lipgnn.errors import RecordNotWritten
    from lipgnn.store import pending

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    cfg = compose_cfg([*TINY_TREES, "train.epochs=2", f"results_dir={tmp_path / 'res'}"])
    real = store._atomic_write_text

    def vanished(path: Path, text: str) -> None:
        if str(path).startswith(str(tmp_path / "res")):
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        real(path, text)

    monkeypatch.setattr(store, "_atomic_write_text", vanished)
    with pytest.raises(RecordNotWritten, match="kept at .*tmp/lipgnn-pending/"):
        run(cfg)
    assert pending.take(cfg, run_id_for(cfg))["status"] == "completed"


def test_a_failure_never_replaces_a_finished_record(tmp_path: Path) -> None:
    from lipgnn.store import read_record, write_failure_record, write_record

    done = {"run_id": "r", "experiment": "e", "status": "completed", "config": {}}
    path = write_record(tmp_path, done)
    write_failure_record(tmp_path, {"run_id": "r", "experiment": "e", "config": {}}, RuntimeError("late"))
    assert read_record(path)["status"] == "completed"


def test_a_second_process_on_the_same_run_id_stops_in_one_line(tmp_path: Path) -> None:
    from filelock import FileLock

    from lipgnn.errors import RunInProgress
    from lipgnn.store import lock_file

    cfg = compose_cfg([*TINY_TREES, "train.epochs=2", f"results_dir={tmp_path}"])
    lock = FileLock(lock_file(tmp_path, "default", run_id_for(cfg)))
    with lock, pytest.raises(RunInProgress, match="is being run by another process") as err:
        # filelock is reentrant within a process: a fresh thread stands for the other process
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(run, cfg).result()
    assert "\n" not in str(err.value) and not list(tmp_path.rglob("*.json"))


_RACER = """
import sys
from conftest import TINY_TREES, compose_cfg
from lipgnn.errors import RunInProgress
from lipgnn.runs import run
results, start = sys.argv[1], sys.argv[2]
for seed in range(20):
    cfg = compose_cfg([*TINY_TREES, "train.epochs=4", "train.checkpoint_every=1", f"seed={seed}",
                       f"results_dir={results}"])
    try:
        record = run(cfg)
        print("RACE", seed, record["status"], bool(record.get("skipped")), flush=True)
    except RunInProgress:
        print("RACE", seed, "in-progress", True, flush=True)
"""


def test_two_processes_racing_on_twenty_run_ids_never_lose_a_record(tmp_path: Path) -> None:
    """Two launches of the same 20 runs (checkpoint every epoch) into one folder: every run ends completed,
    trained by exactly one process, and no failure record ever replaces a completed one."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    racers = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "res"), str(i)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [r.communicate(timeout=600) for r in racers]
    assert all(r.returncode == 0 for r in racers), [o[1][-2000:] for o in outputs]
    lines = [line.split()[1:] for out, _ in outputs for line in out.splitlines() if line.startswith("RACE ")]
    assert len(lines) == 40
    trained = [seed for seed, status, skipped in lines if status == "completed" and skipped == "False"]
    assert set(trained) == {str(s) for s in range(20)} and len(trained) == 20  # each trained once
    records = [json.loads(p.read_text()) for p in (tmp_path / "res" / "runs" / "default").glob("*.json")]
    assert len(records) == 20 and {r["status"] for r in records} == {"completed"}
    assert not list((tmp_path / "res" / "checkpoints").rglob("*.ckpt"))


def test_a_stray_record_with_the_best_validation_changes_no_table(tmp_path: Path) -> None:
    from lipgnn.results.engine import make_tables

    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "runs" / "table3", results / "runs" / "table3")
    before = {p.name: p.read_bytes() for p in make_tables(results, tmp_path / "before", names=("table3",))}
    source = next((results / "runs" / "table3").glob("gat-none-res-cora-L30-s0-*.json"))
    stray = json.loads(source.read_text())
    stray["config"]["train"]["epochs"] = 2   # experiment=table3 variant=gat_res depth=30 train.epochs=2
    stray["run_id"] = "gat-none-res-cora-L30-s0-0000000000"
    for point in ("best", "last"):
        stray[point].update({"val": 1.0, "test": 1.0, "train": 1.0})
    (results / "runs" / "table3" / f"{stray['run_id']}.json").write_text(json.dumps(stray))
    after = {p.name: p.read_bytes() for p in make_tables(results, tmp_path / "after", names=("table3",))}
    assert after == before


@pytest.mark.parametrize("variant", ["gat_lip", "gcn"])
def test_a_killed_fused_run_resumes_bit_identically(tmp_path: Path, data_root: Path, variant: str) -> None:
    """Kill after a checkpoint, resume: every metric of the record equals an uninterrupted run's, bit for bit
    (the fused path with Cora's CSR input encoder and dropout on)."""
    depth = 10 if variant == "gat_lip" else 2
    args = [f"variant={variant}", "dataset=cora", f"depth={depth}", "train.epochs=6", "train.checkpoint_every=1",
            "train.num_threads=1", "log.progress=false", "model.dropout=0.5", "experiment_name=x"]
    reference = run_cli([*args, "results_dir=ref"], tmp_path)
    assert reference.returncode == 0, reference.stderr
    killed = run_cli([*args, "results_dir=res"], tmp_path, env={"LIPGNN_FAULT": f"kill@{variant.replace('_', '-')}:2"})
    assert killed.returncode == -9
    resumed = run_cli([*args, "results_dir=res"], tmp_path)
    assert resumed.returncode == 0 and "resuming from epoch 2" in resumed.stdout
    (a,) = (tmp_path / "ref" / "runs" / "x").glob("*.json")
    (b,) = (tmp_path / "res" / "runs" / "x").glob("*.json")
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert rb["config"]["model"]["impl"] == "fused" and rb["sparse_input"] is True
    for key in ("history", "best", "last", "epochs_run", "status"):
        assert json.dumps(ra[key]) == json.dumps(rb[key]), key


def test_a_value_with_non_ascii_characters_is_told_to_be_quoted(tmp_path: Path) -> None:
    from lipgnn.errors import ConfigError
    from lipgnn.sweep import check_command_line

    folder = tmp_path / "résultats"
    with pytest.raises(ConfigError) as err:
        check_command_line([f"results_dir={folder}"])
    assert str(err.value) == (f"results_dir={folder}: the character 'é' needs quoting in an override; write "
                              f"results_dir=\"'{folder}'\" (single quotes inside double quotes, so the shell keeps "
                              "them)")
    check_command_line([f"results_dir='{folder}'"])   # the advice works


@pytest.mark.parametrize("argv", [["hydra.run.dir=/proc/lipgnn-x"],
                                  ["-m", "hydra.sweep.dir=/proc/lipgnn-x", "seed=0,1"]])
def test_an_unwritable_hydra_output_dir_is_one_line(tmp_path: Path, argv: list[str]) -> None:
    if not Path("/proc/self").exists():
        pytest.skip("needs Linux's /proc, where no folder can be made")
    result = run_cli([*argv, *TINY_TREES, "train.epochs=1", f"results_dir={tmp_path}"], tmp_path)
    key = argv[-1 if len(argv) == 1 else 1].split("=")[0]
    assert result.returncode == 2 and result.stderr == (
        f"error: {key}=/proc/lipgnn-x cannot be created or written (Hydra keeps its logs there); choose a writable "
        f"folder with {key}=<path>\n")
    assert not list(tmp_path.rglob("*.json"))


def test_a_short_record_stands_for_its_point_only_while_no_full_one_exists() -> None:
    import pandas as pd

    from lipgnn.results.grid import check_grid

    source = next((ROOT / "results" / "runs" / "table3").glob("gat-none-res-cora-L30-s0-*.json"))
    full = json.loads(source.read_text())["config"]
    short = json.loads(json.dumps(full))
    short["train"]["epochs"] = 2
    frame = pd.DataFrame({"config": [short], "experiment": ["table3"], "budget": ["cpu"]})
    assert check_grid(frame).in_grid.tolist() == [True]            # alone: its point's run, under budget
    frame = pd.DataFrame({"config": [short, full], "experiment": ["table3"] * 2, "budget": ["cpu"] * 2})
    assert check_grid(frame).in_grid.tolist() == [False, True]     # beside the full run: a stray
    odd = json.loads(json.dumps(full))
    odd["train"]["selection"] = "last"                              # a value the experiment file fixes
    frame = pd.DataFrame({"config": [odd], "experiment": ["table3"], "budget": ["cpu"]})
    assert check_grid(frame).in_grid.tolist() == [False]
