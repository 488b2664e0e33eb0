"""What a run *is*: the one definition behind both its run id and its cell key.

``identity_config(cfg)`` is the resolved config reduced to the keys that change the numbers. It leaves out
where and how a run executes (paths, devices, threads, logging, resume/overwrite, ``model.impl``: ``pyg``
and ``fused`` are tested equal), keys the chosen model or split ignores (``heads`` for GCN, split fractions
for the public split), and keys added after records existed while they hold their neutral value, so that
records written before a key existed keep their ids. Old spellings are renamed first (``norm.variant`` ->
``norm.formula``) and numbers are compared as floats (``0`` in an old record equals ``0.0`` from a typed
schema).

``run_id(cfg)`` = readable prefix + hash of the identity, a training run's id (the energy and kim job kinds
build their own ids from the same identity and :func:`loose_digest`, :mod:`lipgnn.runs.kinds`);
``config_key(cfg)`` = hash of the identity without the seed, shared by the seeds of one grid point. Both accept a
DictConfig or the plain ``config`` dict of a record.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lipgnn.config_schema import ATTENTION_MODELS

# Keys that say where/how a run executes, not what it computes.
NON_IDENTITY_KEYS: tuple[str, ...] = (
    "hydra", "results_dir", "overwrite", "resume", "allow_code_change", "device", "experiment_name", "log",
    "logger", "budget", "dataset.root", "dataset.cache_dir", "dataset.download", "model.impl",
    "train.checkpoint_every", "train.checkpoint_activations", "train.num_threads", "train.malloc_tuning",
    "train.cuda_graphs",
    "trees_protocol",
    # The energy kind's options (it adds them to its own ids), the job kind and the kim kind's settings (a kim
    # unit's id hashes its own config): lipgnn.runs.
    "energy", "kind", "kim",
    # Which instruction set the libraries used (lipgnn.numerics): how the run executed, recorded beside it.
    "numerics",
)
# Keys renamed since records were first written: old dotted name -> new one.
RENAMED: dict[str, str] = {"norm.variant": "norm.formula"}
# Keys added after records existed, at the value that reproduces the behaviour from before they existed.
NEUTRAL: dict[str, Any] = {
    "model.layer_norm": "none", "model.activation": "default", "model.nonlocal": False, "model.score": "dot",
    "model.tie_qk": False, "dataset.split": "public", "model.init": "default", "model.nonlocal_source": "x",
    "model.nonlocal_grad": True, "train.warmup_epochs": 0, "model.act_on_last": False,
    "train.plateau_threshold_mode": "rel", "train.train_metric": "eval", "train.stop_at_train": 0.0,
    "train.train_patience": 0, "dataset.sampling": "trees", "norm.layernorm": "none", "dataset.reorder": "none",
    "model.encoder_layers": 2,
}
# Keys that only matter when another key has one of some values: (key, condition key, values).
APPLIES_WHEN: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    *((f"model.{k}", "model.name", ATTENTION_MODELS) for k in ("heads", "head_aggregation", "attn_dropout")),
    *((f"model.{k}", "model.name", ("gcnii",)) for k in ("gcnii_alpha", "gcnii_theta")),
    *((f"dataset.{k}", "dataset.split", ("random",))
      for k in ("train_per_class", "train_fraction", "val_fraction", "test_fraction")),
    ("model.ffn_hidden", "model.name", ("san",)),
    ("model.encoder_layers", "model.name", ("san",)),
    ("dataset.num_trees", "dataset.sampling", ("trees", None)),  # alon_yahav ignores num_trees
    *((f"model.{k}", "model.nonlocal", (True,)) for k in ("nonlocal_source", "nonlocal_grad")),
)
# TREES' train_fraction is its own key (not a random-split key): kinds whose split keys APPLIES_WHEN governs.
_SPLIT_KINDS = ("planetoid", "pyg")


def get_dotted(tree: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """``tree["a"]["b"]`` for ``"a.b"`` in a plain nested dict, else ``default`` (also for a stored None when a
    default is given). Records' configs are plain dicts read from JSON, not OmegaConf objects, so
    OmegaConf.select does not apply (wrapping every record in an OmegaConf node would cost more than the
    whole table build)."""
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return default if node is None and default is not None else node


def _pop(tree: dict[str, Any], dotted: str) -> Any:
    *parents, leaf = dotted.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return node.pop(leaf, None) if isinstance(node, dict) else None


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def identity_config(cfg: DictConfig | Mapping[str, Any], *, seed: bool = True) -> dict[str, Any]:
    """The config reduced to what changes a run's numbers (see the module docstring)."""
    tree = plain(cfg)
    for old, new in RENAMED.items():
        value = _pop(tree, old)
        if value is not None and get_dotted(tree, new) is None:
            _set(tree, new, value)
    for key in NON_IDENTITY_KEYS:
        _pop(tree, key)
    for key, when, values in APPLIES_WHEN:
        if key.startswith("dataset.") and get_dotted(tree, "dataset.kind") not in _SPLIT_KINDS:
            continue
        if get_dotted(tree, when) not in values:
            _pop(tree, key)
    for key, neutral in NEUTRAL.items():
        value = get_dotted(tree, key)
        if value is not None and value == neutral:
            _pop(tree, key)
    if not seed:
        tree.pop("seed", None)
    return _canonical(tree)


def _digest(tree: Mapping[str, Any], length: int) -> str:
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:length]


def plain(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` as a plain nested dict (resolved; a copy)."""
    if isinstance(cfg, DictConfig):
        container = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(container, dict)
        return container
    return copy.deepcopy(dict(cfg))


def run_id(cfg: DictConfig | Mapping[str, Any]) -> str:
    """A training run's stable id (the training and gh_depth job kinds): model, norm, res, dataset, missing rate,
    tree depth, depth, seed + hash of :func:`identity_config`. Each other job kind owns its id format
    (:meth:`lipgnn.runs.registry.JobKind.run_id`), built from :func:`identity_config` and :func:`loose_digest`."""
    tree = plain(cfg)
    model, dataset = tree.get("model", {}), tree.get("dataset", {})
    parts = [str(model.get("name")), str(tree.get("norm", {}).get("name"))]
    if model.get("residual") is True:
        parts.append("res")
    parts.append(str(dataset.get("name")))
    if dataset.get("missing_rate"):
        parts.append(f"m{float(dataset['missing_rate']):g}")
    if dataset.get("kind") == "trees":
        parts.append(f"t{dataset.get('tree_depth')}")
    parts += [f"L{tree.get('depth')}", f"s{tree.get('seed')}", _digest(identity_config(tree), 10)]
    return "-".join(parts)


def loose_digest(tree: Mapping[str, Any]) -> str:
    """The energy and kim job kinds' hash: JSON with the default separators (their
    committed records' ids were derived this way)."""
    return hashlib.sha1(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:10]


def config_key(cfg: DictConfig | Mapping[str, Any]) -> str:
    """Hash of the identity without the seed: the runs sharing it are the seeds of one grid point."""
    return _digest(identity_config(cfg, seed=False), 12)
