"""Typed schemas of every config group, registered with Hydra's ConfigStore.

Each ``conf/<group>/<option>.yaml`` names its schema first in its defaults list (``- /schema/model@_here_``
style is not needed: the schema lives in the same group, e.g. ``- base_model``), so Hydra composes the
YAML onto a structured config: an unknown key (``+model.foo=3``) or a value of the wrong type
(``train.epochs=abc``) fails at composition. What a type cannot say — ranges, enumerations, "true or
false and nothing else" — is written beside the field as metadata and checked by
:func:`lipgnn.config.validate`, so every rule of every key sits in this one file.

Adding a key is one line: ``name: type = choice(default, "a", "b")`` or ``= number(default, ge=0)``.
Consumers read these dataclasses, not the config nodes (:func:`lipgnn.config.typed`), so each key's default
here is its only one. Model families are declared in :data:`FAMILIES`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


@dataclass(frozen=True)
class ModelFamily:
    """What the rest of lipgnn knows about a model family, declared once in :data:`FAMILIES`; its layers are
    built by the builder registered under the same name (:func:`lipgnn.models.registry.register_model`)."""

    label: str  # the paper's name in tables and figures (lipgnn.store.records.variant_label)
    attention: bool = False  # has attention scores: norm=lip applies, heads/head_aggregation/attn_dropout count
    nonlocal_mp: bool = False  # model.nonlocal can scale its heads (Guan & He §4.1)
    fused: bool = False  # has a fused (CSR) implementation: model.impl=fused; auto picks it on CPU
    fused_on_cuda: bool = False  # model.impl=auto picks fused on CUDA too, on graphs of >= 1M edges a step
    cuda_graphs: bool = False  # train.cuda_graphs=true can capture its fused training step
    residual: bool = True  # model.residual applies (GCNII has its own initial residual): the "-res" label


#: Every model family, in the order the choices list them. Adding a family: a row here, conf/model/<name>.yaml
#: and a builder module in lipgnn/models/families/ (docs/ARCHITECTURE.md, "How to add").
FAMILIES: dict[str, ModelFamily] = {
    "gcn": ModelFamily("GCN", fused=True, cuda_graphs=True),
    "ggnn": ModelFamily("GGNN", fused=True, cuda_graphs=True),
    "gin": ModelFamily("GIN", fused=True, cuda_graphs=True),
    "gat": ModelFamily("GAT", attention=True, nonlocal_mp=True, fused=True, fused_on_cuda=True, cuda_graphs=True),
    "gt": ModelFamily("GT", attention=True, nonlocal_mp=True, fused=True, fused_on_cuda=True, cuda_graphs=True),
    # GCNII's fused layer came after the GPU runs of the captured step and is left out until it has run on one.
    "gcnii": ModelFamily("GCNII", fused=True, residual=False),
    "san": ModelFamily("SAN", attention=True, nonlocal_mp=True, fused=True, cuda_graphs=True),
    "pyg_stack": ModelFamily("PYG_STACK", attention=True),
}


def _families(prop: str) -> tuple[str, ...]:
    return tuple(name for name, family in FAMILIES.items() if getattr(family, prop))


MODELS = tuple(FAMILIES)
ATTENTION_MODELS = _families("attention")
NONLOCAL_MODELS = _families("nonlocal_mp")
#: Models with a fused (CSR) implementation (``model.impl=fused``; ``auto`` picks it on CPU).
FUSED_MODELS = _families("fused")
#: Models whose fused training step ``train.cuda_graphs=true`` captures.
CUDA_GRAPH_MODELS = _families("cuda_graphs")
NORMS = ("none", "pairnorm", "layernorm", "lip")
DATASET_KINDS = ("planetoid", "trees", "ogb", "pyg")
SPLITS = ("public", "random")


def choice(default: Any, *options: Any, nullable: bool = False) -> Any:
    """A field whose value must be one of ``options`` (``null`` too when ``nullable``)."""
    return field(default=default, metadata={"choices": options, "nullable": nullable})


def number(default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, integer: bool = False, nullable: bool = False) -> Any:
    """A numeric field with bounds (checked after composition; ``integer`` rejects 1.5 and true)."""
    return field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "lt": lt, "integer": integer,
                                            "nullable": nullable})


def flag(default: bool, *, key: str | None = None) -> Any:
    """A boolean that accepts ``true``/``false`` only: typed ``Any`` so that ``no`` or ``yes`` reach the
    validator as strings (an OmegaConf ``bool`` would silently read them as false/true). ``key``: the config
    key when it differs from the field's name (a Python keyword such as ``nonlocal``: see :func:`config_key`)."""
    return field(default=default, metadata={"flag": True, **({"key": key} if key else {})})


