"""``train.cuda_graphs``: the full-batch training step captured once in a CUDA graph, then replayed each epoch.

Why: on Planetoid-sized graphs a GPU step is bound by the host issuing kernels, not by the kernels. A
10-layer fused GAT-Lip step on PubMed took 54 ms of wall time for 4.1 ms of kernels on an H100
(``results/bench/cuda_h100_6ce21b9/``), and a replayed graph issues the whole step at once: 5-7x faster
on an H200 (``results/bench/cuda_h200_graph_probe/``). ``torch.cuda.graphs`` does the capture; this module
only makes the trainer's step capturable, with the same update:

- the loss takes the training rows through an index made once (``out[mask]`` with a boolean mask asks the
  host for the number of rows, which a capture forbids); same rows, same order, same values;
- gradients are zeroed in place (``zero_grad(set_to_none=False)``), so the captured backward writes the
  tensors Adam reads; ``0 + g`` is ``g`` exactly;
- Adam is torch's fused kernel with ``capturable=True`` and its learning rate in a device tensor, so
  ``train.warmup_epochs`` and the plateau scheduler change it between replays (a float would be frozen
  into the graph);
- the first :data:`WARMUP_STEPS` epochs run eagerly on a side stream, as ``torch.cuda.graphs`` requires;
  they also build the layers' cached CSR views and Adam's state outside the capture.

PyG's GAT layer cannot be captured (it reads a boolean mask's size on the host once a layer), so the
step needs the fused layers (``model.impl=fused``; ``auto`` resolves to it with this option). Dropout
works: each replay draws fresh random numbers from the CUDA generator. On a GPU no path is
bit-reproducible (atomic scatter sums, cuSPARSE), so the captured run equals the eager one in
distribution, as two eager runs do (``tests/test_cuda_graph.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from lipgnn.errors import ConfigError
from lipgnn.train.metrics import loss_fn

#: Eager steps before the capture (torch's examples use 3; the fused layers build their caches in the first).
WARMUP_STEPS = 3
#: The batch fields the step reads; each is bound to a static tensor that the graph reads on replay.
FIELDS = ("x", "edge_index", "edge_attr", "y")


def lr_in_tensor(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Hold each group's learning rate in a tensor on ``device``, where fused capturable Adam reads it at
    every replay. float32 on CUDA, the only type its fused kernel reads (it rounds a float rate to float32
    all the same); float64 on CPU, where the kernel reads a double, so the update is bit-equal to a float's."""
    dtype = torch.float32 if device.type == "cuda" else torch.float64
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), dtype=dtype, device=device)


