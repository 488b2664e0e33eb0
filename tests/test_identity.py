"""Run identity (lipgnn.identity) and the record-id migration (scripts/migrate_run_ids.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, compose_cfg
from omegaconf import OmegaConf

from lipgnn.identity import config_key, identity_config, run_id


def test_keys_that_do_not_change_the_numbers_stay_out_of_the_id() -> None:
    base = compose_cfg(["model=gat", "norm=lip", "depth=4"])
    same = compose_cfg(["model=gat", "norm=lip", "depth=4", "model.impl=fused", "train.num_threads=3",
                        "log.grad_norms=true", "results_dir=/elsewhere", "overwrite=true", "resume=false",
                        "budget=cpu", "logger=wandb", "train.checkpoint_every=5"])
    assert run_id(base) == run_id(same) and config_key(base) == config_key(same)
    assert run_id(base) != run_id(compose_cfg(["model=gat", "norm=lip", "depth=4", "norm.formula=reference"]))
    assert config_key(base) == config_key(compose_cfg(["model=gat", "norm=lip", "depth=4", "seed=3"]))
    assert run_id(base) != run_id(compose_cfg(["model=gat", "norm=lip", "depth=4", "seed=3"]))


def test_keys_a_model_or_split_ignores_stay_out() -> None:
    assert run_id(compose_cfg(["model=gcn", "model.heads=8", "model.attn_dropout=0.5"])) == run_id(
        compose_cfg(["model=gcn"]))
    assert run_id(compose_cfg(["model=gat", "model.heads=8"])) != run_id(compose_cfg(["model=gat"]))
    assert run_id(compose_cfg(["dataset.train_fraction=0.5"])) == run_id(compose_cfg([]))
    assert run_id(compose_cfg(["dataset.split=random", "dataset.train_fraction=0.5"])) != run_id(
        compose_cfg(["dataset.split=random"]))


def test_an_old_record_keeps_its_identity() -> None:
    """A record written before the new keys existed (no layer_norm/activation/..., norm.variant, integer
    floats) has the same id as the config the current code composes for it."""
    new = compose_cfg(["model=gt", "norm=lip", "depth=10", "norm.formula=reference"])
    old = OmegaConf.to_container(new, resolve=True)
    for key in ("layer_norm", "activation", "nonlocal", "score", "tie_qk"):
        old["model"].pop(key)
    for key in ("split", "train_per_class", "train_fraction", "val_fraction", "test_fraction"):
        old["dataset"].pop(key)
    old["norm"]["variant"] = old["norm"].pop("formula")
    old["dataset"]["missing_rate"] = 0
    old["norm"]["alpha"] = 1
    old["log"].pop("energy")
    old.pop("resume")
    assert run_id(old) == run_id(new) and config_key(old) == config_key(new)
    assert identity_config(old) == identity_config(new)


def _record(config: dict, rid: str) -> dict:
    return {"schema": 1, "run_id": rid, "experiment": "exp", "status": "completed", "config": config,
            "seed": config["seed"], "best": {}, "last": {}, "history": {}}


def _migrate(results: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "migrate_run_ids.py"), "--results-dir",
                           str(results)], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_migration_renames_updates_is_idempotent_and_refuses_duplicates(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "exp"
    folder.mkdir(parents=True)
    configs = [OmegaConf.to_container(compose_cfg(["model=gat", "norm=lip", f"seed={s}"]), resolve=True)
               for s in (0, 1)]
    for config in configs:
        config["norm"]["variant"] = config["norm"].pop("formula")  # as the pre-rename code wrote it
    for seed, config in enumerate(configs):
        old = f"gat-lip-cora-L2-s{seed}-oldhash"
        (folder / f"{old}.json").write_text(json.dumps(_record(config, old)))
    # Two records that are the same run under the new identity (they differ only in model.impl).
    dup = [dict(configs[0], seed=5, model={**configs[0]["model"], "impl": impl}) for impl in ("pyg", "fused")]
    (folder / "dup-a.json").write_text(json.dumps(_record(dup[0], "dup-a")))
    (folder / "dup-b.json").write_text(json.dumps(_record(dup[1], "dup-b")))

    first = _migrate(tmp_path)
    assert first.returncode == 1 and "duplicate: " in first.stderr and "dup-a.json" in first.stderr
    names = sorted(p.name for p in folder.glob("*.json"))
    expected = {run_id(configs[0]) + ".json", run_id(configs[1]) + ".json"}
    assert expected <= set(names) and {"dup-a.json", "dup-b.json"} <= set(names) and len(names) == 4
    record = json.loads((folder / f"{run_id(configs[0])}.json").read_text())
    assert record["run_id"] == run_id(configs[0]) and record["config"]["norm"]["formula"] == "paper"
    assert "variant" not in record["config"]["norm"]
    assert "rename -> " in first.stdout
    (folder / "dup-b.json").unlink()
    second = _migrate(tmp_path)
    assert second.returncode == 0, second.stderr
    third = _migrate(tmp_path)
    assert "changed 0 (0 renamed)" in third.stdout and third.returncode == 0


def test_committed_records_are_found_by_the_composed_grid() -> None:
    """Keys added to the schema later must not move the ids of records already committed: the jobs the
    current code composes for a slice of Table 3's CPU grid find their committed records."""
    from lipgnn.sweep import sweep_status

    status = sweep_status("table3", ROOT / "results",
                          ["budget=cpu", "dataset=cora", "depth=15", "variant=gat_lip", "train.lr=0.005"])
    assert len(status.rows) == 10  # dropout x 5 seeds
    assert [state for _, state in status.rows] == ["completed"] * 10, status.rows


