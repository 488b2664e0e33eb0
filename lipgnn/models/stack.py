"""The pieces every model family's builder (:mod:`lipgnn.models.families`) assembles a :class:`DeepGNN` from:
the implementation switch (``model.impl``), the layer classes per implementation, the activation, the
per-block norms, and :func:`deep_stack`, the generic deep block model.

``model.impl=auto`` (the schema's default) builds the layers of every family that has a fused twin
(``ModelFamily.fused``) ``fused`` on CPU and ``pyg`` elsewhere, except the families marked
``fused_on_cuda`` (GAT, GT) on graphs whose training step sees :data:`CUDA_FUSED_MIN_EDGES` edges or more
(:func:`resolve_impl`: the fused path's speed comes from compiled CPU loops; on an H100 its CUDA twins were
slower than PyG's layers on Planetoid-sized graphs and faster on ogbn-arxiv's size, docs/performance.md), and
gives every model the sparse-feature encoder (:func:`input_linear_class`) and PairNorm
(:func:`pair_norm_class`); ``pyg`` is stock throughout. The layer classes are chosen in two places:
:func:`attention_conv_classes` (GAT, GT, SAN): ``pyg`` → ``lipgnn.nn``; ``fused`` → ``lipgnn.nn.fused``
(imported lazily), which must provide ``FusedLipGATConv`` and ``FusedLipTransformerConv`` with the
constructors of ``LipGATConv`` / ``LipTransformerConv``, and the ELU those blocks use
(``lipgnn.nn.fused.ELU``: the same function as ``torch.nn.ELU``, a compiled loop on CPU, which a fused
GAT layer applies together with its bias); :func:`plain_conv_class` (GCN, GGNN, GIN, GCNII): PyG's layer or
its drop-in CSR twin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GatedGraphConv, GCN2Conv, GCNConv, GINConv
from torch_geometric.nn.dense.linear import Linear as PygLinear
from torch_geometric.nn.norm import LayerNorm, PairNorm

from lipgnn.config_schema import FAMILIES, LayerNormConfig, LipNormConfig, ModelConfig, PairNormConfig
from lipgnn.errors import ConfigError
from lipgnn.models.blocks import EmbeddingSum, GNNBlock
from lipgnn.models.deep import DeepGNN
from lipgnn.models.nonlocal_mp import NonlocalScale

IMPLS: tuple[str, ...] = ("auto", "pyg", "fused")

#: ``model.activation`` other than ``default`` (which is the family's own, passed by its builder).
_NAMED_ACTIVATIONS: dict[str, type[nn.Module] | None] = {
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "none": None,
}

#: Edges per training step from which ``model.impl=auto`` builds GAT and GT fused on a GPU. On an H100
#: (results/bench/cuda_h100*/) the fused layers were slower than PyG's on PubMed (88,648 edges, every depth)
#: and faster on an ogbn-arxiv-sized graph (1,166,243 edges: 0.41-0.78x PyG's step, 3-5x less memory);
#: between the two nothing is measured, so the switch sits just below the measured large graph.
CUDA_FUSED_MIN_EDGES = 1_000_000


@dataclass(frozen=True)
class Build:
    """What a family's builder receives (:func:`lipgnn.models.build_model` makes it): the typed configs, the
    dataset's :class:`~lipgnn.data.spec.DataSpec` (duck-typed), the depth, and ``model.impl`` as built."""

    model: ModelConfig
    norm: Any  # a NormConfig (PairNormConfig, LayerNormConfig, LipNormConfig)
    spec: Any
    depth: int
    device: torch.device | str | None
    impl: str  # resolved: pyg | fused


def _impl(impl: str) -> str:
    if impl not in IMPLS:
        raise ConfigError(f"model.impl={impl} is unknown; choose one of: {', '.join(IMPLS)}")
    return impl


def resolve_impl(impl: str, name: str, device: torch.device | str | None = None, step_edges: int = 0) -> str:
    """``model.impl`` as built: ``auto`` is ``fused`` for a family with a fused twin on CPU (``device`` None
    counts as CPU); on other devices ``fused`` for the ``fused_on_cuda`` families (GAT, GT) when a training
    step sees at least :data:`CUDA_FUSED_MIN_EDGES` edges (``step_edges``, the dataset's
    ``DataSpec.step_edges``; 0 = unknown), else ``pyg``; ``pyg`` and ``fused`` are themselves."""
    if _impl(impl) != "auto":
        return impl
    family = FAMILIES.get(name)
    if device is None or torch.device(device).type == "cpu":
        return "fused" if family is not None and family.fused else "pyg"
    on_cuda = family is not None and family.fused_on_cuda
    return "fused" if on_cuda and step_edges >= CUDA_FUSED_MIN_EDGES else "pyg"


