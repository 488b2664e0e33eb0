r"""The ``gh_collapse`` job kind: a SAN training run measured while it trains (``conf/experiment/gh_collapse.yaml``),
for why Guan & He's deep Post-LN and nonlocal SANs stop learning. The run is a ``training`` run; its record also
carries ``diagnostics.collapse``, the per-layer energies, effective ranks, attention entropies, nonlocal factors
and gradient norms of :mod:`lipgnn.diagnostics.collapse`, every ``log.collapse_every`` epochs.

No checkpoints: the snapshots live in the process, so an interrupted job is redone whole.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from lipgnn.errors import ConfigError
from lipgnn.runs.kinds.training import Training, train
from lipgnn.runs.registry import Job, register_job_kind


@register_job_kind("gh_collapse")
class GuanHeCollapse(Training):
    checkpoints = False

    def validate(self, cfg: DictConfig) -> None:
        super().validate(cfg)
        if str(cfg.model.name) != "san":
            raise ConfigError(f"a gh_collapse job measures SAN blocks, got model={cfg.model.name}; use model=san "
                              "(or variant=san_postln|san_nonlocal|san_preln)")

    def compute(self, job: Job) -> dict[str, Any]:
        from lipgnn.diagnostics.collapse import CollapseMonitor

        monitors: list[CollapseMonitor] = []

        def monitor(model: Any, task: Any, logger: Any) -> CollapseMonitor:
            (data,) = list(task.eval_batches())
            watch = CollapseMonitor(model, data.to(next(model.parameters()).device), job.settings.log.collapse_every,
                                    job.settings.train.epochs, logger)
            watch.start()
            monitors.append(watch)
            return watch

        return train(job, after_fit=lambda *_: {"collapse": monitors[0].payload()}, monitor=monitor)