def text(default: Any = MISSING, *, nullable: bool = False, nonempty: bool = True) -> Any:
    return field(default=default, metadata={"text": True, "nullable": nullable, "nonempty": nonempty})


# ---------------------------------------------------------------------------------------------- model
@dataclass
class ModelConfig:
    """Keys every model accepts. Attention-only keys (heads, head_aggregation, attn_dropout, impl=fused)
    are ignored by the other models and stay out of their run ids (:mod:`lipgnn.identity`)."""

    name: str = choice(MISSING, *MODELS)
    hidden: int = number(64, ge=1, integer=True)
    heads: int = number(1, ge=1, integer=True)
    head_aggregation: str = choice("concat", "concat", "mean")
    # The families' YAML files set their papers' values (gat, gcnii, pyg_stack: dropout 0.6; gat, gt, pyg_stack:
    # attn_dropout 0.3); a config that leaves a key out (a test's, the benchmark's) gets these.
    dropout: float = number(0.5, ge=0.0, lt=1.0)
    attn_dropout: float = number(0.0, ge=0.0, lt=1.0)
    residual: Any = flag(False)
    impl: str = choice("auto", "auto", "pyg", "fused")
    layer_norm: str = choice("none", "none", "pre", "post")  # pre: x + f(LN(x)); post: LN(x + f(x))
    activation: str = choice("default", "default", "relu", "elu", "gelu", "none")
    score: str = choice("dot", "dot", "l2")  # GT attention score: dot product or L2 distance (Kim et al.)
    tie_qk: Any = flag(False)  # GT with score=l2: share the query and key maps (Kim et al.)
    init: str = choice("default", "default", "xavier")  # weights: PyTorch's default or Xavier-uniform, zero biases
    nonlocal_source: str = choice("x", "x", "xv")  # nonlocal factor from X or from X V_i (Guan & He §4.1)
    nonlocal_grad: Any = flag(True)  # whether the nonlocal factor passes gradients
    act_on_last: Any = flag(False)  # also apply the activation after the last layer (Alon & Yahav's TREES models)
    ffn_hidden: int = number(64, ge=1, integer=True)  # SAN: the FFN's hidden width (other models ignore it)
    encoder_layers: int = number(2, ge=1, le=2, integer=True)  # SAN: linear layers of the input MLP encoder (1 or 2)
    # GT/SAN: attend over all node pairs, not only edges (Guan & He); the config key is `nonlocal`
    nonlocal_: Any = flag(False, key="nonlocal")


@dataclass
class GCNIIConfig(ModelConfig):
    gcnii_alpha: float = number(0.1, ge=0.0, le=1.0)
    gcnii_theta: float = number(0.5, gt=0.0)


@dataclass
class PygStackConfig(ModelConfig):
    # model=pyg_stack: which stock PyG attention layer the blocks hold (GATConv, GATv2Conv, TransformerConv)
    conv: str = choice("gat", "gat", "gatv2", "transformer")


# ---------------------------------------------------------------------------------------------- norm
@dataclass
class NormConfig:
    name: str = choice("none", *NORMS)


@dataclass
class PairNormConfig(NormConfig):
    scale: float = number(1.0, gt=0.0)
    scale_individually: Any = flag(False)


@dataclass
class LayerNormConfig(NormConfig):
    mode: str = choice("graph", "graph", "node")
    affine: Any = flag(True)


