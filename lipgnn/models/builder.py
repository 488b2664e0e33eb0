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

``model.impl`` (auto | pyg | fused) and the layer classes per implementation: :mod:`lipgnn.models.stack`.

Each family is one builder module in :mod:`lipgnn.models.families`, registered by name
(:mod:`lipgnn.models.registry`); what it is (attention, fused twin, label) is its row of
:data:`lipgnn.config_schema.FAMILIES`. :func:`build_model` reads the configs as the schema's dataclasses
(:func:`lipgnn.config.typed`: one default per key, ranges checked there), applies the rules that join model and
norm keys (:func:`lipgnn.config.check_model`) and calls the family's builder.
"""

from __future__ import annotations

from typing import Any

import torch

import lipgnn.models.families  # noqa: F401  (registers every family's builder)
from lipgnn.config import check_model, typed
from lipgnn.config_schema import (
    ATTENTION_MODELS,
    FAMILIES,
    FUSED_MODELS,
    MODEL_SCHEMAS,
    NONLOCAL_MODELS,
    NORM_SCHEMAS,
    NORMS,
)
from lipgnn.errors import ConfigError
from lipgnn.models.deep import DeepGNN
from lipgnn.models.registry import model_builder, registered_models
from lipgnn.models.stack import (
    CUDA_FUSED_MIN_EDGES,
    Build,
    attention_conv_classes,
    plain_conv_class,
    resolve_impl,
    xavier_init_,
)

#: Every registered family, and the ones built from the generic deep block (SAN has a block of its own).
ALL_MODEL_NAMES: tuple[str, ...] = registered_models()
MODEL_NAMES: tuple[str, ...] = tuple(name for name in ALL_MODEL_NAMES if name != "san")
#: The attention families built from the generic deep block whose scores ``norm=lip`` normalises.
LIP_MODELS: tuple[str, ...] = tuple(name for name in MODEL_NAMES if name in ATTENTION_MODELS)
#: The attention families with the suite's own Lip layers (``model.impl=auto`` may build them fused on CUDA).
BLOCK_ATTENTION_MODELS: tuple[str, ...] = tuple(name for name, f in FAMILIES.items() if f.fused_on_cuda)
NORM_NAMES: tuple[str, ...] = NORMS

__all__ = ["ALL_MODEL_NAMES", "BLOCK_ATTENTION_MODELS", "CUDA_FUSED_MIN_EDGES", "FUSED_MODELS", "LIP_MODELS",
           "MODEL_NAMES", "NONLOCAL_MODELS", "NORM_NAMES", "attention_conv_classes", "build_model",
           "plain_conv_class", "resolve_impl", "xavier_init_"]


def build_model(model_cfg: Any, norm_cfg: Any, spec: Any, depth: int,
                device: torch.device | str | None = None) -> DeepGNN:
    """Build the deep GNN of family ``model_cfg.name`` with normalisation ``norm_cfg.name``.

    Args:
        model_cfg: a :class:`~lipgnn.config_schema.ModelConfig` (or its family's subclass); a composed
            ``cfg.model``, a mapping or a namespace is converted by :func:`lipgnn.config.typed` (a key it
            leaves out takes the schema's default).
        norm_cfg: a :class:`~lipgnn.config_schema.NormConfig` subclass, or what :func:`typed` converts.
        spec: the dataset's :class:`~lipgnn.data.spec.DataSpec` (duck-typed).
        depth: number of message-passing layers (>= 1).
        device: where the model will run; only ``model.impl=auto`` reads it (:func:`resolve_impl`).

    Raises:
        ConfigError: a value the schema refuses, ``depth < 1``, an unregistered family, or a rule joining
            model and norm keys (:func:`lipgnn.config.check_model`).
    """
    model, norm = typed(model_cfg, "model"), typed(norm_cfg, "norm")
    builder = model_builder(model.name)
    if not (isinstance(model, MODEL_SCHEMAS[model.name]) and isinstance(norm, NORM_SCHEMAS.get(norm.name, ()))):
        raise ConfigError(f"model={model.name} / norm={norm.name} given as {type(model).__name__} / "
                          f"{type(norm).__name__}; pass their schemas' dataclasses or the config nodes")
    if isinstance(depth, bool) or int(depth) != depth or int(depth) < 1:
        raise ConfigError(f"depth={depth} is invalid; the number of message-passing layers must be an integer >= 1")
    check_model(model, norm)
    impl = resolve_impl(model.impl, model.name, device, int(getattr(spec, "step_edges", 0)))
    net = builder(Build(model, norm, spec, int(depth), device, impl))
    return xavier_init_(net) if model.init == "xavier" else net
