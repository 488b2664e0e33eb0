r"""Why a deep SAN stops learning: per-layer quantities recorded while it trains (Guan & He's 256-layer Post-LN
and nonlocal SANs, which stay at one train accuracy from early on).

Every ``every``-th epoch (and at initialisation, epoch 0, and at the last epoch), the model is measured in eval
mode, without gradients and without drawing random numbers, and the input encoder's choice of product is left as
it was, so the training run is the same as without the monitor (bit for bit, tested). For :math:`X^0` (the
encoder output) and the block outputs :math:`X^1, \dots, X^L`, and for block :math:`k` with attention input
:math:`Z^k` (:math:`X^{k-1}` for Post-LN and no LN, :math:`\mathrm{LN}_1(X^{k-1})` for Pre-LN) and
attention matrices :math:`P^k_h` (Table 1: softmax over a node's neighbours and itself):

* Dirichlet energy (§2, :math:`m = 1`, :math:`\omega = 1`, :math:`\mu = \deg + 1`), raw and over the mean squared
  row norm (scale-free: 0 iff all rows are equal, the over-smoothed limit of Definition 2.2):

  .. math::
      \mathcal{E}_1(X) = \frac{1}{n}\sum_i \sum_{j \sim i} |X(j) - X(i)|^2, \qquad
      \hat{\mathcal{E}}_1(X) = \mathcal{E}_1(X) \Big/ \tfrac{1}{n}\|X\|_F^2

* effective rank (Roy & Vetterli 2007) of :math:`X^k`, :math:`\exp(-\sum_r p_r \log p_r)` with
  :math:`p_r = \sigma_r / \sum_s \sigma_s` its singular values: 1 when every row is a multiple of one vector
  (a LayerNorm output collapsed to rank one), :math:`d` at most;
* attention entropy of block :math:`k`, the mean over heads and nodes of each node's attention distribution,
  against the uniform distribution's :math:`\frac{1}{n}\sum_i \log(\deg_i + 1)` (the self-loop included):

  .. math::
      H^k = \frac{1}{h n} \sum_{h'} \sum_i -\sum_{j \in \mathcal{N}(i) \cup \{i\}} (P^k_{h'})_{ij} \log (P^k_{h'})_{ij}

* the nonlocal factor of §4.1 on the attention input, mean over heads,
  :math:`\frac{1}{h}\sum_{h'} \frac{1}{n}\|P^k_{h'} Z^k - Z^k\|^2` (NonlocalMP's gain; measured for every variant);
* gradient norms of the loss of that epoch's training step (taken after the step, before the next epoch clears
  them), per block over all its parameters and over its attention parameters :math:`W_Q, W_K`
  (:func:`lipgnn.models.grad_norms.attention_parameters`), and of the encoder and the decoder:
  :math:`\|\nabla_{\theta} \mathcal{L}\|_2 = (\sum_{p \in \theta} \|\nabla_p \mathcal{L}\|_2^2)^{1/2}`.

The per-epoch loss and accuracies are the training record's own ``history``. :class:`CollapseMonitor` takes the
per-epoch hook the :class:`~lipgnn.train.trainer.Trainer` has, its logger's ``log_epoch`` (called after each
evaluated epoch's step), wraps the run's logger and forwards every call to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter, softmax

from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.diagnostics.tracing import trace_layers
from lipgnn.models.grad_norms import attention_parameters
from lipgnn.models.nonlocal_mp import head_laplacian_energy

DEFINITION = ("E_1(X^k) = (1/n) sum_i sum_{j~i} |X(j)-X(i)|^2 (Guan & He §2, omega=1, mu=deg+1), energy_norm = "
              "E_1 / ((1/n)||X||_F^2), rank = effective rank exp(H(sigma/sum sigma)), entropy = mean over heads and "
              "nodes of -sum_j P_ij log P_ij over neighbours + self (baseline mean log(deg+1)), nonlocal = mean over "
              "heads of (1/n)||P_h Z - Z||^2 (§4.1), grad = ||dL/dtheta_block||_2 of that epoch's step, grad_att over "
              "W_Q, W_K; k=0 is the encoder output, block k's attention input Z is X^(k-1) (LN_1(X^(k-1)) for Pre-LN)")
#: The per-layer series a snapshot holds: over X^0..X^L (``LAYER_SERIES``) or over blocks 1..L (``BLOCK_SERIES``).
LAYER_SERIES: tuple[str, ...] = ("energy", "energy_norm", "rank")
BLOCK_SERIES: tuple[str, ...] = ("entropy", "nonlocal", "grad", "grad_att")
#: Significant digits kept in the record (a 256-layer run keeps ~7 x 257 numbers per snapshot).
DIGITS = 5


def effective_rank(x: Tensor) -> float:
    r""":math:`\exp(-\sum_r p_r \log p_r)`, :math:`p_r = \sigma_r / \sum_s \sigma_s` (Roy & Vetterli 2007);
    0 for a zero matrix."""
    sigma = torch.linalg.svdvals(x.detach().double())
    total = sigma.sum()
    if float(total) == 0.0:
        return 0.0
    p = sigma / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def attention_entropy(logits: Tensor, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """The per-head attention weights ``[E, H]`` from their softmax inputs (softmax over each target's incoming
    edges, as the layers compute it) and the mean over heads and nodes of each node's entropy."""
    target = edge_index[1]
    alpha = softmax(logits.double(), target, num_nodes=num_nodes)
    terms = -(alpha * alpha.clamp_min(torch.finfo(alpha.dtype).tiny).log())
    per_node = scatter(terms, target, dim=0, dim_size=num_nodes, reduce="sum")  # [n, H]
    return alpha, per_node.mean()