@dataclass
class LipNormConfig(NormConfig):
    alpha: float = number(1.0, gt=0.0)
    # paper: eq. 17/19 as written; reference: the authors' code's formula (docs/reference.md)
    formula: str = choice("paper", "paper", "reference")
    # the authors' GT option lipschitznorm+layernorm: a LayerNorm after the conv, before the activation (graph: one
    # statistic over all nodes, PyG 1.6's default; node: per node); none: LipschitzNorm alone
    layernorm: str = choice("none", "none", "graph", "node")


# ---------------------------------------------------------------------------------------------- dataset
@dataclass
class DatasetConfig:
    name: str = text()
    kind: str = choice(MISSING, *DATASET_KINDS)
    cache_dir: str = text(".cache/lipgnn")


@dataclass
class RandomSplitMixin:
    """``split=public``: the dataset's own masks; ``split=random``: a seeded split, either
    ``train_per_class`` nodes of each class for training (the rest divided between validation and test in
    the ratio ``val_fraction : test_fraction``) or, when ``train_per_class`` is null, the fractions."""

    split: str = choice("public", *SPLITS)
    train_per_class: Any = number(None, ge=1, integer=True, nullable=True)
    train_fraction: float = number(0.6, gt=0.0, lt=1.0)
    val_fraction: float = number(0.2, gt=0.0, lt=1.0)
    test_fraction: float = number(0.2, gt=0.0, lt=1.0)


@dataclass
class ReorderMixin:
    """``reorder=rcm``: relabel the nodes in reverse Cuthill-McKee order after the split (faster sparse
    products on large graphs; a different run, equal in distribution: lipgnn/data/reorder.py). Full-batch
    graphs only (ogbn-proteins, trained on random partitions, refuses it)."""

    reorder: str = choice("none", "none", "rcm")


@dataclass
class PlanetoidConfig(ReorderMixin, RandomSplitMixin, DatasetConfig):
    pyg_name: str = choice(MISSING, "Cora", "CiteSeer", "PubMed")
    root: str = text("data")
    download: Any = flag(True)
    missing_rate: float = number(0.0, ge=0.0, le=100.0)


@dataclass
class PygConfig(ReorderMixin, RandomSplitMixin, DatasetConfig):
    cls: str = text()  # a class of torch_geometric.datasets, e.g. Coauthor, Amazon, WikiCS
    pyg_name: Any = text(None, nullable=True)  # its `name` argument where it takes one (CS, Physics, Computers)
    root: str = text("data")
    download: Any = flag(True)


@dataclass
class TreesConfig(DatasetConfig):
    tree_depth: int = number(3, ge=2, le=10, integer=True)
    sampling: str = choice("alon_yahav", "alon_yahav", "trees")  # Alon & Yahav's examples | num_trees trees
    num_trees: int = number(5000, ge=10, integer=True)
    train_fraction: float = number(0.8, gt=0.0, lt=1.0)
    batch_size: int = number(1024, ge=1, integer=True)


@dataclass
class OgbConfig(ReorderMixin, DatasetConfig):
    root: str = text("data")
    download: Any = flag(True)
    to_undirected: Any = flag(True)
    num_parts: int = number(40, ge=1, integer=True)
    use_edge_attr: Any = flag(False)


