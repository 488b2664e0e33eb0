r"""``build_model(model_cfg, norm_cfg, spec, depth)``: one :class:`DeepGNN` per (model, norm) pair.

Per model (``depth`` blocks of width ``hidden``; block order in :mod:`lipgnn.models.blocks`):

=======  ==========================================================================  ==========
model    conv of layer l                                                              activation
=======  ==========================================================================  ==========
gcn      ``GCNConv(hidden, hidden)``  (Kipf & Welling)                                ReLU
ggnn     ``GatedGraphConv(hidden, num_layers=1)``  (one GRU step per layer)           none
gin      ``GINConv(Linear-BN-ReLU-Linear-BN-ReLU)``  (Alon & Yahav's TREES GIN)              ReLU
gat      ``LipGATConv(hidden, c, heads, add_self_loops, dropout=attn_dropout)``       ELU
gt       ``LipTransformerConv(hidden, c, heads, root_weight, dropout=attn_dropout)``  ELU
gcnii    ``GCN2Conv(hidden, gcnii_alpha, gcnii_theta, layer=l+1)``, with x_0           ReLU
pyg_     PyG's stock ``GATConv`` / ``GATv2Conv`` / ``TransformerConv`` (``model.conv``)  ELU
stack    with ``norm=lip``: ``lipgnn.nn.lipschitz_norm(conv, alpha)``
=======  ==========================================================================  ==========

``c = hidden // heads`` for ``head_aggregation=concat`` (width stays ``hidden``), ``c = hidden`` for
``mean``. Following the authors' deep GAT/GT the activation is skipped on the last block (an output
``Linear`` follows); GCNII follows its own paper: ``x_0 = ReLU(Linear(Dropout(x)))``, ReLU after every
layer, ``Linear(Dropout(h))`` out.

``model.activation`` (default | relu | elu | gelu | none) replaces the activation column (``default``
keeps it); ``model.layer_norm`` (none | pre | post) wraps every block in a residual connection with a
per-node LayerNorm (see :mod:`lipgnn.models.blocks`), independently of ``norm``. ``model.nonlocal``
scales each attention head's aggregation by its Laplacian energy (gat, gt, san;
:mod:`lipgnn.models.nonlocal_mp`). ``model=san`` is Guan & He's self-attention GNN with its own block
(:mod:`lipgnn.models.san`). ``model.init=xavier`` re-initialises every linear map Xavier-uniform with
zero bias after building (``default`` keeps PyTorch's/PyG's init).

GAT/GT always use the Lip classes: with ``norm != lip`` they are built with ``lipschitz_norm=False``
(then equal to PyG's ``GATConv``/``TransformerConv``), so checkpoints keep the same state-dict keys
whichever norm they were trained with.

``model.impl=auto`` (the shipped default) builds the layers of every model in ``FUSED_MODELS`` ``fused`` on CPU and
``pyg`` elsewhere, except GAT and GT on graphs whose training step sees :data:`CUDA_FUSED_MIN_EDGES` edges or
more (:func:`resolve_impl`: the fused path's speed comes from compiled CPU loops; on an H100 its CUDA twins were
slower than PyG's layers on Planetoid-sized graphs and faster on ogbn-arxiv's size, docs/performance.md), and
gives every model the sparse-feature encoder (:func:`input_linear_class`) and PairNorm
(:func:`pair_norm_class`); ``pyg`` is stock throughout. The layer classes are chosen in two places:
:func:`attention_conv_classes` (GAT, GT): ``pyg`` → ``lipgnn.nn``; ``fused`` → ``lipgnn.nn.fused``
(imported lazily), which must provide ``FusedLipGATConv`` and ``FusedLipTransformerConv`` with the
constructors of ``LipGATConv`` / ``LipTransformerConv``, and the ELU those blocks use
(``lipgnn.nn.fused.ELU``: the same function as ``torch.nn.ELU``, a compiled loop on CPU, which a fused
GAT layer applies together with its bias); :func:`plain_conv_class` (GCN, GGNN, GIN): PyG's layer or
its drop-in CSR twin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import MLP, GatedGraphConv, GCN2Conv, GCNConv, GINConv
from torch_geometric.nn.dense.linear import Linear as PygLinear
from torch_geometric.nn.norm import LayerNorm, PairNorm

from lipgnn.config_schema import (
    GCNIIConfig,
    LayerNormConfig,
    LipNormConfig,
    ModelConfig,
    PairNormConfig,
    PygStackConfig,
    schema_defaults,
)
from lipgnn.errors import ConfigError
from lipgnn.models.blocks import LN_PLACEMENTS, DroppedInputMLP, EmbeddingSum, GNNBlock
from lipgnn.models.deep import DeepGNN
from lipgnn.models.nonlocal_mp import NONLOCAL_SOURCES, NonlocalScale
from lipgnn.models.san import SANBlock

MODEL_NAMES: tuple[str, ...] = ("gcn", "ggnn", "gin", "gat", "gt", "gcnii", "pyg_stack")
#: The attention models built from the generic deep block (their fused twins: CUDA's ``impl=auto`` picks them on
#: large graphs); the config's ``ATTENTION_MODELS`` (:mod:`lipgnn.config_schema`) adds SAN and pyg_stack.
BLOCK_ATTENTION_MODELS: tuple[str, ...] = ("gat", "gt")
#: ``model=pyg_stack``: ``model.conv`` -> PyG's stock attention layer of every block.
PYG_STACK_CONVS: tuple[str, ...] = ("gat", "gatv2", "transformer")
#: Block models whose scores ``norm=lip`` normalises: the suite's GAT/GT and PyG's stock layers (pyg_stack).
LIP_MODELS: tuple[str, ...] = (*BLOCK_ATTENTION_MODELS, "pyg_stack")
#: Guan & He's self-attention GNN (:mod:`lipgnn.models.san`): its own block, norm none | lip only.
SAN_NAME = "san"
#: Models with a fused (CSR) implementation (the config validator's ``FUSED_MODELS``, tested equal).
FUSED_MODELS: tuple[str, ...] = ("gat", "gt", SAN_NAME, "gcn", "ggnn", "gin", "gcnii")
ALL_MODEL_NAMES: tuple[str, ...] = (*MODEL_NAMES, SAN_NAME)
#: Models whose attention heads nonlocal message passing can scale (``model.nonlocal``).
NONLOCAL_MODELS: tuple[str, ...] = ("gat", "gt", SAN_NAME)
INITS: tuple[str, ...] = ("default", "xavier")
NORM_NAMES: tuple[str, ...] = ("none", "pairnorm", "layernorm", "lip")
IMPLS: tuple[str, ...] = ("auto", "pyg", "fused")
LIP_VARIANTS: tuple[str, ...] = ("paper", "reference")
LAYERNORM_MODES: tuple[str, ...] = ("graph", "node")
HEAD_AGGREGATIONS: tuple[str, ...] = ("concat", "mean")
#: ``model.activation``: ``default`` is the model's own choice in :data:`_ACTIVATIONS`.
ACTIVATION_NAMES: tuple[str, ...] = ("default", "relu", "elu", "gelu", "none")
SCORES: tuple[str, ...] = ("dot", "l2")

_ACTIVATIONS: dict[str, type[nn.Module] | None] = {
    "gcn": nn.ReLU,
    "ggnn": None,
    "gin": nn.ReLU,
    "gat": nn.ELU,
    "gt": nn.ELU,
    "pyg_stack": nn.ELU,
    "gcnii": nn.ReLU,
    "san": nn.ReLU,  # the FFN's activation (the attention sublayer has none)
}

_NAMED_ACTIVATIONS: dict[str, type[nn.Module] | None] = {
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "none": None,
}


def activation_class(model: str, activation: str) -> type[nn.Module] | None:
    """The activation module class of ``model.activation`` for ``model`` (``None``: no activation)."""
    activation = _choice(activation, ACTIVATION_NAMES, "model.activation")
    return _ACTIVATIONS[model] if activation == "default" else _NAMED_ACTIVATIONS[activation]


#: Each model and norm key's default: the schemas' (:mod:`lipgnn.config_schema`), the one place of every
#: default; a config that leaves a key out (the bench's, a test's) gets the value a composed config would.
DEFAULTS: dict[str, Any] = schema_defaults(ModelConfig, GCNIIConfig, PygStackConfig, LipNormConfig, PairNormConfig,
                                           LayerNormConfig)
_SCHEMA = object()


def _opt(cfg: Any, key: str, default: Any = _SCHEMA) -> Any:
    """``cfg.key``, or the schema's default of ``key`` (``default`` only for keys the schemas do not have):
    works for DictConfig (struct or not), dataclasses and namespaces."""
    if default is _SCHEMA:
        default = DEFAULTS[key]
    if cfg is None:
        return default
    try:
        value = getattr(cfg, key)
    except AttributeError:  # omegaconf's ConfigAttributeError is an AttributeError
        return default
    return default if value is None else value


def _choice(value: Any, allowed: tuple[str, ...], key: str) -> str:
    value = str(value)
    if value not in allowed:
        raise ConfigError(f"{key}={value} is unknown; choose one of: {', '.join(allowed)}")
    return value


def xavier_init_(module: nn.Module) -> nn.Module:
    """``model.init=xavier``: Xavier-uniform weights and zero biases for every linear map (``nn.Linear``
    and PyG's ``Linear``); embeddings, LayerNorm and attention vectors keep their own init."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, PygLinear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return module


def _nonlocal_options(model_cfg: Any, name: str, aggregation: str) -> NonlocalScale | None:
    if not bool(_opt(model_cfg, "nonlocal")):
        return None
    if name not in NONLOCAL_MODELS:
        raise ConfigError(f"model.nonlocal=true needs an attention model ({', '.join(NONLOCAL_MODELS)}), "
                          f"not model={name}")
    if aggregation != "concat":
        raise ConfigError("model.nonlocal=true scales each head separately; use model.head_aggregation=concat")
    source = _choice(_opt(model_cfg, "nonlocal_source"), NONLOCAL_SOURCES, "model.nonlocal_source")
    return NonlocalScale(source=source, grad=bool(_opt(model_cfg, "nonlocal_grad")))


#: Edges per training step from which ``model.impl=auto`` builds GAT and GT fused on a GPU. On an H100
#: (results/bench/cuda_h100*/) the fused layers were slower than PyG's on PubMed (88,648 edges, every depth)
#: and faster on an ogbn-arxiv-sized graph (1,166,243 edges: 0.41-0.78x PyG's step, 3-5x less memory);
#: between the two nothing is measured, so the switch sits just below the measured large graph.
CUDA_FUSED_MIN_EDGES = 1_000_000


def resolve_impl(impl: str, name: str, device: torch.device | str | None = None, step_edges: int = 0) -> str:
    """``model.impl`` as built: ``auto`` is ``fused`` for a model in ``FUSED_MODELS`` on CPU (``device`` None
    counts as CPU); on other devices ``fused`` for GAT and GT when a training step sees at least
    :data:`CUDA_FUSED_MIN_EDGES` edges (``step_edges``, the dataset's ``DataSpec.step_edges``; 0 = unknown),
    else ``pyg``; ``pyg`` and ``fused`` are themselves."""
    impl = _choice(impl, IMPLS, "model.impl")
    if impl != "auto":
        return impl
    if device is None or torch.device(device).type == "cpu":
        return "fused" if name in FUSED_MODELS else "pyg"
    return "fused" if name in BLOCK_ATTENTION_MODELS and step_edges >= CUDA_FUSED_MIN_EDGES else "pyg"


def attention_conv_classes(impl: str) -> tuple[type[nn.Module], type[nn.Module]]:
    """(GAT class, GT class) for ``model.impl`` — the single switch point between implementations."""
    if impl == "pyg":
        from lipgnn.nn import LipGATConv, LipTransformerConv

        return LipGATConv, LipTransformerConv
    if impl == "fused":
        from lipgnn.nn.fused import FusedLipGATConv, FusedLipTransformerConv

        return FusedLipGATConv, FusedLipTransformerConv
    raise ConfigError(f"model.impl={impl} is unknown; choose one of: {', '.join(IMPLS)}")


def fused_dropout() -> Callable[..., Tensor]:
    """The fused layers' dropout (:func:`lipgnn.nn.fused.dropout.dropout`: equal in distribution to ``F.dropout``,
    compiled on CPU), for a fused model's own dropouts outside its layers."""
    from lipgnn.nn.fused.dropout import dropout

    return dropout


def plain_conv_class(name: str, impl: str) -> type[nn.Module]:
    """The conv of ``gcn``, ``ggnn``, ``gin`` or ``gcnii`` for the *resolved* ``model.impl`` (``pyg`` or
    ``fused``): PyG's layer, or its drop-in CSR twin (same constructor and ``state_dict``): ``FusedGCNConv`` (the
    normalised propagation as one CSR product), ``FusedGatedGraphConv`` (the message sum as one CSR product, a
    compiled GRU cell), ``FusedGINConv`` (the neighbour sum as one CSR product), ``FusedGCN2Conv`` (GCNII: its
    normalised propagation as one CSR product)."""
    stock: dict[str, type[nn.Module]] = {"gcn": GCNConv, "ggnn": GatedGraphConv, "gin": GINConv, "gcnii": GCN2Conv}
    if name not in stock:
        raise ValueError(f"{name} has no plain message-passing conv; expected one of {', '.join(stock)}")
    if impl == "pyg":
        return stock[name]
    if impl == "fused":
        from lipgnn.nn.fused import FusedGatedGraphConv, FusedGCN2Conv, FusedGCNConv, FusedGINConv

        return {"gcn": FusedGCNConv, "ggnn": FusedGatedGraphConv, "gin": FusedGINConv, "gcnii": FusedGCN2Conv}[name]
    raise ConfigError(f"model.impl={impl} is unknown; choose one of: {', '.join(IMPLS)}")


def input_linear_class(impl: str) -> type[nn.Linear]:
    """The encoder's ``Linear`` for the *requested* ``model.impl`` (any model): ``auto`` and ``fused``
    multiply sparse features in CSR form where that is faster
    (:class:`~lipgnn.nn.fused.sparse_input.SparseInputLinear`, which decides per device and density);
    ``pyg`` keeps the stock dense product."""
    if _choice(impl, IMPLS, "model.impl") != "pyg":
        from lipgnn.nn.fused.sparse_input import SparseInputLinear

        return SparseInputLinear
    return nn.Linear


def pair_norm_class(impl: str) -> type[nn.Module]:
    """``norm=pairnorm``'s module for the *requested* ``model.impl`` (any model, as the encoder above): ``auto``
    and ``fused`` take :class:`~lipgnn.nn.fused.pair_norm.FusedPairNorm` (one autograd operation on CPU, PyG's
    forward elsewhere), ``pyg`` the stock ``PairNorm``."""
    if _choice(impl, IMPLS, "model.impl") != "pyg":
        from lipgnn.nn.fused.pair_norm import FusedPairNorm

        return FusedPairNorm
    return PairNorm


def _spec_fields(spec: Any) -> tuple[str, int, tuple[int, ...], int, int | None]:
    """(input, num_features, vocab_sizes, num_classes, edge_dim), validated, from a DataSpec-like."""
    input_kind = str(getattr(spec, "input", "dense"))
    num_features = int(getattr(spec, "num_features", 0) or 0)
    vocab_sizes = tuple(int(v) for v in (getattr(spec, "vocab_sizes", ()) or ()))
    num_classes = int(getattr(spec, "num_classes", 0) or 0)
    edge_dim = getattr(spec, "edge_dim", None)
    edge_dim = None if edge_dim is None else int(edge_dim)
    if input_kind not in ("dense", "embedding"):
        raise ConfigError(f"DataSpec.input={input_kind} is unknown; expected dense or embedding")
    if input_kind == "dense" and num_features < 1:
        raise ConfigError(f"DataSpec.num_features={num_features} for dense input; the loader must set it >= 1")
    if input_kind == "embedding" and (not vocab_sizes or min(vocab_sizes) < 1):
        raise ConfigError(f"DataSpec.vocab_sizes={vocab_sizes} for embedding input; give one size >= 1 per column")
    if num_classes < 1:
        raise ConfigError(f"DataSpec.num_classes={num_classes}; the loader must set it >= 1")
    return input_kind, num_features, vocab_sizes, num_classes, edge_dim


def _score_kwargs(model_cfg: Any, name: str, norm: str, impl: str) -> dict[str, Any]:
    """GT's ``model.score`` (dot | l2, Kim et al. eq. 10) and ``model.tie_qk``; empty for the defaults so
    every other model (and the fused path) is built exactly as before."""
    score = _choice(_opt(model_cfg, "score"), SCORES, "model.score")
    tie_qk = bool(_opt(model_cfg, "tie_qk"))
    if score == "dot" and not tie_qk:
        return {}
    if name != "gt":
        raise ConfigError(f"model.score={score} / model.tie_qk={tie_qk} apply to model=gt only, not model={name}")
    if score == "l2" and norm == "lip":
        raise ConfigError("model.score=l2 with norm=lip: LipschitzNorm (eq. 19) bounds dot-product scores only; "
                          "use norm=none (or layernorm/pairnorm) with model.score=l2")
    return {"score": score, "tie_qk": tie_qk}


def build_model(model_cfg: Any, norm_cfg: Any, spec: Any, depth: int,
                device: torch.device | str | None = None) -> DeepGNN:
    """Build the deep GNN named by ``model_cfg.name`` with normalisation ``norm_cfg.name``.

    Args:
        model_cfg: ``conf/model/*.yaml`` (name, hidden, heads, head_aggregation, dropout, attn_dropout,
            residual, impl, gcnii_alpha, gcnii_theta, layer_norm, activation).
        norm_cfg: ``conf/norm/*.yaml`` (name; scale, scale_individually; affine, mode; alpha, formula, layernorm).
            A key either config leaves out takes the schema's default (:data:`DEFAULTS`).
        spec: the dataset's :class:`~lipgnn.data.spec.DataSpec` (duck-typed).
        depth: number of message-passing layers (>= 1).
        device: where the model will run; only ``model.impl=auto`` reads it (:func:`resolve_impl`).

    Raises:
        ConfigError: unknown names, ``depth < 1``, ``hidden`` not divisible by ``heads`` with concat,
            ``norm=lip`` on a model without attention, ``impl=fused`` unavailable or on a non-attention
            model.
    """
    name = _opt(model_cfg, "name", None)
    if name is None or str(name) not in ALL_MODEL_NAMES:
        raise ConfigError(f"model.name={name} is unknown; choose one of: {', '.join(ALL_MODEL_NAMES)}")
    name = str(name)
    init = _choice(_opt(model_cfg, "init"), INITS, "model.init")
    if name == SAN_NAME:
        net = _build_san(model_cfg, norm_cfg, spec, depth, device)
    else:
        net = _build_gnn(name, model_cfg, norm_cfg, spec, depth, device)
    return xavier_init_(net) if init == "xavier" else net


def _build_gnn(name: str, model_cfg: Any, norm_cfg: Any, spec: Any, depth: Any,
               device: torch.device | str | None = None) -> DeepGNN:
    """The six block models of :data:`MODEL_NAMES` (module docstring)."""
    norm = _choice(_opt(norm_cfg, "name", "none"), NORM_NAMES, "norm.name")
    if isinstance(depth, bool) or int(depth) != depth or int(depth) < 1:
        raise ConfigError(f"depth={depth} is invalid; the number of message-passing layers must be an integer >= 1")
    depth = int(depth)

    hidden = int(_opt(model_cfg, "hidden"))
    if hidden < 1:
        raise ConfigError(f"model.hidden={hidden} is invalid; set a hidden width >= 1")
    dropout = float(_opt(model_cfg, "dropout"))
    attn_dropout = float(_opt(model_cfg, "attn_dropout"))
    for key, p in (("model.dropout", dropout), ("model.attn_dropout", attn_dropout)):
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"{key}={p} is invalid; a dropout probability must lie in [0, 1)")
    residual = bool(_opt(model_cfg, "residual"))
    requested_impl = _opt(model_cfg, "impl")
    impl = resolve_impl(requested_impl, name, device, int(getattr(spec, "step_edges", 0)))
    placement = _choice(_opt(model_cfg, "layer_norm"), LN_PLACEMENTS, "model.layer_norm")
    act_cls = activation_class(name, _opt(model_cfg, "activation"))

    if norm == "lip" and name not in LIP_MODELS:
        raise ConfigError(
            f"norm=lip needs an attention model ({', '.join(LIP_MODELS)}); "
            f"model={name} has no attention scores to normalize"
        )
    if impl == "fused" and name not in FUSED_MODELS:
        raise ConfigError(
            f"model.impl=fused exists only for {', '.join(FUSED_MODELS)}; "
            f"use model.impl=pyg for model={name}"
        )

    score_kwargs = _score_kwargs(model_cfg, name, norm, impl)
    input_kind, num_features, vocab_sizes, num_classes, edge_dim = _spec_fields(spec)

    # One NonlocalScale per block (each keeps its last factors for diagnostics); None without nonlocal.
    aggregation = str(_opt(model_cfg, "head_aggregation"))
    _nonlocal_options(model_cfg, name, aggregation)  # validates before anything is built

    # Per-model conv factory: layer index -> (conv, how to call it).
    if name in LIP_MODELS:
        heads = int(_opt(model_cfg, "heads"))
        if heads < 1:
            raise ConfigError(f"model.heads={heads} is invalid; use at least one attention head")
        aggregation = _choice(_opt(model_cfg, "head_aggregation"), HEAD_AGGREGATIONS,
                              "model.head_aggregation")
        concat = aggregation == "concat"
        if concat and hidden % heads != 0:
            raise ConfigError(
                f"model.hidden={hidden} is not divisible by model.heads={heads} (head_aggregation=concat "
                f"splits hidden over heads); choose heads dividing hidden or head_aggregation=mean"
            )
        channels = hidden // heads if concat else hidden
        lip_kwargs: dict[str, Any] = {"lipschitz_norm": norm == "lip"}
        if norm == "lip":
            lip_kwargs["alpha"] = float(_opt(norm_cfg, "alpha"))
            lip_kwargs["variant"] = _choice(_opt(norm_cfg, "formula"), LIP_VARIANTS, "norm.formula")
        gat_cls, gt_cls = attention_conv_classes(impl)
        if impl == "fused" and act_cls is nn.ELU:
            from lipgnn.nn.fused import ELU as FusedELU  # the same function, one compiled loop on CPU

            act_cls = FusedELU

        def make_conv(layer: int) -> tuple[nn.Module, str]:
            if name == "pyg_stack":
                return _pyg_stack_conv(model_cfg, norm_cfg, norm, hidden, channels, heads, concat, attn_dropout,
                                       edge_dim, requested_impl, device), "attention"
            if name == "gat":
                conv = gat_cls(hidden, channels, heads=heads, concat=concat, dropout=attn_dropout,
                               add_self_loops=True, edge_dim=edge_dim, **lip_kwargs)
            else:
                conv = gt_cls(hidden, channels, heads=heads, concat=concat, dropout=attn_dropout,
                              edge_dim=edge_dim, root_weight=True, **lip_kwargs, **score_kwargs)
            return conv, "attention"
    elif name == "gcn":
        gcn_cls = plain_conv_class(name, impl)

        def make_conv(layer: int) -> tuple[nn.Module, str]:
            return gcn_cls(hidden, hidden), "plain"
    elif name == "ggnn":
        ggnn_cls = plain_conv_class(name, impl)

        def make_conv(layer: int) -> tuple[nn.Module, str]:
            return ggnn_cls(hidden, num_layers=1), "plain"
    elif name == "gin":
        gin_cls = plain_conv_class(name, impl)

        def make_conv(layer: int) -> tuple[nn.Module, str]:
            # Alon & Yahav's TREES GIN (the only GIN experiment): Linear-BN-ReLU-Linear-BN-ReLU;
            # plain_last=False puts BatchNorm and ReLU after the second Linear too.
            return gin_cls(MLP([hidden, hidden, hidden], norm="batch_norm", plain_last=False)), "plain"
    else:  # gcnii
        gcnii_alpha = float(_opt(model_cfg, "gcnii_alpha"))
        gcnii_theta = float(_opt(model_cfg, "gcnii_theta"))

        gcn2_cls = plain_conv_class(name, impl)

        def make_conv(layer: int) -> tuple[nn.Module, str]:
            return gcn2_cls(hidden, alpha=gcnii_alpha, theta=gcnii_theta, layer=layer + 1), "initial"

    # Normalisation modules are built per layer (LayerNorm has per-layer affine parameters).
    if norm == "pairnorm":
        pn_scale = float(_opt(norm_cfg, "scale"))
        pn_si = bool(_opt(norm_cfg, "scale_individually"))
        pair_norm_cls = pair_norm_class(requested_impl)
    elif norm == "layernorm":
        ln_affine = bool(_opt(norm_cfg, "affine"))
        ln_mode = _choice(_opt(norm_cfg, "mode"), LAYERNORM_MODES, "norm.mode")
    # norm=lip with norm.layernorm=graph|node: the authors' GT option lipschitznorm+layernorm, LipschitzNorm in the
    # scores and the same LayerNorm slot as norm=layernorm (after the conv, before the activation; affine).
    lip_ln = _choice(_opt(norm_cfg, "layernorm"), ("none", *LAYERNORM_MODES), "norm.layernorm") \
        if norm == "lip" else "none"
    if lip_ln != "none":
        ln_affine, ln_mode = True, lip_ln

    # model.act_on_last (absent = false): the activation on the last block too, as in Alon & Yahav's TREES
    # layers, whose readout is a separate Linear.
    act_on_last = name == "gcnii" or bool(_opt(model_cfg, "act_on_last"))
    blocks: list[GNNBlock] = []
    for layer in range(depth):
        conv, call = make_conv(layer)
        is_last = layer == depth - 1
        blocks.append(
            GNNBlock(
                conv,
                call,
                dropout=dropout,
                layer_norm=LayerNorm(hidden, affine=ln_affine, mode=ln_mode)
                if norm == "layernorm" or lip_ln != "none" else None,
                act=act_cls() if act_cls is not None and (act_on_last or not is_last) else None,
                pair_norm=pair_norm_cls(scale=pn_scale, scale_individually=pn_si) if norm == "pairnorm" else None,
                residual=residual,
                placement=placement,
                block_norm=nn.LayerNorm(hidden) if placement != "none" else None,
                nonlocal_mp=_nonlocal_options(model_cfg, name, aggregation),
            )
        )

    encoder: nn.Module = (
        EmbeddingSum(vocab_sizes, hidden) if input_kind == "embedding"
        else input_linear_class(requested_impl)(num_features, hidden)
    )
    gcnii = name == "gcnii"
    return DeepGNN(
        encoder,
        blocks,
        nn.Linear(hidden, num_classes),
        input_activation=nn.ReLU() if gcnii else None,
        input_dropout=dropout if gcnii else 0.0,
        head_dropout=dropout if gcnii else 0.0,
        dropout_fn=fused_dropout() if gcnii and impl == "fused" else F.dropout,
        uses_edge_attr=edge_dim is not None and name in LIP_MODELS,
        model_name=name,
        norm_name=norm,
    )


