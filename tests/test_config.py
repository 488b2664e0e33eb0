"""Config composition for every group value, and one clear error for every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONF_DIR, compose_cfg

from lipgnn.config import ATTENTION_MODELS, validate
from lipgnn.errors import ConfigError


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def test_group_options_are_the_documented_ones() -> None:
    assert options("model") == ["gat", "gcn", "gcnii", "ggnn", "gin", "gt", "san"]
    assert options("norm") == ["layernorm", "lip", "none", "pairnorm"]
    assert options("dataset") == ["citeseer", "cora", "ogbn-arxiv", "ogbn-proteins", "pubmed", "trees"]
    assert options("logger") == ["none", "wandb"]
    assert {"local", "slurm"} <= set(options("hydra/launcher"))


@pytest.mark.parametrize("model", options("model"))
@pytest.mark.parametrize("norm", options("norm"))
def test_every_model_norm_pair_composes_and_validates_or_is_rejected(model: str, norm: str) -> None:
    cfg = compose_cfg([f"model={model}", f"norm={norm}"])
    assert cfg.model.name == model and cfg.norm.name == norm
    if norm == "lip" and model not in ATTENTION_MODELS:
        with pytest.raises(ConfigError, match="norm=lip needs an attention model"):
            validate(cfg)
    elif model == "san" and norm in ("pairnorm", "layernorm"):
        with pytest.raises(ConfigError, match="does not apply to model=san"):
            validate(cfg)
    else:
        validate(cfg)


@pytest.mark.parametrize("dataset", options("dataset"))
@pytest.mark.parametrize("logger", options("logger"))
def test_every_dataset_and_logger_composes(dataset: str, logger: str) -> None:
    cfg = compose_cfg([f"dataset={dataset}", f"logger={logger}"])
    validate(cfg)
    assert cfg.dataset.name == dataset and cfg.logger.name == logger


@pytest.mark.parametrize("variant", options("variant"))
def test_every_variant_sets_the_papers_row(variant: str) -> None:
    cfg = compose_cfg([f"variant={variant}"])
    validate(cfg)
    family, *rest = variant.split("_")
    assert cfg.model.name == family
    expected_norm = {"pn": "pairnorm", "ln": "layernorm", "lip": "lip"}.get(rest[0] if rest else "", "none")
    assert cfg.norm.name == expected_norm
    assert cfg.model.residual == ("res" in rest)


def test_top_level_keys_and_paper_defaults() -> None:
    cfg = compose_cfg(["depth=30", "seed=4", "device=cpu", "train.epochs=7", "train.lr=0.001",
                       "results_dir=/tmp/x"])
    assert (cfg.depth, cfg.seed, cfg.device, cfg.train.epochs, cfg.train.lr, cfg.results_dir) == (
        30, 4, "cpu", 7, 0.001, "/tmp/x")
    default = compose_cfg()
    assert default.train.weight_decay == 5e-4 and default.logger.name == "none"
    assert default.results_dir == "results"


def test_dropout_none_switches_every_dropout_off() -> None:
    cfg = compose_cfg(["variant=gt_lip", "dropout=none"])
    assert cfg.model.dropout == 0 and cfg.model.attn_dropout == 0
    assert compose_cfg(["variant=gt_lip"]).model.dropout == 0.5


@pytest.mark.parametrize(("overrides", "message"), [
    (["depth=0"], "depth=0 is invalid"),
    (["depth=-3"], "depth=-3 is invalid"),
    (["dataset.missing_rate=-5"], "missing_rate=-5 is invalid"),
    (["dataset.missing_rate=101"], "missing_rate=101 is invalid"),
    (["model=gcn", "norm=lip"], "norm=lip needs an attention model"),
    (["model=gin", "norm=lip"], "model=gin has no attention"),
    (["device=tpu"], "device='tpu' is unknown"),
    (["dataset=trees", "dataset.tree_depth=11"], "tree_depth=11 must be an integer in 2..10"),
    (["dataset=trees", "+dataset.missing_rate=50"], "applies to Planetoid datasets"),
    (["model.heads=3"], "not divisible by model.heads=3"),
    (["model.dropout=1.5"], "model.dropout=1.5 must lie in [0, 1)"),
    (["train.selection=peak"], "train.selection='peak' is unknown"),
    (["train.epochs=0"], "train.epochs=0 must be >= 1"),
    (["train.lr=-1"], "train.lr=-1 must be > 0"),
    (["model=gcn", "model.impl=fused"], "fused exists only for attention models"),
])
def test_bad_input_gives_one_clear_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(overrides))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_cuda_request_without_cuda_is_rejected() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="no CUDA device is available"):
        validate(compose_cfg(["device=cuda"]))
