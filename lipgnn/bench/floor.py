r"""The floor of one GAT-Lip layer's forward + backward: its dense FLOPs at this machine's measured
GEMM rate plus its unavoidable memory traffic at the measured memory rate.

Per layer with :math:`N` nodes, :math:`E` edges (self-loops included), :math:`F` input and :math:`C`
output features (one head):

* FLOPs: the projection :math:`XW` forward and the two GEMMs of its backward (:math:`\partial X`,
  :math:`\partial W`), :math:`3 \cdot 2 N F C`; the edge work (:math:`\sim 4 E C`) is counted with
  the traffic, which bounds it.
* Bytes: float32 node arrays read or written once each: forward reads :math:`X`, writes and re-reads
  :math:`XW` (SpMM), writes the output; backward reads the output gradient, :math:`X` and
  :math:`XW`, writes :math:`\partial(XW)` and :math:`\partial X` (9 passes of :math:`4 N \max(F, C)`
  bytes), plus per edge the column index (8 bytes) and the attention weight (4 bytes), read forward
  and backward and written once (:math:`3 \cdot 12 E`).

The rates are measured here, in process CPU time like the layer (a shared machine's wall clock counts
time spent descheduled): SGEMM on 2048×2048 matrices, and a triad ``a = b + s c`` on 64 MiB float32
arrays (3 arrays' bytes per pass), best of a few repeats, with torch's current thread count.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from lipgnn.nn.fused.graph import CSRGraph

NODE_PASSES = 9
EDGE_BYTES = 3 * 12


@dataclass
class Floor:
    flops: float
    bytes: float
    gemm_flops_per_s: float
    mem_bytes_per_s: float

    @property
    def seconds(self) -> float:
        return self.flops / self.gemm_flops_per_s + self.bytes / self.mem_bytes_per_s

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "seconds": self.seconds}


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def measure_rates(repeats: int = 5) -> tuple[float, float]:
    """(SGEMM FLOP/s, memory bytes/s) of this machine with torch's current thread count."""
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)
    gemm = 2 * n**3 / _best(lambda: torch.mm(a, b, out=out), repeats)
    m = 16 * 2**20  # 64 MiB per float32 array
    x, y, z = torch.rand(m), torch.rand(m), torch.empty(m)
    torch.add(x, y, alpha=0.5, out=z)
    mem = 3 * 4 * m / _best(lambda: torch.add(x, y, alpha=0.5, out=z), repeats)
    return gemm, mem


def gat_layer_floor(num_nodes: int, num_edges: int, in_features: int, out_features: int,
                    rates: tuple[float, float] | None = None) -> Floor:
    """The floor (module docstring) of one GAT-Lip layer forward + backward."""
    gemm, mem = rates if rates is not None else measure_rates()
    flops = 3 * 2 * num_nodes * in_features * out_features
    traffic = NODE_PASSES * 4 * num_nodes * max(in_features, out_features) + EDGE_BYTES * num_edges
    return Floor(float(flops), float(traffic), gemm, mem)


def layer_inputs(x: torch.Tensor, edge_index: torch.Tensor, out_features: int,
                 ) -> dict[str, tuple[torch.Tensor, torch.Tensor | CSRGraph, torch.Tensor]]:
    """The timed layer's ``(input, graph, output gradient)`` per node order: ``"dataset"`` (the graph as
    loaded) and ``"locality"`` (relabelled in reverse Cuthill–McKee order, as a deep fused stack runs its
    layers on graphs of :data:`~lipgnn.nn.fused.locality.MIN_NODES` nodes or more,
    :mod:`lipgnn.nn.fused.locality`): the same features and gradient, rows permuted."""
    from lipgnn.nn.fused import get_csr_graph
    from lipgnn.nn.fused.locality import rcm_order, relabel

    graph = get_csr_graph(edge_index, x.size(0), add_self_loops=True)
    local = relabel(graph, rcm_order(graph)).graph
    grad = torch.randn(x.size(0), out_features)
    return {"dataset": (x.detach().requires_grad_(True), edge_index, grad),
            "locality": (x.detach()[local.node_order].requires_grad_(True), local, grad[local.node_order])}


def time_fused_layer(x: torch.Tensor, edge_index: torch.Tensor, out_features: int, repeats: int = 15,
                     ) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of one ``FusedLipGATConv`` forward + backward (LipschitzNorm on, no
    dropout), the CSR graph prebuilt as in a training step, in each node order of :func:`layer_inputs`,
    the orders timed alternately. Same layer, same features permuted, same floor."""
    from lipgnn.nn import FusedLipGATConv

    torch.manual_seed(0)
    conv = FusedLipGATConv(x.size(1), out_features, lipschitz_norm=True)
    inputs = layer_inputs(x, edge_index, out_features)

    def once(order: str) -> tuple[float, float]:
        h, graph_in, g = inputs[order]
        # Inside a stack ∂X flows on to the layer below; a leaf keeping its .grad would instead have every
        # later call add into it, one more pass over [N, F] that no training step makes.
        h.grad = None
        start, cpu = time.perf_counter(), time.process_time()
        conv(h, graph_in).backward(g)
        return time.perf_counter() - start, time.process_time() - cpu

    times: dict[str, list[tuple[float, float]]] = {order: [] for order in inputs}
    for order in inputs:
        once(order)
    for _ in range(repeats):
        for order in inputs:
            times[order].append(once(order))
    out = {}
    for order, pairs in times.items():
        walls, cpus = zip(*pairs, strict=True)
        out[order] = (sorted(walls)[len(walls) // 2], sorted(cpus)[len(cpus) // 2])
    return out