def _pyg_stack_conv(model_cfg: Any, norm_cfg: Any, norm: str, hidden: int, channels: int, heads: int, concat: bool,
                    attn_dropout: float, edge_dim: int | None, requested_impl: str,
                    device: torch.device | str | None) -> nn.Module:
    """``model=pyg_stack``'s conv: PyG's stock ``GATConv`` / ``GATv2Conv`` / ``TransformerConv`` (``model.conv``),
    with ``norm=lip`` passed through :func:`lipgnn.nn.lipschitz_norm` (its fused CPU twin where one exists and
    ``model.impl`` is not ``pyg``)."""
    from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv

    from lipgnn.nn.wrap import lipschitz_norm

    kind = _choice(_opt(model_cfg, "conv"), PYG_STACK_CONVS, "model.conv")
    common = {"heads": heads, "concat": concat, "dropout": attn_dropout, "edge_dim": edge_dim}
    if kind == "gat":
        conv: nn.Module = GATConv(hidden, channels, add_self_loops=True, **common)
    elif kind == "gatv2":
        conv = GATv2Conv(hidden, channels, add_self_loops=True, **common)
    else:
        conv = TransformerConv(hidden, channels, root_weight=True, **common)
    if norm != "lip":
        return conv
    on_cpu = device is None or torch.device(device).type == "cpu"
    impl = "pyg" if requested_impl == "pyg" or not on_cpu else ("fused" if requested_impl == "fused" else "auto")
    formula = _choice(_opt(norm_cfg, "formula"), LIP_VARIANTS, "norm.formula")
    return lipschitz_norm(conv, float(_opt(norm_cfg, "alpha")), variant=formula, impl=impl)


