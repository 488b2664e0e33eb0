"""One training loop for every experiment (OGB-example style: read it top to bottom).

Full batch where the graph fits (one optimiser step per epoch), mini-batches for TREES and ogbn-proteins —
the :class:`~lipgnn.data.TaskData` decides by what its ``train_batches`` yields. Each evaluated epoch
records loss and train/val/test metric; the epoch of best validation metric and the last epoch are both
kept, so tables can report either protocol (``train.selection``). The best epoch is the FIRST epoch reaching
the best validation metric: a later epoch that only ties it (``val == best``) is not an improvement, so it
neither replaces the kept metrics nor resets the ``early_stopping`` patience (strict ``>``). A non-finite
loss or prediction ends the run as ``diverged`` with its best-so-far metrics: gradient explosion is what the
paper studies, so it is an outcome, not a crash.

The TREES protocol (Alon & Yahav's ``experiment.py``) is a set of opt-in keys checked at each evaluation
(every ``eval_every`` passes): ``train_metric=online`` (the train accuracy of the predictions made during
those passes, in training mode, drives the scheduler and the stopping rules and is reported as
``best_train``), ``stop_at_train`` (stop once that accuracy reaches it) and ``train_patience`` (stop after
that many evaluations without an improvement of more than :data:`TRAIN_IMPROVEMENT`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from lipgnn.config import typed
from lipgnn.config_schema import TrainConfig
from lipgnn.errors import ConfigError
from lipgnn.store.checkpoint import load_checkpoint, restore_rng_state, rng_state, save_checkpoint
from lipgnn.train import faults
from lipgnn.train.cuda_graph import GraphedStep, lr_in_tensor
from lipgnn.train.flat_adam import FlatAdam, flat_adam_applies
from lipgnn.train.loggers import NullLogger, RunLogger
from lipgnn.train.metrics import is_finite, loss_fn

SPLITS = ("train", "val", "test")
#: A train-metric gain counts as an improvement above this (Alon & Yahav's ``stopping_threshold``).
TRAIN_IMPROVEMENT = 1e-4


@dataclass
class FitResult:
    status: str  # "completed" | "diverged"
    history: dict[str, list[Any]]
    best: dict[str, Any]
    last: dict[str, Any]
    epochs_run: int
    error: str | None = None
    resumed_from: int | None = None
    # Best train metric (online or evaluated, per train.train_metric) with its epoch and test score there;
    # None unless a TREES-protocol key is set.
    best_train: dict[str, Any] | None = None


@dataclass
class _State:
    epoch: int = 0
    history: dict[str, list[Any]] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)
    stale: int = 0
    best_train: dict[str, Any] = field(default_factory=dict)
    train_stale: int = 0
    online: list[int] = field(default_factory=lambda: [0, 0])  # [correct, count] since the last evaluation


def _empty_point() -> dict[str, Any]:
    return {"epoch": None, "loss": None, "train": None, "val": None, "test": None}


def adam(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0,
         capturable: bool = False) -> torch.optim.Adam:
    """``torch.optim.Adam``, with torch's fused kernel where every parameter allows it (floating point,
    CPU or CUDA): one pass over all tensors instead of about ten small operations per tensor. One
    thread, measured: a 30-layer GAT's 124 tensors 5.9 → 0.95 ms per step; a 256-layer SAN's step
    0.13 → 0.034 s. Same update rule; the sums round differently in the last bits. ``capturable`` (CUDA
    parameters only) keeps the step count on the device, as a CUDA-graph capture needs. Otherwise, where the
    parameters share a dtype and device, :class:`~lipgnn.train.flat_adam.FlatAdam`: the same kernel called
    once over all parameters in one buffer (a 256-layer SAN's 3,590 tensors, step and ``zero_grad`` after a
    backward: 32–36 → 14–16 ms)."""
    params = list(params)
    if not capturable and flat_adam_applies(params):
        return FlatAdam(params, lr=lr, weight_decay=weight_decay)
    fusable = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    capturable = capturable and fusable and all(p.device.type == "cuda" for p in params)
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True if fusable else None,
                            capturable=capturable)


def set_warmup_lr(optimizer: torch.optim.Optimizer, peak: float, warmup_epochs: int, epoch: int) -> None:
    """``train.warmup_epochs``: linear warm-up to ``train.lr`` over the first epochs, then constant
    (Guan & He B.1's Post-LN protocol, "warm up ... with maximum 1e-4"; the shape is ours).

    Epoch ``e`` (1-based) trains at ``lr · min(1, e / warmup_epochs)``; a function of the epoch alone,
    so a resumed run continues the same schedule. ``warmup_epochs = 0`` leaves the optimiser alone. A rate
    held in a tensor (``train.cuda_graphs``) is written in place, where the captured step reads it."""
    if warmup_epochs <= 0:
        return
    for group in optimizer.param_groups:
        value = peak * min(1.0, epoch / warmup_epochs)
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


class Trainer:
    def __init__(
        self,
        cfg: Any,
        *,
        device: torch.device,
        seed: int,
        logger: RunLogger | None = None,
        grad_norms: bool = False,
        grad_norms_epochs: int = 0,
        progress: bool = True,
        checkpoint_path: Path | None = None,
        desc: str = "",
        checkpoint_extra: Callable[[], dict[str, Any]] | None = None,
        resume_state: dict[str, Any] | None = None,
    ) -> None:
        # ``train``'s keys as the schema's dataclass: a composed ``cfg.train`` (or a mapping) is converted here.
        self.cfg: TrainConfig = typed(cfg, TrainConfig)
        self.device = device
        self.seed = seed
        self.logger = logger or NullLogger()
        self.grad_norms = grad_norms
        # Record the norms over the first N epochs only (0 = all): a 1000-epoch deep run's full matrix would
        # make its record megabytes long, while the explosion the paper shows happens early (Fig. 2).
        self.grad_norms_epochs = grad_norms_epochs
        self.progress = progress
        self.checkpoint_path = checkpoint_path
        self.desc = desc
        self.checkpoint_extra = checkpoint_extra
        # The checkpoint's state when the caller has loaded it already (lipgnn.runs.layer validates it before
        # training); else fit() loads checkpoint_path itself.
        self.resume_state = resume_state
        self.graphed: GraphedStep | None = None  # train.cuda_graphs: set up by fit()
        # Plain values a caller computed before the first epoch (e.g. energies at initialisation): saved with
        # every checkpoint and restored on resume, so a resumed run records the same ones.
        self.carry: dict[str, Any] = {}
        # Called with the epoch after each epoch's training and evaluation (log.diagnose_every's monitor).
        self.on_epoch: Callable[[int], None] | None = None

    # ------------------------------------------------------------------ the loop
    def fit(self, model: torch.nn.Module, task: Any) -> FitResult:
        cfg = self.cfg
        graphs = bool(cfg.cuda_graphs)
        optimizer = adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, capturable=graphs)
        scheduler = None
        if cfg.scheduler == "plateau":
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode=cfg.plateau_mode, factor=cfg.plateau_factor, patience=cfg.plateau_patience,
                threshold_mode=cfg.plateau_threshold_mode)
        # Mini-batch order comes from its own generator, so it is reproducible and checkpointable.
        shuffle = torch.Generator().manual_seed(self.seed)
        state = _State(history={k: [] for k in ("epoch", "loss", "val_loss", "lr", *SPLITS)}, best=_empty_point())
        if self.grad_norms:
            state.history["grad_norms"] = []
        online = cfg.train_metric == "online"
        if online:
            if task.spec.multilabel:
                raise ValueError("train.train_metric=online measures accuracy; it needs a single-label task")
            state.history["train_online"] = []
        track_train = online or bool(cfg.stop_at_train) or bool(cfg.train_patience)
        resumed_from = self._maybe_resume(model, optimizer, scheduler, shuffle, state, task)
        self.graphed = None
        if graphs:  # after the resume: a checkpoint from an eager run holds the rate as a float
            lr_in_tensor(optimizer, self.device)
            self.graphed = GraphedStep(model, optimizer, multilabel=task.spec.multilabel,
                                       grad_clip=float(cfg.grad_clip), forward=self._forward,
                                       capture=self.device.type == "cuda")

        status, error = "completed", None
        bar = tqdm(range(state.epoch + 1, cfg.epochs + 1), desc=self.desc, disable=not self.progress,
                   leave=False, dynamic_ncols=True)
        for epoch in bar:
            set_warmup_lr(optimizer, cfg.lr, cfg.warmup_epochs, epoch)
            loss, norms = self._train_epoch(model, task, optimizer, shuffle, state.online if online else None)
            loss = faults.maybe_nan(self.desc, epoch, loss)
            if not math.isfinite(loss):
                status, error = "diverged", f"non-finite training loss ({loss}) at epoch {epoch}"
                break
            if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
                scores, val_loss = self._evaluate(model, task)
                if not all(math.isfinite(v) for v in (*scores.values(), val_loss)):
                    status, error = "diverged", f"non-finite predictions at epoch {epoch}"
                    break
                self._append(state, epoch, loss, val_loss, scores, optimizer, norms, self.grad_norms_epochs)
                train_metric = scores["train"]
                if online:
                    correct, count = state.online
                    train_metric = correct / max(count, 1)
                    state.history["train_online"].append(train_metric)
                    state.online = [0, 0]
                # Strict: on a tie the earlier epoch stays best and the patience keeps counting (module docstring).
                improved = state.best["val"] is None or scores["val"] > state.best["val"]
                if improved:
                    state.best = {"epoch": epoch, "loss": loss, **scores}
                    state.stale = 0
                else:
                    state.stale += 1
                if scheduler is not None:
                    scheduler.step(val_loss if cfg.plateau_mode == "min" else train_metric)
                if track_train:
                    self._track_train(state, epoch, train_metric, scores)
                # The rate _append recorded: read once (on CUDA a rate held in a tensor costs a device sync).
                metrics = {"loss": loss, "val_loss": val_loss, "lr": state.history["lr"][-1], **scores}
                if norms is not None:
                    metrics.update({f"grad_norm/layer_{i}": value for i, value in enumerate(norms)})
                self.logger.log_epoch(metrics, step=epoch)
                bar.set_postfix(loss=f"{loss:.3f}", val=f"{scores['val']:.3f}", refresh=False)
            state.epoch = epoch
            if self.on_epoch is not None:
                self.on_epoch(epoch)
            if cfg.checkpoint_every and self.checkpoint_path and epoch % cfg.checkpoint_every == 0:
                self._save(model, optimizer, scheduler, shuffle, state)
            faults.maybe_kill(self.desc, epoch)
            if cfg.early_stopping and state.stale >= cfg.early_stopping:
                break
            if track_train and self._train_done(state):
                break
        bar.close()

        history = state.history
        last = _empty_point()
        if history["epoch"]:
            last = {"epoch": history["epoch"][-1], "loss": history["loss"][-1],
                    **{s: history[s][-1] for s in SPLITS}}
        return FitResult(status=status, history=history, best=state.best, last=last,
                         epochs_run=state.epoch + (1 if status == "diverged" else 0),
                         error=error, resumed_from=resumed_from,
                         best_train=(state.best_train or {"epoch": None, "train": None, "test": None})
                         if track_train else None)

    # ------------------------------------------------------------------ TREES protocol
    @staticmethod
    def _track_train(state: _State, epoch: int, train_metric: float, scores: dict[str, float]) -> None:
        """Best train metric so far (Alon & Yahav: an improvement must exceed ``TRAIN_IMPROVEMENT``)."""
        best = state.best_train.get("train")
        if best is None or train_metric > best + TRAIN_IMPROVEMENT:
            state.best_train = {"epoch": epoch, "train": train_metric, "test": scores["test"]}
            state.train_stale = 0
        else:
            state.train_stale += 1

    def _train_done(self, state: _State) -> bool:
        """``stop_at_train`` reached, or ``train_patience`` evaluations without improvement."""
        target, patience = float(self.cfg.stop_at_train), self.cfg.train_patience
        best = state.best_train.get("train")
        if target and best is not None and best >= target:
            return True
        return bool(patience) and state.train_stale >= patience

    # ------------------------------------------------------------------ steps
    def _forward(self, model: torch.nn.Module, batch: Any) -> Tensor:
        return model(batch.x, batch.edge_index, getattr(batch, "edge_attr", None))

    def _train_epoch(self, model: torch.nn.Module, task: Any, optimizer: torch.optim.Optimizer,
                     shuffle: torch.Generator, online: list[int] | None = None) -> tuple[float, list[float] | None]:
        """One pass over the training batches; adds [correct, count] of its predictions to ``online`` if given."""
        model.train()
        if self.graphed is not None:
            return self._graphed_epoch(model, task, shuffle, online)
        total, count, norms = 0.0, 0, None
        for batch in task.train_batches(shuffle):
            batch = batch.to(self.device)
            mask = batch.train_mask
            if int(mask.sum()) == 0:
                continue
            optimizer.zero_grad(set_to_none=True)
            out = self._forward(model, batch)[mask]
            loss = loss_fn(out, batch.y[mask], task.spec.multilabel)
            if not is_finite(loss):
                return float(loss.detach()), None
            loss.backward()
            if self.grad_norms:
                from lipgnn.models import attention_grad_norms

                norms = attention_grad_norms(model)
            if self.cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.grad_clip)
            optimizer.step()
            n = int(mask.sum())
            if online is not None:
                online[0] += int((out.detach().argmax(dim=-1) == batch.y[mask]).sum())
                online[1] += n
            total += float(loss.detach()) * n
            count += n
        return (total / max(count, 1)), norms

    def _graphed_epoch(self, model: torch.nn.Module, task: Any, shuffle: torch.Generator,
                       online: list[int] | None) -> tuple[float, list[float] | None]:
        """``train.cuda_graphs``: the epoch's one full batch through :class:`GraphedStep`. Unlike the eager
        step, a non-finite loss is seen after the update (the captured step cannot stop halfway); the run
        ends as diverged all the same."""
        graphed = self.graphed
        assert graphed is not None
        batches = iter(task.train_batches(shuffle))
        batch = next(batches, None)
        if batch is None:
            return 0.0, None
        if next(batches, None) is not None:
            raise ConfigError(f"train.cuda_graphs=true captures one full-batch step, but {task.name} yields "
                              "several training batches an epoch; use train.cuda_graphs=false")
        rows = graphed.bind(batch, self.device)
        if rows == 0:
            return 0.0, None
        loss, out = graphed.step()
        value = float(loss)
        if not math.isfinite(value):
            return value, None
        norms = None
        if self.grad_norms:
            from lipgnn.models import attention_grad_norms

            norms = attention_grad_norms(model)
        if online is not None:
            online[0] += int((out.argmax(dim=-1) == graphed.y_rows).sum())
            online[1] += rows
        return value, norms

    @torch.no_grad()
    def _evaluate(self, model: torch.nn.Module, task: Any) -> tuple[dict[str, float], float]:
        model.eval()
        logits: dict[str, list[Tensor]] = {s: [] for s in SPLITS}
        targets: dict[str, list[Tensor]] = {s: [] for s in SPLITS}
        for batch in task.eval_batches():
            # train.cuda_graphs: the full batch is the captured step's static one (and its layers' caches)
            batch = batch.to(self.device) if self.graphed is None else self.graphed.batch_for(batch, self.device)
            out = self._forward(model, batch)
            for split in SPLITS:
                mask = getattr(batch, f"{split}_mask")
                logits[split].append(out[mask].float().cpu())
                targets[split].append(batch.y[mask].cpu())
        scores: dict[str, float] = {}
        val_loss = float("nan")
        for split in SPLITS:
            out, y = torch.cat(logits[split]), torch.cat(targets[split])
            if not is_finite(out):
                return {**{s: float("nan") for s in SPLITS}}, float("nan")
            scores[split] = task.score(out, y)
            if split == "val" and len(y):
                val_loss = float(loss_fn(out, y, task.spec.multilabel))
        return scores, val_loss

    @staticmethod
    def _append(state: _State, epoch: int, loss: float, val_loss: float, scores: dict[str, float],
                optimizer: torch.optim.Optimizer, norms: list[float] | None, norms_epochs: int = 0) -> None:
        h = state.history
        h["epoch"].append(epoch)
        h["loss"].append(loss)
        h["val_loss"].append(val_loss)
        h["lr"].append(float(optimizer.param_groups[0]["lr"]))
        for split in SPLITS:
            h[split].append(scores[split])
        if "grad_norms" in h and (not norms_epochs or len(h["grad_norms"]) < norms_epochs):
            h["grad_norms"].append(norms)

    # ------------------------------------------------------------------ checkpoints
    def _save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
              shuffle: torch.Generator, state: _State) -> None:
        assert self.checkpoint_path is not None
        save_checkpoint(self.checkpoint_path, {
            "epoch": state.epoch, "history": state.history, "best": state.best, "stale": state.stale,
            "best_train": state.best_train, "train_stale": state.train_stale, "online": state.online,
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_state(shuffle), "saved_at": time.time(), "carry": self.carry,
            **(self.checkpoint_extra() if self.checkpoint_extra is not None else {}),
        })

    def _maybe_resume(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                      shuffle: torch.Generator, state: _State, task: Any) -> int | None:
        if not self.checkpoint_path:
            return None
        payload = self.resume_state if self.resume_state is not None else load_checkpoint(self.checkpoint_path,
                                                                                           self.device)
        self.resume_state = None  # used once; not held for the whole run
        if payload is None:
            return None
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        if scheduler is not None and payload["scheduler"] is not None:
            scheduler.load_state_dict(payload["scheduler"])
        restore_rng_state(payload["rng"], shuffle)
        state.epoch, state.history, state.best, state.stale = (
            payload["epoch"], payload["history"], payload["best"], payload["stale"])
        state.best_train = payload.get("best_train", {})
        state.train_stale = payload.get("train_stale", 0)
        state.online = payload.get("online", [0, 0])
        self.carry = dict(payload.get("carry") or {})
        _as_after_epochs(model, task)
        return int(payload["epoch"])


def _as_after_epochs(model: torch.nn.Module, task: Any) -> None:
    """Put the model's per-input caches where the epochs before a checkpoint left them. The CSR input encoder
    (:class:`~lipgnn.nn.fused.sparse_input.SparseInputLinear`) multiplies a feature tensor densely the first time it
    sees it; after resuming, its first step must take the CSR product, as the uninterrupted run's did."""
    from lipgnn.nn.fused.sparse_input import SparseInputLinear

    encoders = [m for m in model.modules() if isinstance(m, SparseInputLinear)]
    if not encoders:
        return
    batch = next(iter(task.eval_batches()), None)
    features = getattr(batch, "x", None)
    if features is None:
        return
    for encoder in encoders:
        encoder.seen(features)