# ---------------------------------------------------------------------------------------------- train
@dataclass
class TrainConfig:
    epochs: int = number(200, ge=0, integer=True)  # >= 1 for the training job kinds (lipgnn.runs)
    lr: float = number(0.005, gt=0.0)
    weight_decay: float = number(5.0e-4, ge=0.0)
    scheduler: str = choice("none", "none", "plateau")
    plateau_mode: str = choice("min", "min", "max")
    plateau_factor: float = number(0.1, gt=0.0, lt=1.0)
    plateau_patience: int = number(10, ge=0, integer=True)
    early_stopping: int = number(0, ge=0, integer=True)
    selection: str = choice("best_val", "best_val", "last")
    batch_size: int = number(0, ge=0, integer=True)
    eval_every: int = number(1, ge=1, integer=True)
    checkpoint_every: int = number(0, ge=0, integer=True)
    checkpoint_activations: Any = flag(False)
    malloc_tuning: Any = flag(True)  # glibc malloc keeps freed memory between steps (lipgnn/train/allocator.py)
    grad_clip: float = number(0.0, ge=0.0)
    plateau_threshold_mode: str = choice("rel", "rel", "abs")  # abs: Alon & Yahav's absolute 1e-4 gain
    # TREES protocol (Alon & Yahav): the train metric that drives plateau_mode=max and the stopping rules
    train_metric: str = choice("eval", "eval", "online")
    stop_at_train: float = number(0.0, ge=0.0, le=1.0)  # stop once the train metric reaches it (0 = off)
    train_patience: int = number(0, ge=0, integer=True)  # evaluations without a train-metric gain (0 = off)
    warmup_epochs: int = number(0, ge=0, integer=True)  # linear warm-up to train.lr, then constant (0 = off)
    # CUDA only: capture the full-batch step in a CUDA graph and replay it (lipgnn/train/cuda_graph.py)
    cuda_graphs: Any = flag(False)
    # "auto" = physical cores // parallel jobs (>= 1); an integer >= 1 sets it
    num_threads: Any = field(default="auto", metadata={"threads": True})


# ---------------------------------------------------------------------------------------------- job kinds' nodes
# The nodes of the experiments that need one: each experiment's YAML names its node's schema first in its defaults
# list (``- /energy: base_energy``), so Hydra types the node; elsewhere the node is null (RootConfig), which keeps
# it out of every other experiment's config (and record).
@dataclass
class EnergyConfig:
    """The energy job kind's options (lipgnn.runs.kinds.energy); part of its records' ids."""

    features: str = choice("raw", "raw", "row")  # raw (the loaders' features) | row (row-normalised, an ablation)


@dataclass
class TreesBlockConfig:
    layer_norm: str = choice(MISSING, "none", "pre", "post")
    activation: str = choice(MISSING, "default", "relu", "elu", "gelu", "none")


@dataclass
class TreesProtocolConfig:
    """Alon & Yahav's per-depth (``d<tree depth>``) and per-model settings, a lookup table fig5 interpolates from
    into the real keys (``train.eval_every: ${oc.select:'trees_protocol.eval_every.d${dataset.tree_depth}'}``)."""

    batch_size: dict[str, int] = MISSING
    eval_every: dict[str, int] = MISSING
    block: dict[str, TreesBlockConfig] = MISSING  # per model.name: the block's layer_norm and activation
    cpu_pass_cap: dict[str, int] | None = None  # the cpu budget's train.epochs per depth


@dataclass
class KimConfig:
    """The kim job kind's node: ``unit`` names one unit of work of the experiment; its subclasses hold each
    experiment's parameters (the paper's in ``conf/experiment/<experiment>.yaml``, a budget's in
    ``conf/grid/<experiment>_<budget>.yaml``)."""

    unit: Any = text(None, nullable=True)


@dataclass
class KimBoundsConfig(KimConfig):
    ns: list[int] = MISSING  # N of the p = inf units
    restarts: int = number(MISSING, ge=1, integer=True)
    steps: int = number(MISSING, ge=1, integer=True)
    lr: float = number(MISSING, gt=0.0)
    p2_ns: list[int] = MISSING  # N of the p = 2 units
    p2_restarts: int = number(MISSING, ge=1, integer=True)
    p2_steps: int = number(MISSING, ge=1, integer=True)


@dataclass
class AttentionUnitConfig(KimConfig):
    """The attention map a unit measures: N tokens of width D, H heads."""

    n: int = number(MISSING, ge=1, integer=True)
    dim: int = number(MISSING, ge=1, integer=True)
    heads: int = number(MISSING, ge=1, integer=True)


@dataclass
class KimDivergenceConfig(AttentionUnitConfig):
    restarts: int = number(MISSING, ge=1, integer=True)
    steps: int = number(MISSING, ge=1, integer=True)
    lr: float = number(MISSING, gt=0.0)
    trace_every: int = number(MISSING, ge=1, integer=True)


