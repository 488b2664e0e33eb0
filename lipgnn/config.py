"""Validation of a composed config: every check runs before any side effect (no file, no download).

Hydra already rejects unknown group values (``model=foo``) with the list of valid options; this module
checks what Hydra cannot: value ranges and impossible combinations. Each failure is one
:class:`~lipgnn.errors.ConfigError` line saying what is wrong and how to fix it.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from omegaconf import DictConfig

from lipgnn.errors import ConfigError

MODELS = ("gcn", "ggnn", "gin", "gat", "gt", "gcnii")
ATTENTION_MODELS = ("gat", "gt")
NORMS = ("none", "pairnorm", "layernorm", "lip")
DATASET_KINDS = ("planetoid", "trees", "ogb")
LOGGERS = ("none", "wandb")
SELECTIONS = ("best_val", "last")
SCHEDULERS = ("none", "plateau")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _number(value: Any, key: str) -> float:
    _require(isinstance(value, (int, float)) and not isinstance(value, bool), f"{key}={value!r} must be a number")
    return float(value)


def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` on the first invalid value of the composed config."""
    depth = cfg.depth
    _require(isinstance(depth, int) and not isinstance(depth, bool) and depth >= 1,
             f"depth={depth!r} is invalid: the number of message-passing layers must be an integer >= 1")
    _require(isinstance(cfg.seed, int) and cfg.seed >= 0, f"seed={cfg.seed!r} must be a non-negative integer")
    _validate_device(str(cfg.device))
    _validate_model(cfg.model, cfg.norm)
    _validate_dataset(cfg.dataset)
    _validate_train(cfg.train)
    _require(cfg.logger.name in LOGGERS, f"logger={cfg.logger.name!r} is unknown; valid: {', '.join(LOGGERS)}")


def _validate_device(device: str) -> None:
    _require(bool(_DEVICE_RE.match(device)),
             f"device={device!r} is unknown; use auto, cpu, cuda or cuda:<index>")
    if device.startswith("cuda"):
        _require(torch.cuda.is_available(),
                 f"device={device} but no CUDA device is available here; use device=auto or device=cpu")
        if ":" in device:
            index = int(device.split(":")[1])
            _require(index < torch.cuda.device_count(),
                     f"device={device} but only {torch.cuda.device_count()} CUDA device(s) exist")


def _validate_model(model: DictConfig, norm: DictConfig) -> None:
    _require(model.name in MODELS, f"model={model.name!r} is unknown; valid: {', '.join(MODELS)}")
    _require(norm.name in NORMS, f"norm={norm.name!r} is unknown; valid: {', '.join(NORMS)}")
    _require(norm.name != "lip" or model.name in ATTENTION_MODELS,
             f"norm=lip needs an attention model ({', '.join(ATTENTION_MODELS)}); "
             f"model={model.name} has no attention scores to normalize (use norm=none|pairnorm|layernorm)")
    _require(isinstance(model.hidden, int) and model.hidden >= 1, f"model.hidden={model.hidden!r} must be >= 1")
    _require(isinstance(model.heads, int) and model.heads >= 1, f"model.heads={model.heads!r} must be >= 1")
    _require(model.head_aggregation in ("concat", "mean"),
             f"model.head_aggregation={model.head_aggregation!r} is unknown; use concat or mean")
    if model.name in ATTENTION_MODELS and model.head_aggregation == "concat":
        _require(model.hidden % model.heads == 0,
                 f"model.hidden={model.hidden} is not divisible by model.heads={model.heads} "
                 "(concat splits the width over heads); change one of them or use head_aggregation=mean")
    for key in ("dropout", "attn_dropout"):
        value = _number(model[key], f"model.{key}")
        _require(0.0 <= value < 1.0, f"model.{key}={value} must lie in [0, 1)")
    _require(model.impl in ("pyg", "fused"), f"model.impl={model.impl!r} is unknown; use pyg or fused")
    _require(model.impl == "pyg" or model.name in ATTENTION_MODELS,
             f"model.impl=fused exists only for attention models (gat, gt), not model={model.name}")
    _validate_block_options(model)
    if norm.name == "lip":
        _require(_number(norm.alpha, "norm.alpha") > 0, f"norm.alpha={norm.alpha} must be > 0")
        _require(norm.variant in ("paper", "reference"),
                 f"norm.variant={norm.variant!r} is unknown; use paper or reference")
    if norm.name == "layernorm":
        _require(norm.mode in ("graph", "node"), f"norm.mode={norm.mode!r} is unknown; use graph or node")