def uniform_entropy(edge_index: Tensor, num_nodes: int) -> float:
    r"""The entropy of uniform attention, :math:`\frac{1}{n}\sum_i \log \deg_i` with :math:`\deg_i` the incoming
    edges of ``edge_index`` (self-loops included)."""
    degree = torch.bincount(edge_index[1], minlength=num_nodes).double()
    return float(degree.clamp_min(1).log().mean())


def grad_norm(params: list[Tensor]) -> float | None:
    """The L2 norm of the gradients of ``params`` in float64 (an exploding gradient is reported, not overflowed);
    ``None`` when none has a gradient (before the first step)."""
    grads = [p.grad.detach().double() for p in params if p.grad is not None]
    if not grads:
        return None
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def _attention_input(block: nn.Module, x: Tensor) -> Tensor:
    return block.norm1(x) if getattr(block, "placement", "post") == "pre" else x


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.{DIGITS}g}")


@contextmanager
def _unseen_by_encoders(model: nn.Module) -> Iterator[None]:
    """Leave the CSR input encoders as they were: one decides between its dense and CSR products by whether it saw
    the feature tensor before (:class:`~lipgnn.nn.fused.sparse_input.SparseInputLinear`), and the two round, and draw
    the input dropout, differently, so a measuring pass must not count as a sighting of the training features."""
    from lipgnn.nn.fused.sparse_input import SparseInputLinear

    encoders = [m for m in model.modules() if isinstance(m, SparseInputLinear)]
    kept = [m._seen for m in encoders]
    try:
        yield
    finally:
        for m, seen in zip(encoders, kept, strict=True):
            m._seen = seen