@dataclass
class KimInvertibilityConfig(AttentionUnitConfig):
    batch: int = number(MISSING, ge=1, integer=True)
    cs: list[float] = MISSING  # the residual scales c of y = x + c f(x)
    iters: int = number(MISSING, ge=1, integer=True)


@dataclass
class LipEstimatesConfig(KimConfig):
    variants: list[str] = MISSING
    depths: list[int] = MISSING
    epochs: int = number(MISSING, ge=1, integer=True)
    lr: float = number(MISSING, gt=0.0)
    steps: int = number(MISSING, ge=0, integer=True)  # gradient-ascent steps of the estimate (0: at the input only)
    power_iters: int = number(MISSING, ge=1, integer=True)
    dataset: str = text()


# ---------------------------------------------------------------------------------------------- the rest
@dataclass
class LoggerConfig:
    name: str = choice("none", "none", "wandb")


@dataclass
class WandbConfig(LoggerConfig):
    project: str = text("lipgnn")
    entity: Any = text(None, nullable=True)
    group: str = text("${experiment_name}")
    tags: list[str] = field(default_factory=list)
    mode: str = choice("offline", "offline", "online", "disabled")
    dir: str = text("${results_dir}")


@dataclass
class BudgetConfig:
    name: str = choice("none", "none", "cpu", "paper")


@dataclass
class LogConfig:
    grad_norms: Any = flag(False)  # per-layer attention-gradient norms each epoch (Fig. 2)
    grad_norms_epochs: int = number(0, ge=0, integer=True)  # with grad_norms: the first N epochs only (0 = all)
    progress: Any = flag(True)
    energy: Any = flag(False)  # per-layer Dirichlet energies (Guan & He)
    diagnose: Any = flag(False)  # lipgnn.diagnostics.diagnose's per-layer table at initialisation
    # every k epochs (and at initialisation): diagnose's per-layer quantities over training (0 = off)
    diagnose_every: int = number(0, ge=0, integer=True)
    collapse_every: int = number(10, ge=1, integer=True)  # the gh_collapse kind: measure every k epochs


@dataclass
class RootConfig:
    depth: int = number(2, ge=1, integer=True)
    seed: int = number(0, ge=0, integer=True)
    device: str = text("auto")
    results_dir: str = text("results")
    experiment_name: str = text("default")
    overwrite: Any = flag(False)
    resume: Any = flag(True)
    allow_code_change: Any = flag(False)
    log: LogConfig = field(default_factory=LogConfig)
    # A lookup table experiments interpolate from (fig5: TreesProtocolConfig); the values it selects land in the
    # real keys, so it is not part of a run's identity.
    trees_protocol: Any = field(default=None, metadata={"nullable": True})
    # Options of the energy job kind (EnergyConfig), set by the gh_energy experiment only.
    energy: Any = field(default=None, metadata={"nullable": True})
    # The experiment's job kind (lipgnn.runs: training | energy | kim | gh_depth) and the kim kind's node (KimConfig's
    # subclass of the experiment).
    kind: str = text("training")
    kim: Any = field(default=None, metadata={"nullable": True})
    # Which instruction set the numeric libraries dispatch to (lipgnn.numerics): the host's, or x86-64-v3 pinned so
    # that a record reruns bit-identically on any x86-64 machine. Fixed at process start; not part of a run's identity.
    numerics: str = choice("native", "native", "portable")
    model: Any = MISSING
    norm: Any = MISSING
    dataset: Any = MISSING
    train: Any = MISSING
    logger: Any = MISSING
    budget: Any = MISSING