LAYER_NORMS = ("none", "pre", "post")
ACTIVATIONS = ("default", "relu", "elu", "gelu", "none")


def _validate_block_options(model: DictConfig) -> None:
    """``model.layer_norm`` and ``model.activation`` (every model; absent keys mean none/default)."""
    placement = model.get("layer_norm", "none")
    _require(placement in LAYER_NORMS,
             f"model.layer_norm={placement!r} is unknown; use none, pre (x + f(LN(x))) or post (LN(x + f(x)))")
    activation = model.get("activation", "default")
    _require(activation in ACTIVATIONS,
             f"model.activation={activation!r} is unknown; use one of: {', '.join(ACTIVATIONS)}")


def _validate_dataset(dataset: DictConfig) -> None:
    kind = dataset.get("kind")
    _require(kind in DATASET_KINDS, f"dataset.kind={kind!r} is unknown; valid: {', '.join(DATASET_KINDS)}")
    rate = dataset.get("missing_rate", 0)
    rate = _number(rate, "dataset.missing_rate")
    _require(0.0 <= rate <= 100.0,
             f"dataset.missing_rate={rate:g} is invalid: it is a percentage of non-training nodes in [0, 100]")
    _require(rate == 0.0 or kind == "planetoid",
             f"dataset.missing_rate applies to Planetoid datasets (cora, citeseer, pubmed), not {dataset.name}")
    if kind == "trees":
        tree_depth = dataset.tree_depth
        _require(isinstance(tree_depth, int) and 2 <= tree_depth <= 10,
                 f"dataset.tree_depth={tree_depth!r} must be an integer in 2..10 (paper §7.2)")
        _require(isinstance(dataset.num_trees, int) and dataset.num_trees >= 10,
                 f"dataset.num_trees={dataset.num_trees!r} must be an integer >= 10")
        sampling = dataset.get("sampling", "alon_yahav")
        _require(sampling in ("alon_yahav", "trees"),
                 f"dataset.sampling={sampling!r} is unknown; use alon_yahav (Alon & Yahav's examples) or trees")


def _validate_train(train: DictConfig) -> None:
    _require(isinstance(train.epochs, int) and train.epochs >= 1, f"train.epochs={train.epochs!r} must be >= 1")
    _require(_number(train.lr, "train.lr") > 0, f"train.lr={train.lr} must be > 0")
    _require(_number(train.weight_decay, "train.weight_decay") >= 0,
             f"train.weight_decay={train.weight_decay} must be >= 0")
    _require(train.selection in SELECTIONS,
             f"train.selection={train.selection!r} is unknown; valid: {', '.join(SELECTIONS)}")
    _require(train.scheduler in SCHEDULERS,
             f"train.scheduler={train.scheduler!r} is unknown; valid: {', '.join(SCHEDULERS)}")
    _require(isinstance(train.checkpoint_every, int) and train.checkpoint_every >= 0,
             f"train.checkpoint_every={train.checkpoint_every!r} must be an integer >= 0")
    _require(isinstance(train.eval_every, int) and train.eval_every >= 1,
             f"train.eval_every={train.eval_every!r} must be an integer >= 1")
    _validate_trees_protocol(train)


def _validate_trees_protocol(train: DictConfig) -> None:
    """The TREES-protocol keys of conf/train/default.yaml (train_metric, stop_at_train, train_patience)."""
    mode = train.get("plateau_threshold_mode", "rel")
    _require(mode in ("rel", "abs"), f"train.plateau_threshold_mode={mode!r} is unknown; use rel or abs")
    metric = train.get("train_metric", "eval")
    _require(metric in ("eval", "online"), f"train.train_metric={metric!r} is unknown; use eval or online")
    target = _number(train.get("stop_at_train", 0.0), "train.stop_at_train")
    _require(0.0 <= target <= 1.0, f"train.stop_at_train={target} must lie in [0, 1] (0 = off)")
    patience = train.get("train_patience", 0)
    _require(isinstance(patience, int) and not isinstance(patience, bool) and patience >= 0,
             f"train.train_patience={patience!r} must be an integer >= 0 (evaluations; 0 = off)")