def test_energy_runner_records_migrate_to_the_runner_id(tmp_path: Path) -> None:
    """gh_energy records carry the energy runner's id (training identity + energy options): the migration
    renames a stale one to exactly what the runner computes, so the runner finds it and skips the unit."""
    from lipgnn.runs.kinds.energy import energy_id as kind_energy_id
    from lipgnn.runs.kinds.energy import energy_options

    cfg = compose_cfg(["experiment=gh_energy", "dataset=cora", "variant=san_preln", "depth=2", "model.init=xavier"])
    config = OmegaConf.to_container(cfg, resolve=True)
    config["energy"] = {"features": "raw"}
    folder = tmp_path / "runs" / "gh_energy"
    folder.mkdir(parents=True)
    record = {**_record(config, "san-preln-xavier-cora-raw-L2-s0-stale"), "experiment": "gh_energy"}
    (folder / "san-preln-xavier-cora-raw-L2-s0-stale.json").write_text(json.dumps(record))
    assert _migrate(tmp_path).returncode == 0
    energy_id = kind_energy_id(cfg, energy_options(cfg))
    assert [p.stem for p in folder.glob("*.json")] == [energy_id]
    assert energy_id != run_id(config)  # an energy measurement's id is not its training run's


def test_every_committed_record_keeps_its_id() -> None:
    """Each kind's id function reproduces each committed record's id from its stored config: training runs, the
    energy kind's measurements (its options) and the kim kind's units."""
    from lipgnn.lipschitz.experiments import EXPERIMENTS
    from lipgnn.runs.kinds.energy import energy_id
    from lipgnn.runs.kinds.kim import unit_id

    kinds: dict[str, int] = {"train": 0, "energy": 0, "unit": 0}
    for path in sorted((ROOT / "results" / "runs").rglob("*.json")):
        record = json.loads(path.read_text())
        config, experiment = record["config"], record["experiment"]
        if experiment in EXPERIMENTS:
            unit = record["run_id"][len(experiment) + 1:].rsplit("-", 3)[0]
            new, kind = unit_id(config, unit), "unit"
        elif record.get("diagnostics", {}).get("energy", {}).get("definition") and config.get("energy"):
            new, kind = energy_id(config, config["energy"]), "energy"
        else:
            new, kind = run_id(config), "train"
        assert new == record["run_id"] == path.stem, path
        kinds[kind] += 1
    assert min(kinds.values()) > 0, kinds
