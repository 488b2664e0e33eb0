r"""The ``gh_depth`` job kind: Guan & He's training experiments (SAN with Pre-LN, Post-LN and nonlocal Post-LN
against depth, ``conf/experiment/gh_depth.yaml``): a training run whose record also carries diagnostics of the
trained model (final weights, eval mode) that the ``gh_similarity`` (Fig. 2, eq. 1) and ``gh_pruning``
(Table 8) artifacts read:

* ``similarity``: the inter-layer cosine-similarity matrix
  :math:`\mathrm{sim}(X^s, X^t) = \frac{1}{n}\sum_i \frac{X^s(i)\cdot X^t(i)}{|X^s(i)||X^t(i)|}` over the
  encoder output :math:`X^0` and the block outputs :math:`X^1..X^L`;
* ``pruning``: validation and test accuracy with block :math:`k` skipped, for every :math:`k`, and with none;
* ``train_time_s``: the fit's wall time.

Both are measured when the run completed (a diverged model has nothing to measure).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lipgnn.runs.kinds.training import Training, train
from lipgnn.runs.registry import Job, register_job_kind


@register_job_kind("gh_depth")
class GuanHeDepth(Training):
    def compute(self, job: Job) -> dict[str, Any]:
        return train(job, after_fit=_after_fit)


def _after_fit(model: torch.nn.Module, task: Any, result: Any) -> dict[str, Any]:
    if result.status != "completed":
        return {}
    (data,) = list(task.eval_batches())
    return trained_diagnostics(model, data.to(next(model.parameters()).device))


@torch.no_grad()
def trained_diagnostics(model: torch.nn.Module, data: Any) -> dict[str, Any]:
    """Similarity matrix of the layer outputs and single-block pruning accuracies (eval mode), from one pass that
    keeps every block's output and restarts each pruned pass there (``DeepGNN.pruned_logits``)."""
    from lipgnn.diagnostics import cosine_similarity_matrix

    model.eval()

    def scores(out: Tensor) -> dict[str, float]:
        return {s: float((out[m].argmax(-1) == data.y[m]).float().mean()) for s, m in
                (("val", data.val_mask), ("test", data.test_mask))}

    passes = model.pruned_logits(data.x, data.edge_index)
    _, logits, states = next(passes)  # the whole model, and its encoder and block outputs
    pruning = {"none": scores(logits)}
    for k, logits, _ in passes:
        pruning[str(k + 1)] = scores(logits)
    sim = cosine_similarity_matrix(states)
    return {"similarity": [[round(float(v), 5) for v in row] for row in sim], "pruning": pruning}