def _build_san(model_cfg: Any, norm_cfg: Any, spec: Any, depth: Any,
               device: torch.device | str | None = None) -> DeepGNN:
    """Guan & He's SAN (:mod:`lipgnn.models.san`): dropout + MLP encoder, ``depth`` SAN blocks, linear decoder."""
    norm = _choice(_opt(norm_cfg, "name", "none"), NORM_NAMES, "norm.name")
    if norm not in ("none", "lip"):
        raise ConfigError(f"norm={norm} does not apply to model=san (its LayerNorm is model.layer_norm); "
                          "use norm=none or norm=lip")
    if isinstance(depth, bool) or int(depth) != depth or int(depth) < 1:
        raise ConfigError(f"depth={depth} is invalid; the number of message-passing layers must be an integer >= 1")
    hidden = int(_opt(model_cfg, "hidden"))
    heads = int(_opt(model_cfg, "heads"))
    if hidden < 1 or heads < 1 or hidden % heads != 0:
        raise ConfigError(f"model.hidden={hidden} and model.heads={heads} are invalid for model=san: "
                          "use hidden >= 1 and heads >= 1 dividing hidden (head size = hidden / heads)")
    ffn_hidden = int(_opt(model_cfg, "ffn_hidden"))
    encoder_layers = _opt(model_cfg, "encoder_layers")
    if isinstance(encoder_layers, bool) or encoder_layers not in (1, 2):
        raise ConfigError(f"model.encoder_layers={encoder_layers} is invalid for model=san; use 1 (one Linear) or 2 "
                          "(Linear -> activation -> Linear)")
    if ffn_hidden < 1:
        raise ConfigError(f"model.ffn_hidden={ffn_hidden} is invalid; set the FFN width >= 1")
    dropout = float(_opt(model_cfg, "dropout"))
    attn_dropout = float(_opt(model_cfg, "attn_dropout"))
    for key, p in (("model.dropout", dropout), ("model.attn_dropout", attn_dropout)):
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"{key}={p} is invalid; a dropout probability must lie in [0, 1)")
    requested_impl = _opt(model_cfg, "impl")
    impl = resolve_impl(requested_impl, SAN_NAME, device)
    placement = _choice(_opt(model_cfg, "layer_norm"), LN_PLACEMENTS, "model.layer_norm")
    act_cls = activation_class(SAN_NAME, _opt(model_cfg, "activation"))
    aggregation = _choice(_opt(model_cfg, "head_aggregation"), HEAD_AGGREGATIONS, "model.head_aggregation")
    if aggregation != "concat":
        raise ConfigError("model=san concatenates its heads (MP = (P_1 X V_1 || ... || P_h X V_h) W); "
                          "use model.head_aggregation=concat")
    lip_kwargs: dict[str, Any] = {"lipschitz_norm": norm == "lip"}
    if norm == "lip":
        lip_kwargs["alpha"] = float(_opt(norm_cfg, "alpha"))
        lip_kwargs["variant"] = _choice(_opt(norm_cfg, "formula"), LIP_VARIANTS, "norm.formula")
    _, gt_cls = attention_conv_classes(impl)
    input_kind, num_features, vocab_sizes, num_classes, _ = _spec_fields(spec)

    blocks = []
    for _layer in range(int(depth)):
        # root_weight=False: MP has no skip term (the block's residual is the skip); bias=False: Q, K, V
        # are the paper's linear maps K X, Q X, X V_i.
        conv = gt_cls(hidden, hidden // heads, heads=heads, concat=True, dropout=attn_dropout, root_weight=False,
                      bias=False, **lip_kwargs)
        blocks.append(SANBlock(conv, hidden, ffn_hidden, placement, act_cls,
                               _nonlocal_options(model_cfg, SAN_NAME, aggregation)))
    if input_kind == "embedding":
        encoder: nn.Module = EmbeddingSum(vocab_sizes, hidden)
    else:
        # The paper's "dropout, and a MLP" (App. B.1), its depth unstated: model.encoder_layers = 1 (Linear) or
        # 2 (Linear -> act -> Linear); results/reproduction/guan_he.md measures which reproduces its energies.
        layers: list[nn.Module] = [nn.Dropout(dropout), input_linear_class(requested_impl)(num_features, hidden)]
        if encoder_layers == 2:
            if act_cls is not None:
                layers.append(act_cls())
            layers.append(nn.Linear(hidden, hidden))
        encoder = DroppedInputMLP(*layers)
    return DeepGNN(encoder, blocks, nn.Linear(hidden, num_classes), self_loops=True, model_name=SAN_NAME,
                   norm_name=norm)