SCHEMAS: dict[tuple[str, str], type] = {
    ("", "config_schema"): RootConfig,
    ("model", "base_model"): ModelConfig,
    ("model", "base_gcnii"): GCNIIConfig,
    ("model", "base_pyg_stack"): PygStackConfig,
    ("norm", "base_norm"): NormConfig,
    ("norm", "base_pairnorm"): PairNormConfig,
    ("norm", "base_layernorm"): LayerNormConfig,
    ("norm", "base_lip"): LipNormConfig,
    ("dataset", "base_planetoid"): PlanetoidConfig,
    ("dataset", "base_pyg"): PygConfig,
    ("dataset", "base_trees"): TreesConfig,
    ("dataset", "base_ogb"): OgbConfig,
    ("train", "base_train"): TrainConfig,
    ("logger", "base_logger"): LoggerConfig,
    ("logger", "base_wandb"): WandbConfig,
    ("budget", "base_budget"): BudgetConfig,
    ("energy", "base_energy"): EnergyConfig,
    ("trees_protocol", "base_trees_protocol"): TreesProtocolConfig,
    ("kim", "base_kim_bounds"): KimBoundsConfig,
    ("kim", "base_kim_divergence"): KimDivergenceConfig,
    ("kim", "base_kim_invertibility"): KimInvertibilityConfig,
    ("kim", "base_lip_estimates"): LipEstimatesConfig,
}


#: The schema of each option of the groups whose options carry keys of their own, by the key that names the option.
MODEL_SCHEMAS: dict[str, type] = {name: ModelConfig for name in FAMILIES} | {"gcnii": GCNIIConfig,
                                                                             "pyg_stack": PygStackConfig}
NORM_SCHEMAS: dict[str, type] = {"none": NormConfig, "pairnorm": PairNormConfig, "layernorm": LayerNormConfig,
                                 "lip": LipNormConfig}
DATASET_SCHEMAS: dict[str, type] = {"planetoid": PlanetoidConfig, "pyg": PygConfig, "trees": TreesConfig,
                                    "ogb": OgbConfig}
#: group -> (the key that picks the option's schema, option -> schema); a group not listed has one schema.
GROUP_SCHEMAS: dict[str, tuple[str, dict[str, type]]] = {"model": ("name", MODEL_SCHEMAS),
                                                         "norm": ("name", NORM_SCHEMAS),
                                                         "dataset": ("kind", DATASET_SCHEMAS)}


def config_key(spec: dataclasses.Field) -> str:  # type: ignore[type-arg]
    """The config key of a schema field: its name, or the ``key`` its metadata gives (``nonlocal_`` ->
    ``nonlocal``: a Python keyword cannot name a dataclass field, and the YAML keys and run ids keep it)."""
    return str(spec.metadata.get("key", spec.name))


def schema_fields(schema: type) -> dict[str, Any]:
    """Config key -> dataclass Field of ``schema``, in the order of its stored node (:func:`node`: the fields
    whose key differs from their name come last)."""
    fields = dataclasses.fields(schema)
    return ({f.name: f for f in fields if config_key(f) == f.name}
            | {config_key(f): f for f in fields if config_key(f) != f.name})


def schema_defaults(*schemas: type) -> dict[str, Any]:
    """Config key -> default of every field of ``schemas`` (the first schema naming a key wins; fields
    without a default are left out)."""
    out: dict[str, Any] = {}
    for schema in schemas:
        for key, spec in schema_fields(schema).items():
            if spec.default is not dataclasses.MISSING and spec.default != MISSING:
                out.setdefault(key, spec.default)
    return out


def node(schema: type) -> DictConfig:
    """``schema`` as a structured DictConfig under its config keys (``nonlocal_`` stored as ``nonlocal``)."""
    cfg = OmegaConf.structured(schema)
    renamed = {f.name: config_key(f) for f in dataclasses.fields(schema) if config_key(f) != f.name}
    if renamed:
        OmegaConf.set_struct(cfg, False)
        for name, key in renamed.items():
            value = cfg[name]
            del cfg[name]
            cfg[key] = value
        OmegaConf.set_struct(cfg, True)
    return cfg


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent; :mod:`lipgnn.config` calls it on import)."""
    cs = ConfigStore.instance()
    for (group, name), schema in SCHEMAS.items():
        cs.store(group=group or None, name=name, node=node(schema))