def attention_conv_classes(impl: str) -> tuple[type[nn.Module], type[nn.Module]]:
    """(GAT class, GT class) for ``model.impl`` — the single switch point between implementations."""
    if _impl(impl) == "pyg":
        from lipgnn.nn import LipGATConv, LipTransformerConv

        return LipGATConv, LipTransformerConv
    if impl == "fused":
        from lipgnn.nn.fused import FusedLipGATConv, FusedLipTransformerConv

        return FusedLipGATConv, FusedLipTransformerConv
    raise ConfigError(f"model.impl={impl} is not resolved; pass pyg or fused (lipgnn.models.resolve_impl)")


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
    raise ConfigError(f"model.impl={impl} is unknown; choose one of: {', '.join(IMPLS[1:])} (resolved)")


def input_linear_class(impl: str) -> type[nn.Linear]:
    """The encoder's ``Linear`` for the *requested* ``model.impl`` (any model): ``auto`` and ``fused``
    multiply sparse features in CSR form where that is faster
    (:class:`~lipgnn.nn.fused.sparse_input.SparseInputLinear`, which decides per device and density);
    ``pyg`` keeps the stock dense product."""
    if _impl(impl) != "pyg":
        from lipgnn.nn.fused.sparse_input import SparseInputLinear

        return SparseInputLinear
    return nn.Linear


def pair_norm_class(impl: str) -> type[nn.Module]:
    """``norm=pairnorm``'s module for the *requested* ``model.impl`` (any model, as the encoder above): ``auto``
    and ``fused`` take :class:`~lipgnn.nn.fused.pair_norm.FusedPairNorm` (one autograd operation on CPU, PyG's
    forward elsewhere), ``pyg`` the stock ``PairNorm``."""
    if _impl(impl) != "pyg":
        from lipgnn.nn.fused.pair_norm import FusedPairNorm

        return FusedPairNorm
    return PairNorm