class GraphedStep:
    """One full-batch optimisation step, replayed from a CUDA graph after :data:`WARMUP_STEPS` eager ones.

    ``bind(batch, device)`` makes the batch's tensors on ``device`` the step's static inputs (or copies a new
    batch into them); ``step()`` returns ``(loss, rows_out)``: the loss and the logits of the training rows,
    detached. On replay both are the graph's static outputs, overwritten by the next step. ``capture=False``
    runs every step eagerly through the same code (how the tests compare it with the trainer's own step on
    CPU).

    The captured kernels read tensors by address: the static batch and what the layers cache from it (the
    self-looped edge index, CSR views, a sparse copy of the features). Evaluation therefore goes through
    the same static batch (:meth:`batch_for`), so those caches are never replaced, and :meth:`step` holds a
    reference to each after the capture, so nothing it reads can be freed and reused.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, multilabel: bool,
                 grad_clip: float, forward: Callable[[nn.Module, object], Tensor], capture: bool = True) -> None:
        self.model, self.optimizer, self.multilabel, self.grad_clip = model, optimizer, multilabel, grad_clip
        self.forward, self.capture = forward, capture
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps = 0
        self.replays = 0
        self._source: object | None = None  # the batch object last bound (a full-batch task yields one)
        self._batch: object | None = None  # the first bound batch on the device: its tensors are the static ones
        self._rows: Tensor | None = None
        self.y_rows: Tensor | None = None  # the training rows' targets, static like the inputs
        self._outputs: tuple[Tensor, Tensor] | None = None
        self._pinned: list[object] = []

    def batch_for(self, batch: object, device: torch.device) -> object:
        """``batch`` on ``device``: the static batch when ``batch`` is the one bound, else a moved copy."""
        if batch is self._source and self._batch is not None:
            return self._batch
        return batch.to(device)  # type: ignore[attr-defined]

    def bind(self, batch: object, device: torch.device) -> int:
        """Point the static inputs at ``batch`` (moved to ``device``); returns the number of training rows.

        The first batch becomes the static inputs; a later one must have the same shapes and is copied
        into them. The same batch object again costs nothing."""
        if batch is self._source:
            return int(self._rows.numel()) if self._rows is not None else 0
        moved = batch.to(device)  # type: ignore[attr-defined]
        rows = moved.train_mask.nonzero().view(-1)
        if self._batch is None:
            self._batch, self._rows = moved, rows
            self.y_rows = moved.y.index_select(0, rows)
        else:
            if not torch.equal(rows, self._rows):
                raise ConfigError("train.cuda_graphs=true replays one full-batch step, but the training rows "
                                  "changed between epochs; use train.cuda_graphs=false for this dataset")
            for key in FIELDS:
                static, new = getattr(self._batch, key, None), getattr(moved, key, None)
                if static is None or new is None:
                    if static is not new:
                        raise ConfigError(f"train.cuda_graphs=true: batch.{key} appeared or vanished between "
                                          "epochs; use train.cuda_graphs=false for this dataset")
                    continue
                if new.shape != static.shape:
                    raise ConfigError(f"train.cuda_graphs=true: batch.{key} changed shape between epochs "
                                      f"({tuple(static.shape)} -> {tuple(new.shape)}); use train.cuda_graphs=false")
                if new.data_ptr() != static.data_ptr():
                    static.copy_(new)
            assert self.y_rows is not None
            self.y_rows.copy_(self._batch.y.index_select(0, self._rows))  # type: ignore[attr-defined]
        self._source = batch
        return int(self._rows.numel())  # type: ignore[union-attr]

    def _eager(self) -> tuple[Tensor, Tensor]:
        self.optimizer.zero_grad(set_to_none=False)  # a captured backward writes into these very tensors
        out = self.forward(self.model, self._batch).index_select(0, self._rows)
        loss = loss_fn(out, self.y_rows, self.multilabel)
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return loss.detach(), out.detach()

    def step(self) -> tuple[Tensor, Tensor]:
        """One optimisation step on the bound batch: eager, captured-then-replayed, or replayed."""
        self.steps += 1
        if not self.capture:
            return self._eager()
        if self.graph is None and self.steps <= WARMUP_STEPS:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                result = self._eager()
            torch.cuda.current_stream().wait_stream(side)
            return result
        if self.graph is None:
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    self._outputs = self._eager()  # recorded, not run: the replay below runs this epoch's step
            except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError or AcceleratorError; one line
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                raise ConfigError(f"train.cuda_graphs=true: this model's step cannot be captured in a CUDA graph "
                                  f"({first}); use model.impl=fused, or train.cuda_graphs=false") from None
            self.graph = graph
            self._pinned = cached_tensors(self.model)
        self.graph.replay()
        self.replays += 1
        assert self._outputs is not None
        return self._outputs


def cached_tensors(model: nn.Module) -> list[object]:
    """What the layers cache between forwards (read by address in a captured step): the CSR views of the
    graphs met so far, each module's self-looped edge index and sparse feature copy. (The compiled CPU loops'
    caches are never captured.)"""
    from lipgnn.nn.fused import graph as csr

    held: list[object] = [entry[2] for entry in csr._CACHE.values()]
    for module in model.modules():
        held.extend(getattr(module, name) for name in ("_loops_cache", "_seen") if getattr(module, name, None))
    return held


__all__ = ["FIELDS", "WARMUP_STEPS", "GraphedStep", "cached_tensors", "lr_in_tensor"]