@torch.no_grad()
def measure(model: nn.Module, data: Any, graph: GraphMeasure | None = None) -> dict[str, Any]:
    """One snapshot of the quantities of the module docstring: ``{series: [per layer or block]}`` plus the encoder's
    and decoder's gradient norms (``grad_encoder``, ``grad_decoder``). ``model`` is a SAN
    :class:`~lipgnn.models.deep.DeepGNN` (blocks with ``conv``, ``norm1`` and ``placement``)."""
    graph = graph or GraphMeasure(data.edge_index, int(data.num_nodes))
    was_training, reorder = model.training, getattr(model, "locality_order", False)
    # The traced representations must be in the caller's node order, the order of data.edge_index.
    model.locality_order = False
    model.eval()
    try:
        with _unseen_by_encoders(model):
            layers = trace_layers(model, data.x, data.edge_index, getattr(data, "edge_attr", None))
        n = int(data.num_nodes)
        edges = model.prepare_edges(data.edge_index, n)
        out: dict[str, Any] = {key: [] for key in (*LAYER_SERIES, *BLOCK_SERIES)}
        for h in layers:
            energy = graph.energy(h, 1)
            squared = float(h.double().pow(2).sum()) / n
            out["energy"].append(energy)
            out["energy_norm"].append(energy / squared if squared > 0 else float("nan"))
            out["rank"].append(effective_rank(h))
        for block, h in zip(model.blocks, layers[:-1], strict=True):
            z = _attention_input(block, h)
            used, logits = block.conv.attention_scores(z, edges)
            alpha, entropy = attention_entropy(logits, used, n)
            out["entropy"].append(float(entropy))
            out["nonlocal"].append(float(head_laplacian_energy(z.double(), alpha, used).mean()))
            out["grad"].append(grad_norm(list(block.parameters())))
            out["grad_att"].append(grad_norm(attention_parameters(block.conv)))
        out["grad_encoder"] = grad_norm(list(model.encoder.parameters()))
        out["grad_decoder"] = grad_norm(list(model.head.parameters()))
    finally:
        model.locality_order = reorder
        model.train(was_training)
    return {k: [_round(v) for v in vs] if isinstance(vs, list) else _round(vs) for k, vs in out.items()}


class CollapseMonitor:
    """A run logger (:class:`lipgnn.train.loggers.RunLogger`) that forwards to ``logger`` and measures ``model`` on
    ``data`` (:func:`measure`) at epoch 0 (:meth:`start`), every ``every``-th epoch and at ``epochs``, the last.
    :meth:`payload` is the record's ``diagnostics.collapse``."""

    def __init__(self, model: nn.Module, data: Any, every: int, epochs: int, logger: Any = None) -> None:
        if every < 1:
            raise ValueError(f"every={every}: measure every k >= 1 epochs")
        self.model, self.data, self.every, self.epochs, self.logger = model, data, int(every), int(epochs), logger
        self.graph = GraphMeasure(data.edge_index, int(data.num_nodes))
        self.snapshots: list[dict[str, Any]] = []

    def start(self) -> None:
        """The snapshot at initialisation (no gradients yet)."""
        self.snapshots.append({"epoch": 0, **measure(self.model, self.data, self.graph)})

    def log_epoch(self, metrics: dict[str, Any], step: int) -> None:
        if self.logger is not None:
            self.logger.log_epoch(metrics, step)
        if step % self.every == 0 or step == self.epochs:
            self.snapshots.append({"epoch": int(step), **measure(self.model, self.data, self.graph)})

    def finish(self, summary: dict[str, Any], status: str, record: dict[str, Any] | None = None) -> None:
        if self.logger is not None:
            self.logger.finish(summary, status, record)

    def payload(self) -> dict[str, Any]:
        """``{"definition", "every", "uniform_entropy", "epochs": [...], <series>: [[per layer] per snapshot],
        "grad_encoder": [...], "grad_decoder": [...]}``."""
        edges = self.model.prepare_edges(self.data.edge_index, int(self.data.num_nodes))
        series = (*LAYER_SERIES, *BLOCK_SERIES, "grad_encoder", "grad_decoder")
        return {"definition": DEFINITION, "every": self.every,
                "uniform_entropy": _round(uniform_entropy(edges, int(self.data.num_nodes))),
                "epochs": [s["epoch"] for s in self.snapshots],
                **{key: [s[key] for s in self.snapshots] for key in series}}


__all__ = ["DEFINITION", "CollapseMonitor", "attention_entropy", "effective_rank", "grad_norm", "measure",
           "uniform_entropy"]