def xavier_init_(module: nn.Module) -> nn.Module:
    """``model.init=xavier``: Xavier-uniform weights and zero biases for every linear map (``nn.Linear``
    and PyG's ``Linear``); embeddings, LayerNorm and attention vectors keep their own init."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, PygLinear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return module


def activation_class(model: ModelConfig, default: type[nn.Module] | None) -> type[nn.Module] | None:
    """The activation module class of ``model.activation`` (``default``: the family's own; ``None``: none)."""
    return default if model.activation == "default" else _NAMED_ACTIVATIONS[model.activation]


def lip_kwargs(norm: Any) -> dict[str, Any]:
    """The Lip attention layers' LipschitzNorm arguments: off unless ``norm=lip`` (eq. 17 GAT, eq. 19 GT)."""
    if not isinstance(norm, LipNormConfig):
        return {"lipschitz_norm": False}
    return {"lipschitz_norm": True, "alpha": float(norm.alpha), "variant": norm.formula}


def attention_heads(model: ModelConfig) -> tuple[int, bool, int]:
    """(heads, concat, channels per head): ``c = hidden // heads`` with ``head_aggregation=concat`` (the width
    stays ``hidden``), ``c = hidden`` with ``mean``."""
    concat = model.head_aggregation == "concat"
    return model.heads, concat, model.hidden // model.heads if concat else model.hidden


def nonlocal_scale(model: ModelConfig) -> NonlocalScale | None:
    """One :class:`NonlocalScale` per block with ``model.nonlocal`` (each keeps its last factors for
    diagnostics), None without."""
    return NonlocalScale(source=model.nonlocal_source, grad=model.nonlocal_grad) if model.nonlocal_ else None


def spec_fields(spec: Any) -> tuple[str, int, tuple[int, ...], int, int | None]:
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


def encoder(b: Build, input_kind: str, num_features: int, vocab_sizes: tuple[int, ...]) -> nn.Module:
    """The input encoder: one embedding per token column (TREES) or a ``Linear`` of the requested impl."""
    hidden = b.model.hidden
    if input_kind == "embedding":
        return EmbeddingSum(vocab_sizes, hidden)
    return input_linear_class(b.model.impl)(num_features, hidden)


#: A family's conv factory: layer index -> (conv, how GNNBlock calls it: attention | plain | initial).
ConvFactory = Callable[[int], tuple[nn.Module, str]]


def deep_stack(b: Build, make_conv: ConvFactory, act_cls: type[nn.Module] | None, *, attention: bool = False,
               act_on_last: bool = False, initial_residual: bool = False) -> DeepGNN:
    """``depth`` :class:`GNNBlock` s of ``make_conv``'s convs between an encoder and a ``Linear`` head.

    Every block: dropout -> conv -> [LayerNorm] -> activation (not after the last block unless ``act_on_last``
    or ``model.act_on_last``) -> [PairNorm], wrapped by ``model.residual`` and ``model.layer_norm`` (order:
    :mod:`lipgnn.models.blocks`). ``attention``: the convs read edge features where the spec has them.
    ``initial_residual`` (GCNII): ``x_0 = ReLU(Linear(Dropout(x)))`` and a dropout before the head.
    """
    model, norm, hidden = b.model, b.norm, b.model.hidden
    input_kind, num_features, vocab_sizes, num_classes, edge_dim = spec_fields(b.spec)
    # Normalisation modules are built per layer (LayerNorm has per-layer affine parameters). norm=lip with
    # norm.layernorm=graph|node: the authors' GT option lipschitznorm+layernorm, LipschitzNorm in the scores and
    # the same LayerNorm slot as norm=layernorm (after the conv, before the activation; affine).
    layer_norm: tuple[bool, str] | None = None
    if isinstance(norm, LayerNormConfig):
        layer_norm = (norm.affine, norm.mode)
    elif isinstance(norm, LipNormConfig) and norm.layernorm != "none":
        layer_norm = (True, norm.layernorm)
    pair_norm_cls = pair_norm_class(model.impl) if isinstance(norm, PairNormConfig) else None
    # model.act_on_last: the activation on the last block too, as in Alon & Yahav's TREES layers, whose
    # readout is a separate Linear.
    act_on_last = act_on_last or model.act_on_last
    blocks: list[GNNBlock] = []
    for layer in range(b.depth):
        conv, call = make_conv(layer)
        is_last = layer == b.depth - 1
        blocks.append(
            GNNBlock(
                conv,
                call,
                dropout=model.dropout,
                layer_norm=LayerNorm(hidden, affine=layer_norm[0], mode=layer_norm[1]) if layer_norm else None,
                act=act_cls() if act_cls is not None and (act_on_last or not is_last) else None,
                pair_norm=pair_norm_cls(scale=norm.scale, scale_individually=norm.scale_individually)
                if pair_norm_cls is not None else None,
                residual=model.residual,
                placement=model.layer_norm,
                block_norm=nn.LayerNorm(hidden) if model.layer_norm != "none" else None,
                nonlocal_mp=nonlocal_scale(model),
            )
        )
    return DeepGNN(
        encoder(b, input_kind, num_features, vocab_sizes),
        blocks,
        nn.Linear(hidden, num_classes),
        input_activation=nn.ReLU() if initial_residual else None,
        input_dropout=model.dropout if initial_residual else 0.0,
        head_dropout=model.dropout if initial_residual else 0.0,
        dropout_fn=fused_dropout() if initial_residual and b.impl == "fused" else F.dropout,
        uses_edge_attr=edge_dim is not None and attention,
        model_name=model.name,
        norm_name=norm.name,
    )


def attention_stack(b: Build, make_conv: ConvFactory) -> DeepGNN:
    """:func:`deep_stack` of attention convs (GAT, GT, PyG's stock layers): ELU by default (the authors' deep
    GAT/GT), the fused ELU with fused layers (the same function, one compiled loop on CPU)."""
    act_cls = activation_class(b.model, nn.ELU)
    if b.impl == "fused" and act_cls is nn.ELU:
        from lipgnn.nn.fused import ELU as FusedELU

        act_cls = FusedELU
    return deep_stack(b, make_conv, act_cls, attention=True)
