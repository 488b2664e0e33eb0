"""The config: where it lives, how it is composed, and the one validation pass every run goes through.

Types and unknown keys are enforced by Hydra while composing (the schemas of :mod:`lipgnn.config_schema`);
:func:`validate` then checks each field's bounds and choices from the same schemas, and the few rules that
join two keys. Each failure is one :class:`~lipgnn.errors.ConfigError` line saying what is wrong and how
to fix it, raised before anything is written.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from lipgnn.config_schema import (
    ATTENTION_MODELS,
    CUDA_GRAPH_MODELS,
    FUSED_MODELS,
    GROUP_SCHEMAS,
    MODELS,
    NONLOCAL_MODELS,
    NORMS,
    SCHEMAS,
    config_key,
    node,
    register,
    schema_fields,
)
from lipgnn.errors import ConfigError

# An absolute path: Hydra would otherwise look for a Python package named "conf" (editable install = repo root).
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")

__all__ = ["ATTENTION_MODELS", "CONF_DIR", "MODELS", "NORMS", "check_model", "compose", "format_error", "typed",
           "validate"]

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")

register()

# `depth: ${add1:${dataset.tree_depth}}` — TREES models have d+1 layers (Alon & Yahav; paper §7.2).
if not OmegaConf.has_resolver("add1"):
    OmegaConf.register_new_resolver("add1", lambda value: int(value) + 1)
# `results_dir: ${results_root:${experiment_name}}`: paper experiments write into the committed results/,
# ad-hoc runs (no experiment=) into the git-ignored outputs/.
AD_HOC_EXPERIMENT = "default"
if not OmegaConf.has_resolver("results_root"):
    OmegaConf.register_new_resolver("results_root",
                                    lambda name: "outputs" if str(name) == AD_HOC_EXPERIMENT else "results")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


# ---------------------------------------------------------------------------------------------- fields
def _check_field(key: str, value: Any, meta: dict[str, Any]) -> None:
    if value is None:
        _require(bool(meta.get("nullable")), f"{key}=null is not allowed; give a value")
        return
    if meta.get("flag"):
        _require(isinstance(value, bool), f"{key}={value!r} is not a boolean; use {key}=true or {key}=false")
    if meta.get("choices"):
        options = meta["choices"]
        _require(value in options, f"{key}={value!r} is unknown; use one of: {', '.join(map(str, options))}")
    if meta.get("text"):
        _require(isinstance(value, str) and (bool(value) or not meta.get("nonempty")),
                 f"{key}={value!r} must be a non-empty string")
    if meta.get("threads"):
        ok = value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
        _require(ok, f"{key}={value!r} is invalid; use auto (cores / parallel jobs) or an integer >= 1")
    if "ge" in meta:
        _check_number(key, value, meta)


def _check_number(key: str, value: Any, meta: dict[str, Any]) -> None:
    _require(isinstance(value, (int, float)) and not isinstance(value, bool), f"{key}={value!r} must be a number")
    if meta.get("integer"):
        _require(isinstance(value, int), f"{key}={value!r} must be an integer")
    _require(value == value and abs(value) != float("inf"), f"{key}={value!r} must be finite")
    bounds = (("ge", lambda b: value >= b, ">="), ("gt", lambda b: value > b, ">"),
              ("le", lambda b: value <= b, "<="), ("lt", lambda b: value < b, "<"))
    for name, ok, _sign in bounds:
        bound = meta.get(name)
        if bound is not None and not ok(bound):
            limits = [f"{s} {meta[n]:g}" for n, _, s in bounds if meta.get(n) is not None]
            raise ConfigError(f"{key}={value!r} is out of range: it must be {' and '.join(limits)}")


def _schema_fields(node: DictConfig) -> dict[str, Any]:
    schema = OmegaConf.get_type(node)
    if schema is None or not dataclasses.is_dataclass(schema):
        return {}
    return schema_fields(schema)


def validate_fields(cfg: DictConfig, prefix: str = "") -> None:
    """Check every key that has a schema against its bounds/choices (recursively)."""
    fields = _schema_fields(cfg)
    for key, spec in fields.items():
        if key not in cfg:
            continue
        value = cfg._get_node(key)
        dotted = f"{prefix}{key}"
        if isinstance(value, DictConfig):
            if _is_structured(value):
                validate_fields(value, f"{dotted}.")
            else:  # a mapping whose values may have a schema (trees_protocol.block: model -> TreesBlockConfig)
                for name in value:
                    if _is_structured(value._get_node(name)):
                        validate_fields(value[name], f"{dotted}.{name}.")
            continue
        if isinstance(value, ListConfig):
            continue
        _check_field(dotted, cfg[key], dict(spec.metadata))
    for key in cfg:
        if key in fields or (not prefix and key == "hydra"):
            continue
        # `+model.foo=3` adds a key even to a typed node (Hydra opens it for `+`): refuse it here.
        _require(not fields, f"{prefix}{key} is not a config key (valid keys under "
                             f"{prefix.rstrip('.') or 'the top level'}: {', '.join(fields)})")
        if isinstance(cfg._get_node(key), DictConfig):
            validate_fields(cfg[key], f"{prefix}{key}.")


# ---------------------------------------------------------------------------------------------- typed
#: group -> its one schema, for the groups whose options share it (``train``, ``energy``; ``""``: the root); ``kim``
#: has one per experiment, named by the experiment's YAML.
_SINGLE_SCHEMAS: dict[str, type] = {group: schema for (group, _), schema in SCHEMAS.items()
                                    if group not in GROUP_SCHEMAS and group != "budget"
                                    and [g for g, _ in SCHEMAS].count(group) == 1}
_GROUP_OF: dict[type, str] = {schema: group for (group, _), schema in SCHEMAS.items()}


def typed(cfg: Any, schema: type | str | None = None) -> Any:
    """``cfg`` as its schema's dataclass (:mod:`lipgnn.config_schema`), every field checked by the schema's
    rules: the one conversion the consumers (models, data, trainer) read their config through, so a key they
    read has its default in one place, the schema.

    ``cfg`` is a composed config node (its schema is its own: ``OmegaConf.to_object``) or, for a caller without
    one (a test, the benchmark), a plain mapping, a namespace or a YAML file read directly; that is completed
    from ``schema`` (a schema class, or a group name: ``model`` and ``norm`` pick the schema by ``name``,
    ``dataset`` by ``kind``) and checked the same way: a key of another option of the group (``alpha`` with
    ``norm=none``) is dropped, a key no option has is an error. A dataclass is returned as it is. The key
    ``nonlocal`` becomes the field ``nonlocal_`` (:func:`lipgnn.config_schema.config_key`). Raises
    :class:`ConfigError` (one line).
    """
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return cfg
    if isinstance(schema, str):
        group = schema
    else:  # the group whose schema it is, for the keys' names in messages
        group = _GROUP_OF.get(schema or (OmegaConf.get_type(cfg) if isinstance(cfg, DictConfig) else None), "")
    prefix = f"{group}." if group else ""
    try:
        node_ = cfg if _is_structured(cfg) else _completed(cfg, schema, group, prefix)
        validate_fields(node_, prefix)
        obj = _as_dataclass(node_)
    except OmegaConfBaseException as exc:  # a value of the wrong type, an interpolation that does not resolve
        key = getattr(exc, "full_key", None)
        raise ConfigError(f"{prefix}{key}: {format_error(exc)}" if key else format_error(exc)) from None
    _require(not isinstance(schema, type) or isinstance(obj, schema),
             f"{group or 'the config'} is a {type(obj).__name__}, not a {getattr(schema, '__name__', schema)}")
    if isinstance(obj, SCHEMAS[("", "config_schema")]):
        _type_nodes(obj)
    return obj


def _type_nodes(root: Any) -> None:
    """A node of the root that came in untyped (a record's stored config merged over a composed one, as ``lipgnn
    verify`` reruns it) but whose group has one schema (``energy``, ``trees_protocol``) becomes that schema's
    dataclass too, so that what a job kind reads is typed however its config was built."""
    for spec in dataclasses.fields(root):
        value, key = getattr(root, spec.name), config_key(spec)
        if isinstance(value, dict) and key in _SINGLE_SCHEMAS:
            setattr(root, spec.name, typed(value, key))


def _is_structured(cfg: Any) -> bool:
    return isinstance(cfg, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(cfg))


def _as_dataclass(cfg: DictConfig) -> Any:
    """A composed (already validated) node as its dataclass, keys renamed to their fields; a root's ``hydra``
    node (``compose(..., hydra=True)``) is Hydra's, left out."""
    if "hydra" in cfg and OmegaConf.get_type(cfg) is SCHEMAS[("", "config_schema")]:
        cfg = copy.copy(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
    obj = OmegaConf.to_object(cfg)
    _rename_keys(obj)
    return obj


def _rename_keys(obj: Any) -> None:
    """``to_object`` sets a key that is not a field (``nonlocal``) as a plain attribute: move it to its field."""
    if not dataclasses.is_dataclass(obj):
        return
    extra = vars(obj)
    for spec in dataclasses.fields(obj):
        key = config_key(spec)
        if key != spec.name and key in extra:
            setattr(obj, spec.name, extra.pop(key))
        _rename_keys(getattr(obj, spec.name))


def _completed(cfg: Any, schema: type | str | None, group: str, prefix: str) -> DictConfig:
    """A mapping, namespace or untyped node merged onto its schema's stored node (:func:`lipgnn.config_schema.node`)."""
    if isinstance(cfg, DictConfig):
        values = OmegaConf.to_container(cfg)
    elif isinstance(cfg, Mapping):
        values = dict(cfg)
    else:
        values = dict(vars(cfg))
    assert isinstance(values, dict)
    values.pop("defaults", None)  # Hydra's defaults list of a conf/ YAML file read directly, not a key
    siblings: set[str] = set()  # keys of the group's other options: one mapping may serve every norm
    if isinstance(schema, type):
        cls = schema
    elif group in GROUP_SCHEMAS:
        key, options = GROUP_SCHEMAS[group]
        option = values.get(key)
        _require(option is not None, f"{prefix}{key} is not set; give {prefix}{key}=<value>")
        _require(option in options, f"{prefix}{key}={option!r} is unknown; use one of: {', '.join(options)}")
        cls = options[option]
        siblings = {k for other in options.values() for k in schema_fields(other)}
    elif group in _SINGLE_SCHEMAS:
        cls = _SINGLE_SCHEMAS[group]
    else:
        raise ConfigError(f"no schema for the config group {group or '(root)'!r}; pass a schema class")
    base = node(cls)
    values = {k: v for k, v in values.items() if k in base.keys() or k not in siblings}
    unknown = [str(k) for k in values if k not in base.keys()]
    _require(not unknown, f"{prefix}{unknown[0] if unknown else ''} is not a config key (valid keys under "
             f"{group or 'the top level'}: {', '.join(map(str, base.keys()))})")
    merged = OmegaConf.merge(base, values)
    assert isinstance(merged, DictConfig)
    if group:  # under its group, so that a file's own interpolations resolve (pyg.yaml: name: ${dataset.cls})
        merged = OmegaConf.create({group: merged})[group]
    return merged


# ---------------------------------------------------------------------------------------------- rules
def validate(cfg: DictConfig) -> Any:
    """Raise :class:`ConfigError` on the first invalid value of the composed config; return the config as the
    schema's dataclasses (:func:`typed`: the conversion the run layer passes down to the data, model and trainer)."""
    try:
        validate_fields(cfg)
    except OmegaConfBaseException as exc:  # an interpolation that does not resolve
        raise ConfigError(format_error(exc)) from None
    _validate_device(str(cfg.device))
    settings = typed(cfg)
    model, norm, train, dataset = settings.model, settings.norm, settings.train, settings.dataset
    if train.cuda_graphs:
        _validate_cuda_graphs(cfg, model, train)
    check_model(model, norm)
    _require(train.warmup_epochs == 0 or train.scheduler == "none",
             f"train.warmup_epochs={train.warmup_epochs} sets the learning rate itself; use it with "
             "train.scheduler=none")
    if getattr(dataset, "split", None) == "random" and dataset.train_per_class is None:
        total = dataset.train_fraction + dataset.val_fraction + dataset.test_fraction
        _require(total <= 1.0 + 1e-9,
                 f"dataset.train_fraction + val_fraction + test_fraction = {total:g} exceeds 1; lower them")
    if dataset.kind == "pyg":
        _require(bool(dataset.cls), "dataset.cls is empty: name a torch_geometric.datasets class, e.g. Coauthor")
    return settings


def check_model(model: Any, norm: Any) -> None:
    """The rules that join model and norm keys (ranges and choices live in the schema): :func:`validate` and
    :func:`lipgnn.models.build_model` both apply them to the typed configs (:func:`typed`)."""
    _require(norm.name != "lip" or model.name in ATTENTION_MODELS,
             f"norm=lip needs an attention model ({', '.join(ATTENTION_MODELS)}); "
             f"model={model.name} has no attention scores to normalize (use norm=none|pairnorm|layernorm)")
    if model.name in ATTENTION_MODELS and model.head_aggregation == "concat":
        _require(model.hidden % model.heads == 0,
                 f"model.hidden={model.hidden} is not divisible by model.heads={model.heads} "
                 "(concat splits the width over heads); change one of them or use head_aggregation=mean")
    _require(model.impl != "fused" or model.name in FUSED_MODELS,
             f"model.impl=fused exists only for {', '.join(FUSED_MODELS)}; use model.impl=pyg for model={model.name}")
    _validate_block_options(model, norm)
    _validate_score(model, norm)


def _validate_block_options(model: Any, norm: Any) -> None:
    """Cross-key rules of Guan & He's keys (``model.nonlocal``, model=san); ranges live in the schema."""
    if model.nonlocal_:
        _require(model.name in NONLOCAL_MODELS,
                 f"model.nonlocal=true needs an attention model ({', '.join(NONLOCAL_MODELS)}), "
                 f"not model={model.name}")
        _require(model.head_aggregation == "concat",
                 "model.nonlocal=true scales each head separately; use model.head_aggregation=concat")
    if model.name == "san":
        _require(norm.name in ("none", "lip"),
                 f"norm={norm.name} does not apply to model=san (its LayerNorm is model.layer_norm); use norm=none|lip")
        _require(model.head_aggregation == "concat",
                 "model=san concatenates its heads (MP = (P_1 X V_1 || ... || P_h X V_h) W); "
                 "use model.head_aggregation=concat")
        _require(getattr(norm, "layernorm", "none") == "none",
                 "norm.layernorm adds a LayerNorm to the GAT/GT block; model=san has its own (model.layer_norm): "
                 "use norm.layernorm=none")


def _validate_score(model: Any, norm: Any) -> None:
    """``model.score`` (dot | l2) and ``model.tie_qk``: GT only; l2 not with norm=lip. Both implementations
    (``model.impl=pyg|fused``) compute them, tested equal."""
    score, tie_qk = model.score, model.tie_qk
    if score == "dot" and not tie_qk:
        return
    _require(model.name == "gt", f"model.score={score} / model.tie_qk={tie_qk} apply to model=gt only, "
             f"not model={model.name}")
    _require(not (score == "l2" and norm.name == "lip"),
             "model.score=l2 with norm=lip: LipschitzNorm (eq. 19) bounds dot-product scores only; "
             "use norm=none with model.score=l2")


def _validate_device(device: str) -> None:
    _require(bool(_DEVICE_RE.match(device)), f"device={device!r} is unknown; use auto, cpu, cuda or cuda:<index>")
    if device.startswith("cuda"):
        import torch

        _require(torch.cuda.is_available(),
                 f"device={device} but no CUDA device is available here; use device=auto or device=cpu")
        if ":" in device:
            index = int(device.split(":")[1])
            _require(index < torch.cuda.device_count(),
                     f"device={device} but only {torch.cuda.device_count()} CUDA device(s) exist")


def _validate_cuda_graphs(cfg: DictConfig, model: Any, train: Any) -> None:
    """``train.cuda_graphs=true`` captures the fused full-batch step on a GPU (lipgnn/train/cuda_graph.py)."""
    import torch

    device = str(cfg.device)
    _require(model.name in CUDA_GRAPH_MODELS,
             f"train.cuda_graphs=true captures the fused layers ({', '.join(CUDA_GRAPH_MODELS)}), not "
             f"model={model.name}; use train.cuda_graphs=false")
    _require(model.impl != "pyg",
             "train.cuda_graphs=true cannot capture PyG's layers (they ask the host for sizes each step); "
             "use model.impl=fused or auto")
    _require(not train.checkpoint_activations,
             "train.cuda_graphs=true with train.checkpoint_activations=true is not supported (the recomputed "
             "forward saves RNG state on the host); turn one of them off")
    _require(not train.batch_size,
             f"train.cuda_graphs=true captures one full-batch step; train.batch_size={train.batch_size} makes "
             "mini-batches: use train.batch_size=0 or train.cuda_graphs=false")
    _require(not (cfg.log.grad_norms and train.grad_clip),
             "log.grad_norms=true reads the gradients before clipping, which a captured step with "
             "train.grad_clip > 0 does not expose; set train.grad_clip=0 or train.cuda_graphs=false")
    _require(device != "cpu" and (device != "auto" or torch.cuda.is_available()),
             f"train.cuda_graphs=true needs a CUDA device, but device={device} runs on the CPU here; "
             "use train.cuda_graphs=false")


def validate_launcher(hydra_cfg: DictConfig) -> None:
    """The launcher can start here: SLURM needs ``sbatch``; joblib needs n_jobs >= 1."""
    launcher = hydra_cfg.launcher
    target = str(launcher.get("_target_", ""))
    if "SlurmLauncher" in target:
        choices = hydra_cfg.get("runtime", {}).get("choices", {})
        name = choices.get("hydra/launcher") or "slurm"  # slurm, slurm_cpu, or a user's own preset
        _require(shutil.which("sbatch") is not None,
                 f"hydra/launcher={name} needs a SLURM cluster (no sbatch on this machine); "
                 "use hydra/launcher=local here, or start a one-node cluster with scripts/slurm_local.sh up")
    if "JoblibLauncher" in target:
        n_jobs = launcher.get("n_jobs")
        _require(isinstance(n_jobs, int) and not isinstance(n_jobs, bool) and n_jobs >= 1,
                 f"hydra.launcher.n_jobs={n_jobs!r} must be an integer >= 1")


def validate_output_dir(hydra_cfg: DictConfig, key: str) -> None:
    """Hydra's output folder (``hydra.run.dir`` for a run, ``hydra.sweep.dir`` for a sweep) can be created and
    written: Hydra makes it before the job starts and would otherwise end in a traceback."""
    folder = OmegaConf.select(hydra_cfg, key.removeprefix("hydra."), default=None)
    if folder is not None:
        _require(_can_create_in(Path(str(folder))),
                 f"{key}={folder} cannot be created or written (Hydra keeps its logs there); choose a writable "
                 f"folder with {key}=<path>")


def nearest_existing(path: Path) -> Path | None:
    """``path`` if it exists, else its nearest existing ancestor (where it would be created); None if none."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return None
        probe = probe.parent
    return probe


def _can_create_in(path: Path) -> bool:
    """Whether a folder can be made where ``path`` would be created: tried for real (a temp folder made and removed
    in its nearest existing ancestor), since permission bits say nothing for root or for pseudo file systems
    such as /proc."""
    import tempfile

    probe = nearest_existing(path)
    if probe is None or not probe.is_dir():
        return False
    try:
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".lipgnn-probe-"))
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- compose
def format_error(exc: BaseException) -> str:
    """One line from a Hydra/OmegaConf error chain: what was given, and the innermost reason."""
    chain: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and node not in chain:
        chain.append(node)
        node = node.__cause__ or node.__context__
    firsts = [str(e).strip().splitlines()[0].strip() for e in chain if str(e).strip()]
    firsts = [line for line in firsts if "$VALUE" not in line] or [type(exc).__name__]
    text = str(exc)
    if "Available options in" in text:  # an unknown group option: list the valid ones (schemas excluded)
        lines = text.split("Available options in", 1)[1].splitlines()[1:]
        options = []
        for line in lines:
            if not line.startswith("\t"):
                break
            if not line.strip().startswith("base_"):
                options.append(line.strip())
        return f"{firsts[0]}; available: {', '.join(options)}"
    missing = next((re.search(r"Missing mandatory value: ([\w.]+)", line) for line in firsts
                    if "Missing mandatory value" in line), None)
    if missing:
        return f"{missing.group(1)} is not set; give {missing.group(1)}=<value>"
    message = firsts[0]
    lexer = next((m for m in (re.search(r"token recognition error at: '(.*)'", line) for line in firsts) if m), None)
    if lexer:  # Hydra's override grammar takes unquoted values of ASCII letters, digits and a few symbols only
        char = lexer.group(1)
        key, _, value = re.sub(r"^\w*Exception:\s*", "", message).partition("=")
        return (f"{key}={value}: the character {char!r} needs quoting in an override; write "
                f"{key}=\"'{value}'\" (single quotes inside double quotes, so the shell keeps them)")
    merging = re.match(r"Error merging override (.*)", message)
    if merging:
        message = f"{merging.group(1)} is invalid"
    if len(firsts) > 1 and firsts[1] not in message:
        message += f": {firsts[1]}"
    return message


def _unknown_key_message(exc: BaseException, overrides: Sequence[str]) -> str | None:
    """For ``dataset.missing=1.5`` on a node without that key: one line naming the node's keys and the closest
    one, found by composing again without that override (None for any other error, or if that fails too)."""
    import difflib

    found = re.search(r"Could not override '([\w.]+)'", str(exc))
    if not found or "not in" not in format_error(exc):
        return None
    dotted = found.group(1)
    parent, _, leaf = dotted.rpartition(".")
    rest = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != dotted]
    try:
        node = OmegaConf.select(compose(rest), parent) if parent else compose(rest)
    except Exception:  # the other overrides are bad too: the plain message names this one
        return None
    if not isinstance(node, DictConfig):
        return None
    keys = [str(k) for k in node.keys()]
    close = difflib.get_close_matches(leaf, keys, n=1, cutoff=0.5)
    hint = f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else ""
    return f"{dotted} is not a config key{hint} (valid keys under {parent or 'the top level'}: {', '.join(keys)})"


def compose(overrides: Sequence[str] = (), *, hydra: bool = False) -> DictConfig:
    """The config ``train.py <overrides>`` would run, validated; :class:`ConfigError` (one line) if invalid."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        if GlobalHydra.instance().is_initialized():
            cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra)
        else:
            with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
                cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra)
    except Exception as exc:  # Hydra and OmegaConf raise several unrelated types for bad input
        raise ConfigError(_unknown_key_message(exc, overrides) or format_error(exc)) from None
    validate(cfg)
    if hydra:
        validate_launcher(cfg.hydra)
        validate_output_dir(cfg.hydra, "hydra.run.dir")
    return cfg


def physical_cores() -> int:
    """Cores this process may use (affinity), counting a hyper-threaded pair once where Linux says so."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    siblings = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
    per_core = 1
    try:
        text = siblings.read_text().strip()
        per_core = max(1, sum(int(b) - int(a) + 1 for a, _, b in (p.partition("-") if "-" in p else (p, "", p)
                                                                  for p in text.split(","))))
    except (OSError, ValueError):
        pass
    return max(1, usable // per_core)


def resolve_threads(value: Any, parallel_jobs: int = 1) -> int:
    """``train.num_threads``: an integer as given, or ``auto`` = physical cores // parallel jobs (>= 1),
    capped by ``OMP_NUM_THREADS`` where the environment sets it (a shared machine's own limit)."""
    if value == "auto":
        threads = max(1, physical_cores() // max(1, parallel_jobs))
        cap = os.environ.get("OMP_NUM_THREADS", "")
        return min(threads, int(cap)) if cap.isdigit() and int(cap) > 0 else threads
    return int(value)
