"""Kim et al.'s experiment runner: unit ids stay put when the training schema grows."""

from __future__ import annotations

import copy
import hashlib
import json

from lipgnn.runs.kinds.kim import unit_id


def _config() -> dict:
    run = {"seed": 0, "depth": 30, "results_dir": "results",
           "model": {"name": "gat", "hidden": 64, "heads": 1, "impl": "pyg"},
           "norm": {"name": "lip", "variant": "paper"}, "dataset": {"name": "cora", "kind": "planetoid"},
           "train": {"epochs": 30, "lr": 0.005, "num_threads": 0}}
    return {"experiment": "lip_estimates", "budget": {"name": "cpu"}, "seed": 0, "variant": "gat_lip", "depth": 30,
            "steps": 0, "power_iters": 10, "run": run}


def test_lip_estimates_id_ignores_neutral_new_keys_and_where_it_ran() -> None:
    old = _config()
    new = copy.deepcopy(old)
    new["run"]["model"]["score"] = "dot"  # added later, at the value that reproduces older runs
    new["run"]["norm"]["formula"] = new["run"]["norm"].pop("variant")  # renamed since
    new["run"]["results_dir"] = "outputs"
    new["run"]["train"]["num_threads"] = "auto"
    assert unit_id(new, "gat_lip-L30") == unit_id(old, "gat_lip-L30")
    changed = copy.deepcopy(old)
    changed["run"]["train"]["lr"] = 0.01
    assert unit_id(changed, "gat_lip-L30") != unit_id(old, "gat_lip-L30")
    changed = copy.deepcopy(old)
    changed["power_iters"] = 50
    assert unit_id(changed, "gat_lip-L30") != unit_id(old, "gat_lip-L30")


def test_ids_without_a_training_config_hash_the_config_as_is() -> None:
    # kim_bounds / kim_divergence / kim_invertibility records keep the ids they were written under
    config = {"experiment": "kim_bounds", "budget": {"name": "cpu"}, "seed": 0, "n": 100, "p": "inf"}
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    assert unit_id(config, "pinf-n100") == f"kim_bounds-pinf-n100-cpu-s0-{digest}"
