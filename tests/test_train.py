"""The trainer: accuracy on real data, records, divergence, determinism, checkpoint/resume, W&B offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import TINY_TREES, compose_cfg, run_cli

from lipgnn.identity import run_id as run_id_for
from lipgnn.runs import run

RECORD_KEYS = {"schema", "run_id", "experiment", "status", "config", "seed", "metric", "history", "best", "last",
               "epochs_run", "wall_time_s", "device", "versions", "git_commit", "info", "error"}


def test_two_layer_gcn_on_cora_reaches_a_sane_accuracy_and_writes_a_complete_record(
        tmp_path: Path, data_root: Path) -> None:
    cfg = compose_cfg(["model=gcn", "depth=2", "train.epochs=100", f"results_dir={tmp_path}",
                       "log.progress=false", "experiment_name=unit"])
    record = run(cfg)
    assert record["status"] == "completed"
    assert record["best"]["test"] > 0.6 and record["best"]["val"] > 0.6
    path = tmp_path / "runs" / "unit" / f"{record['run_id']}.json"
    on_disk = json.loads(path.read_text())
    assert RECORD_KEYS <= set(on_disk)
    assert on_disk["epochs_run"] == 100 and len(on_disk["history"]["test"]) == 100
    assert on_disk["best"]["val"] == max(on_disk["history"]["val"])
    assert on_disk["last"]["test"] == on_disk["history"]["test"][-1]
    assert on_disk["versions"]["torch"].startswith("2.") and on_disk["metric"] == "acc"
    assert on_disk["info"]["missing_rate"] == 0
    # model.impl=auto (the default) on CPU: Cora's bag-of-words features (1.3% non-zero) go through the
    # CSR encoder and GCN's layers are the fused ones; the stock path keeps the dense product.
    assert on_disk["sparse_input"] is True and on_disk["config"]["model"]["impl"] == "fused"


def test_the_stock_path_keeps_the_dense_encoder(tmp_path: Path, data_root: Path) -> None:
    cfg = compose_cfg(["model=gcn", "depth=2", "train.epochs=2", "model.impl=pyg", f"results_dir={tmp_path}",
                       "log.progress=false"])
    assert run(cfg)["sparse_input"] is False


def test_missing_rate_is_recorded(tmp_path: Path, data_root: Path) -> None:
    cfg = compose_cfg(["model=gcn", "depth=2", "train.epochs=2", "dataset.missing_rate=100",
                       f"results_dir={tmp_path}", "log.progress=false"])
    record = run(cfg)
    assert record["config"]["dataset"]["missing_rate"] == 100
    assert record["info"]["missing_rate"] == 100 and record["info"]["num_erased"] == 2708 - 140


def test_forced_divergence_is_recorded_with_best_so_far(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPGNN_FAULT", "nan@gat-none:3")
    cfg = compose_cfg([*TINY_TREES, "train.epochs=6", f"results_dir={tmp_path}"])
    record = run(cfg)
    assert record["status"] == "diverged"
    assert record["epochs_run"] == 3 and record["history"]["epoch"] == [1, 2]
    assert record["best"]["epoch"] in (1, 2) and "non-finite training loss" in record["error"]
    assert json.loads(next((tmp_path / "runs").rglob("*.json")).read_text())["status"] == "diverged"


def test_exploding_learning_rate_diverges_cleanly(tmp_path: Path) -> None:
    cfg = compose_cfg([*TINY_TREES, "model=gcn", "train.epochs=30", "train.lr=1e30", f"results_dir={tmp_path}"])
    record = run(cfg)
    assert record["status"] == "diverged"
    assert record["epochs_run"] < 30


def test_same_config_and_seed_give_identical_metrics(tmp_path: Path) -> None:
    args = [*TINY_TREES, "model=gat", "norm=lip", "model.dropout=0.2", "model.attn_dropout=0.2", "train.epochs=5"]
    first = run(compose_cfg([*args, f"results_dir={tmp_path / 'a'}"]))
    second = run(compose_cfg([*args, f"results_dir={tmp_path / 'b'}"]))
    assert first["history"] == second["history"]
    third = run(compose_cfg([*args, "seed=1", f"results_dir={tmp_path / 'c'}"]))
    assert third["history"]["loss"] != first["history"]["loss"]


def test_existing_record_is_skipped_unless_overwrite(tmp_path: Path) -> None:
    args = [*TINY_TREES, "train.epochs=2", f"results_dir={tmp_path}"]
    first = run(compose_cfg(args))
    again = run(compose_cfg(args))
    assert again.get("skipped") is True and again["wall_time_s"] == first["wall_time_s"]
    forced = run(compose_cfg([*args, "overwrite=true"]))
    assert not forced.get("skipped")


def test_run_id_is_stable_and_ignores_where_the_run_happens() -> None:
    a = compose_cfg(["model=gat", "depth=4", "results_dir=/x", "device=cpu"])
    b = compose_cfg(["model=gat", "depth=4", "results_dir=/y", "device=auto", "dataset.root=/elsewhere"])
    assert run_id_for(a) == run_id_for(b)
    assert run_id_for(a) != run_id_for(compose_cfg(["model=gat", "depth=4", "seed=1"]))
    assert run_id_for(a) != run_id_for(compose_cfg(["model=gat", "depth=4", "train.lr=0.001"]))
    # heads mean nothing to GCN: a grid over heads must not multiply its runs
    assert run_id_for(compose_cfg(["model=gcn", "model.heads=1"])) == run_id_for(
        compose_cfg(["model=gcn", "model.heads=8"]))


def test_grad_norms_are_recorded_per_layer_and_epoch(tmp_path: Path) -> None:
    cfg = compose_cfg([*TINY_TREES, "model=gat", "depth=4", "train.epochs=3", "log.grad_norms=true",
                       f"results_dir={tmp_path}"])
    norms = run(cfg)["history"]["grad_norms"]
    assert len(norms) == 3 and all(len(row) == 4 for row in norms)
    assert all(value > 0 for row in norms for value in row)


@pytest.mark.parametrize("impl, recorded", [("auto", "fused"), ("pyg", "pyg")])
def test_the_record_names_the_implementation_that_ran_under_the_same_run_id(tmp_path: Path, impl: str,
                                                                             recorded: str) -> None:
    cfg = compose_cfg([*TINY_TREES, "model=gat", "depth=2", "train.epochs=1", f"model.impl={impl}",
                       "device=cpu", f"results_dir={tmp_path}"])
    record = run(cfg)
    assert record["config"]["model"]["impl"] == recorded
    assert record["run_id"] == run_id_for(compose_cfg([*TINY_TREES, "model=gat", "depth=2", "train.epochs=1"]))


def test_killed_run_resumes_from_checkpoint_to_the_uninterrupted_result(tmp_path: Path) -> None:
    args = [*TINY_TREES, "model=gat", "norm=lip", "model.dropout=0.3", "train.epochs=6",
            "train.checkpoint_every=2"]
    reference = run(compose_cfg([*args, f"results_dir={tmp_path / 'ref'}"]))
    killed = run_cli([*args, "results_dir=res"], tmp_path, env={"LIPGNN_FAULT": "kill@gat-lip:3"})
    assert killed.returncode == -9
    assert not list((tmp_path / "res").rglob("*.json"))
    assert list((tmp_path / "res" / "checkpoints").rglob("checkpoint.ckpt"))
    resumed = run_cli([*args, "results_dir=res"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    record = json.loads(next((tmp_path / "res" / "runs").rglob("*.json")).read_text())
    assert record["resumed_from"] == 2
    assert record["history"] == reference["history"] and record["best"] == reference["best"]
    assert not list((tmp_path / "res" / "checkpoints").rglob("checkpoint.ckpt"))


def test_killed_fig5_run_resumes_with_its_plateau_and_stopping_state(tmp_path: Path) -> None:
    # Alon & Yahav's protocol keeps state beyond the optimiser (on-the-fly train accuracy, the plateau scheduler
    # stepped on it, the stopping rule's counter); a resumed run must continue all of it, bit for bit.
    args = ["experiment=fig5", "budget=cpu", "dataset.tree_depth=2", "variant=gat_lip", "train.epochs=8",
            "train.eval_every=1", "train.plateau_patience=1", "train.train_patience=2", "train.checkpoint_every=2",
            "model.hidden=8"]
    reference = run(compose_cfg([*args, f"results_dir={tmp_path / 'ref'}"]))
    assert len(reference["history"]["epoch"]) == 3   # the stopping rule ends it, after the kill point below
    killed = run_cli([*args, "results_dir=res"], tmp_path, env={"LIPGNN_FAULT": "kill@gat-lip:3"})
    assert killed.returncode == -9
    resumed = run_cli([*args, "results_dir=res"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    record = json.loads(next((tmp_path / "res" / "runs").rglob("*.json")).read_text())
    assert record["resumed_from"] == 2
    assert record["history"] == reference["history"] and record["best"] == reference["best"]
    assert record["best_train"] == reference["best_train"]


def test_wandb_offline_run_writes_its_metrics_locally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = compose_cfg([*TINY_TREES, "logger=wandb", "train.epochs=2", f"results_dir={tmp_path}",
                       "logger.project=lipgnn-test"])
    record = run(cfg)
    again = run(compose_cfg([*TINY_TREES, "logger=wandb", "train.epochs=2", f"results_dir={tmp_path}",
                             "logger.project=lipgnn-test", "overwrite=true"]))
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    # Each attempt is its own W&B run (a fresh id), named by the run id.
    assert len(runs) == 2 and runs[0].name.rsplit("-", 1)[1] != runs[1].name.rsplit("-", 1)[1]
    assert again["run_id"] == record["run_id"]
    runs = runs[:1]
    # wandb 0.31 keeps offline runs as one protobuf log (synced later by `wandb sync`); its values are
    # JSON-encoded, so what we logged can be checked byte for byte.
    (log_file,) = runs[0].glob("*.wandb")
    data = log_file.read_bytes()
    for key in ("lipgnn-test", "loss", "val_loss", "best_val", "epochs_run", "completed", "trees", "lr",
                record["run_id"]):
        assert key.encode() in data, key
    for value in (record["best"]["val"], record["history"]["loss"][0], record["history"]["loss"][1]):
        assert json.dumps(value).encode() in data


@pytest.mark.parametrize(("dataset", "variant", "metric"), [
    ("ogbn-arxiv", "gat_lip", "acc"), ("ogbn-proteins", "gt_lip", "rocauc")])
def test_ogb_datasets_train_end_to_end_from_files_in_ogbs_format(
        tmp_path: Path, dataset: str, variant: str, metric: str) -> None:
    from ogb_fixture import write_arxiv, write_proteins

    (write_arxiv if dataset == "ogbn-arxiv" else write_proteins)(tmp_path / "root")
    extra = ["dataset.num_parts=2"] if dataset == "ogbn-proteins" else []
    cfg = compose_cfg([f"dataset={dataset}", f"variant={variant}", "depth=2", "model.hidden=8", "train.epochs=3",
                       f"dataset.root={tmp_path / 'root'}", f"dataset.cache_dir={tmp_path / 'cache'}",
                       "dataset.download=false", f"results_dir={tmp_path / 'res'}", "log.progress=false", *extra])
    record = run(cfg)
    assert record["status"] == "completed" and record["metric"] == metric
    assert record["epochs_run"] == 3
    assert all(0.0 <= record["history"][split][-1] <= 1.0 for split in ("train", "val", "test"))


# ------------------------------------------------------------------ resume, overwrite, interruption (#16)
def _interrupt_at(monkeypatch: pytest.MonkeyPatch, epoch: int) -> None:
    """Ctrl-C after ``epoch`` (after that epoch's checkpoint), like a user pressing it mid-run."""
    from lipgnn.train import faults

    def press(run_id: str, at: int) -> None:
        if at == epoch:
            raise KeyboardInterrupt

    monkeypatch.setattr(faults, "maybe_kill", press)


CKPT = [*TINY_TREES, "train.epochs=5", "train.checkpoint_every=2"]


def test_ctrl_c_says_whether_the_run_is_checkpointed_and_how_to_resume(tmp_path: Path, monkeypatch) -> None:
    from lipgnn.errors import RunInterrupted

    _interrupt_at(monkeypatch, 3)
    with pytest.raises(RunInterrupted, match=r"checkpointed at epoch 2; run the same command again to resume"):
        run(compose_cfg([*CKPT, f"results_dir={tmp_path}"]))
    with pytest.raises(RunInterrupted, match=r"was not checkpointed \(train.checkpoint_every=0\)"):
        run(compose_cfg([*TINY_TREES, "train.epochs=5", f"results_dir={tmp_path / 'b'}"]))
    assert not list(tmp_path.rglob("*.json"))  # an interrupted run leaves no record


def test_resume_names_epoch_and_commit_and_wall_time_covers_every_segment(tmp_path: Path, monkeypatch,
                                                                          capsys) -> None:
    from lipgnn.runs import checkpoint_path
    from lipgnn.store.checkpoint import load_checkpoint

    cfg = compose_cfg([*CKPT, f"results_dir={tmp_path}"])
    with monkeypatch.context() as patch:
        _interrupt_at(patch, 3)
        with pytest.raises(Exception, match="interrupted"):
            run(cfg)
    saved = load_checkpoint(checkpoint_path(cfg, run_id_for(cfg)), torch.device("cpu"))
    assert saved["epoch"] == 2 and saved["git_commit"] and saved["wall_time_s"] > 0
    record = run(cfg)
    out = capsys.readouterr().out
    assert f"resuming from epoch 2 (checkpoint written by commit {saved['git_commit']}" in out
    assert record["resumed_from"] == 2 and record["wall_time_s"] >= saved["wall_time_s"]


@pytest.mark.parametrize("fresh", ["overwrite=true", "resume=false"])
def test_overwrite_and_resume_false_start_from_scratch(tmp_path: Path, monkeypatch, capsys, fresh: str) -> None:
    cfg = compose_cfg([*CKPT, f"results_dir={tmp_path}"])
    with monkeypatch.context() as patch:
        _interrupt_at(patch, 3)
        with pytest.raises(Exception, match="interrupted"):
            run(cfg)
    record = run(compose_cfg([*CKPT, f"results_dir={tmp_path}", fresh]))
    assert record["resumed_from"] is None and "deleting its checkpoint and starting from epoch 0" in \
        capsys.readouterr().out


def test_a_checkpoint_of_other_code_is_refused_unless_allowed(tmp_path: Path, monkeypatch) -> None:
    from lipgnn.errors import ConfigError
    from lipgnn.runs import layer as run_module

    cfg = compose_cfg([*CKPT, f"results_dir={tmp_path}"])
    with monkeypatch.context() as patch:
        _interrupt_at(patch, 3)
        with pytest.raises(Exception, match="interrupted"):
            run(cfg)
    monkeypatch.setattr(run_module, "loaded_commit", lambda: "0000000-other-code")
    with pytest.raises(ConfigError, match=r"written by commit .* but this code is 0000000-other-code: rerun with "
                                          r"allow_code_change=true"):
        run(cfg)
    record = run(compose_cfg([*CKPT, f"results_dir={tmp_path}", "allow_code_change=true"]))
    assert record["resumed_from"] == 2


def test_unwritable_results_dir_is_one_line_before_training(tmp_path: Path) -> None:
    from lipgnn.errors import ConfigError

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"results_dir=.*a-file/res is not writable") as err:
        run(compose_cfg([*TINY_TREES, f"results_dir={blocker}/res"]))
    assert "\n" not in str(err.value)


