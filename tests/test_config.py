"""Config composition for every group value, and one clear error for every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONF_DIR, compose_cfg

from lipgnn.config import ATTENTION_MODELS, _schema_fields, compose, validate, validate_fields
from lipgnn.errors import ConfigError


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def test_group_options_are_the_documented_ones() -> None:
    assert options("model") == ["gat", "gcn", "gcnii", "ggnn", "gin", "gt", "pyg_stack", "san"]
    assert options("norm") == ["layernorm", "lip", "none", "pairnorm"]
    assert options("dataset") == ["citeseer", "cora", "cs", "ogbn-arxiv", "ogbn-proteins", "physics", "pubmed", "pyg",
                                  "trees"]
    assert options("logger") == ["none", "wandb"]
    assert {"local", "slurm", "slurm_cpu"} <= set(options("hydra/launcher"))


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
    pyg = ["dataset.cls=Coauthor"] if dataset == "pyg" else []
    cfg = compose_cfg([f"dataset={dataset}", f"logger={logger}", *pyg])
    validate(cfg)
    assert cfg.dataset.name == ("Coauthor" if pyg else dataset) and cfg.logger.name == logger


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
    # Ad-hoc runs go to the git-ignored outputs/, experiments to the committed results/.
    assert default.results_dir == "outputs"
    assert compose_cfg(["experiment=fig2"]).results_dir == "results"


def test_dropout_none_switches_every_dropout_off() -> None:
    cfg = compose_cfg(["variant=gt_lip", "dropout=none"])
    assert cfg.model.dropout == 0 and cfg.model.attn_dropout == 0
    assert compose_cfg(["variant=gt_lip"]).model.dropout == 0.5


# Issue #16's list: each was accepted (or gave a traceback) before the typed schemas.
@pytest.mark.parametrize(("overrides", "message"), [
    (["depth=0"], "depth=0 is out of range: it must be >= 1"),
    (["dataset.missing_rate=101"], "dataset.missing_rate=101.0 is out of range"),
    (["model=gcn", "norm=lip"], "norm=lip needs an attention model"),
    (["device=tpu"], "device='tpu' is unknown"),
    (["dataset=trees", "dataset.tree_depth=11"], "dataset.tree_depth=11 is out of range"),
    (["dataset=trees", "+dataset.missing_rate=50"], "dataset.missing_rate is not a config key"),
    (["model.heads=3"], "not divisible by model.heads=3"),
    (["model.dropout=1.5"], "model.dropout=1.5 is out of range"),
    (["train.selection=peak"], "train.selection='peak' is unknown"),
    (["train.lr=-1"], "train.lr=-1.0 is out of range"),
    (["train.grad_clip=-1"], "train.grad_clip=-1.0 is out of range"),
    (["overwrite=no"], "overwrite='no' is not a boolean"),
    (["model.residual=no"], "model.residual='no' is not a boolean"),
    (["+model.foo=3"], "model.foo is not a config key"),
    (["dataset.missing=1.5"], "dataset.missing is not a config key; did you mean dataset.missing_rate?"),
    (["model=gat", "model.head=2", "seed=1"], "model.head is not a config key; did you mean model.heads?"),
    (["train.epoch=3"], "train.epoch is not a config key; did you mean train.epochs?"),
    (["train.learning_rate=0.1"], "train.learning_rate is not a config key (valid keys under train: epochs, lr,"),
    (["dept=3"], "dept is not a config key; did you mean depth?"),
    (["train.batch_size=-1"], "train.batch_size=-1 is out of range"),
    (["train.early_stopping=-1"], "train.early_stopping=-1 is out of range"),
    (["train.num_threads=-4"], "train.num_threads=-4 is invalid"),
    (["train.scheduler=plateau", "train.plateau_factor=5"], "train.plateau_factor=5.0 is out of range"),
    (["logger=wandb", "logger.mode=foo"], "logger.mode='foo' is unknown"),
    (["hydra/launcher=slurm"], "hydra/launcher=slurm needs a SLURM cluster"),
    (["train.epochs=abc"], "train.epochs=abc is invalid"),
    (["model=nope"], "available: gat, gcn"),
    (["dataset=pyg"], "dataset.cls is not set; give dataset.cls=<value>"),
])
def test_bad_input_gives_one_clear_line(overrides: list[str], message: str, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "")  # no sbatch, whatever this machine has installed
    with pytest.raises(ConfigError) as err:
        compose(overrides, hydra=True)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("launcher", ["slurm", "slurm_cpu"])
def test_slurm_launchers_need_sbatch_and_compose_where_it_is(launcher: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=f"^hydra/launcher={launcher} needs a SLURM cluster"):
        compose([f"hydra/launcher={launcher}"], hydra=True)
    (tmp_path / "sbatch").write_text("#!/bin/sh\n")
    (tmp_path / "sbatch").chmod(0o755)  # a cluster's login node
    launch = compose([f"hydra/launcher={launcher}"], hydra=True).hydra.launcher
    assert "SlurmLauncher" in launch._target_ and launch.max_num_timeout > 0 and launch.signal_delay_s > 0
    # The CPU preset asks for no GPU and one core per single-threaded run.
    expected = (0, 1) if launcher == "slurm_cpu" else (1, 4)
    assert (launch.gpus_per_node, launch.cpus_per_task) == expected


def _bad_values(meta: dict) -> list[object]:
    if meta.get("flag"):
        return ["no", 1]
    if meta.get("choices"):
        return ["no-such-option"]
    if meta.get("threads"):
        return [0, "many"]
    if meta.get("text"):
        return [""] if meta.get("nonempty") else []
    bad: list[object] = []
    for name, step in (("ge", -1), ("gt", 0), ("le", 1), ("lt", 0)):
        bound = meta.get(name)
        if bound is not None:
            bad.append(bound + step if name in ("ge", "le") else bound)
    if meta.get("integer"):
        bad.append(True)
    return bad


def _leaf_keys(node, prefix: str = ""):
    from omegaconf import DictConfig

    for key, spec in _schema_fields(node).items():
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            yield from _leaf_keys(node[key], f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", dict(spec.metadata)


GROUP_OPTIONS = [(g, o) for g in ("model", "norm", "dataset", "train", "logger", "budget") for o in options(g)]


@pytest.mark.parametrize(("group", "option"), GROUP_OPTIONS)
def test_every_key_of_every_group_rejects_a_bad_value(group: str, option: str) -> None:
    """Walks the schema of each group option: every key with a rule rejects a value that breaks it, in one
    line naming the key (or OmegaConf refuses it while merging, as Hydra does with an override)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    extra = {"dataset": ["dataset.cls=Coauthor", "dataset.name=coauthor"] if option == "pyg" else []}
    base = compose_cfg([f"{group}={option}", *(["model=gat"] if group == "norm" else []), *extra.get(group, [])])
    validate(base)
    keys = [(f"{group}.{k}", m) for k, m in _leaf_keys(base[group])]
    if group == "model":
        keys += [(k, m) for k, m in _leaf_keys(base) if k in ("depth", "seed", "overwrite", "resume", "log.energy")]
    checked = 0
    for key, meta in keys:
        for bad in _bad_values(meta):
            cfg = base.copy()
            try:
                OmegaConf.update(cfg, key, bad)
            except ValidationError:
                checked += 1
                continue
            with pytest.raises(ConfigError) as err:
                validate_fields(cfg[key.split(".")[0]], f"{key.split('.')[0]}.") if "." in key else validate(cfg)
            assert key in str(err.value) and "\n" not in str(err.value), (key, bad, str(err.value))
            checked += 1
    assert checked >= len([k for k, m in keys if _bad_values(m)])


def test_the_feature_branches_keys_compose_at_their_defaults() -> None:
    cfg = compose_cfg(["model=gt"])
    assert (cfg.model.layer_norm, cfg.model.activation, cfg.model["nonlocal"], cfg.model.score, cfg.model.tie_qk,
            cfg.log.energy) == ("none", "default", False, "dot", False, False)
    cfg = compose_cfg(["model=gt", "model.layer_norm=pre", "model.score=l2", "model.nonlocal=true"])
    validate(cfg)


def test_cuda_request_without_cuda_is_rejected() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="no CUDA device is available"):
        validate(compose_cfg(["device=cuda"]))