def test_a_diverged_run_prints_its_reason(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LIPGNN_FAULT", "nan@gat-none:1")
    run(compose_cfg([*TINY_TREES, "train.epochs=3", f"results_dir={tmp_path}"]))
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("[diverged]") and "non-finite training loss (nan) at epoch 1" in line
    assert "no evaluated epoch before" in line and "None" not in line


def test_num_threads_auto_shares_the_cores_between_parallel_jobs(monkeypatch) -> None:
    from lipgnn import config

    monkeypatch.setattr(config, "physical_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert config.resolve_threads("auto", 1) == 8 and config.resolve_threads("auto", 3) == 2
    assert config.resolve_threads("auto", 16) == 1 and config.resolve_threads(3, 4) == 3
    assert compose_cfg().train.num_threads == "auto"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a machine-wide cap wins
    assert config.resolve_threads("auto", 1) == 1


def test_the_trainers_adam_is_torchs_fused_kernel_with_the_same_updates() -> None:
    from lipgnn.train.trainer import adam

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(3))]
    reference = [torch.nn.Parameter(p.detach().clone()) for p in params]
    start = [p.detach().clone() for p in params]
    ours, plain = adam(params, lr=0.01, weight_decay=5e-4), torch.optim.Adam(reference, lr=0.01, weight_decay=5e-4)
    assert ours.defaults["fused"] is True
    for _ in range(5):
        for group, opt in ((params, ours), (reference, plain)):
            opt.zero_grad()
            sum((p ** 2).sum() for p in group).backward()
            opt.step()
    for a, b, a0 in zip(params, reference, start, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        assert (a - a0).abs().min() > 0.01  # five steps of lr 0.01 moved every entry


def test_a_tied_validation_epoch_keeps_the_earlier_best_and_does_not_reset_the_patience(monkeypatch) -> None:
    """The best-validation rule (trainer docstring): epoch 3 ties epoch 2's validation metric; the kept metrics
    stay epoch 2's and ``early_stopping=3`` stops at epoch 5 (3 evaluations after epoch 2). Taking the later tie
    (``>=``) would keep epoch 3 and train to epoch 6."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from lipgnn.train.trainer import Trainer

    vals = [0.5, 0.7, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6]
    cfg = OmegaConf.create({"epochs": len(vals), "lr": 0.01, "weight_decay": 0.0, "scheduler": "none",
                            "eval_every": 1, "early_stopping": 3, "checkpoint_every": 0, "grad_clip": 0.0})
    trainer = Trainer(cfg, device=torch.device("cpu"), seed=0, progress=False)
    calls = iter(range(len(vals)))

    def evaluate(model, task):
        i = next(calls)
        return {"train": 0.9, "val": vals[i], "test": i / 10}, 1.0

    monkeypatch.setattr(trainer, "_train_epoch", lambda *args, **kwargs: (0.5, None))
    monkeypatch.setattr(trainer, "_evaluate", evaluate)
    result = trainer.fit(torch.nn.Linear(2, 2), SimpleNamespace(spec=SimpleNamespace(multilabel=False)))
    assert result.best["epoch"] == 2 and result.best["test"] == 0.1
    assert result.epochs_run == 5
