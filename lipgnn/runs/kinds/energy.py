r"""The ``energy`` job kind: energies of untrained models (Guan & He Tables 2, 4, 6 and Figs. 1, 4).

For one composed config (model, dataset, depth, seed) the model is built exactly as a training run builds it
(:func:`lipgnn.seeding.start`: seed, load the data, re-seed, build), put in eval mode, and traced by
forward hooks; the record holds the energies

.. math::
    \mathcal{E}_2(X^k) = \frac{1}{n} \sum_i |\Delta_\mu X^k(i)|^2 \mu_i, \quad
    \mathcal{E}_1(X^k) = \frac{1}{n} \sum_i \sum_{j \sim i} |X^k(j) - X^k(i)|^2, \qquad k = 0, \dots, L

(§2, :math:`\omega = 1`, :math:`\mu = \deg + 1`, the paper's 1/n prefactor): :math:`\mathcal{E}_2` at every
layer, :math:`\mathcal{E}_1` at :math:`X^0` and at :math:`X^L`, the final hidden layer (before the decoder).
Nothing is trained (``train.epochs`` is not read). A job is a cheap unit: a rerun skips finished records.

Options of the measurement live in the config's ``energy`` node (:class:`~lipgnn.config_schema.EnergyConfig`, named
by ``conf/experiment/gh_energy.yaml``; absent → its defaults): ``energy.features`` = ``raw`` (the loaders' features)
| ``row`` (row-normalised, PyG's ``NormalizeFeatures``); they are part of the run id (:func:`energy_id`). The
weight initialisation is the model's own ``model.init`` where the model has it.

    python train.py -m experiment=gh_energy budget=cpu
    python train.py experiment=gh_energy dataset=cora depth=2 seed=0 variant=san_preln
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from lipgnn.config_schema import EnergyConfig
from lipgnn.identity import identity_config, loose_digest, plain
from lipgnn.runs.registry import Job, JobKind, register_job_kind

# One graph at a time, kept across the jobs of a sweep in this process (grids iterate datasets in blocks):
# (dataset settings, features) -> (TaskData, GraphMeasure). Only x and edge_index are read, the same for any seed.
_GRAPH: dict[str, tuple[Any, Any]] = {}


def energy_settings(energy: EnergyConfig | None) -> EnergyConfig:
    """The job's ``energy`` options: its typed node, or the schema's defaults where the config has none."""
    return energy if energy is not None else EnergyConfig()


def energy_options(cfg: DictConfig) -> dict[str, Any]:
    """The ``energy`` options of a composed config (or of a record's, :class:`ConfigError` in one line for a key or
    value :class:`~lipgnn.config_schema.EnergyConfig` refuses), as the plain mapping its records store and hash."""
    from lipgnn.config import typed

    node = cfg.get("energy")
    return dataclasses.asdict(energy_settings(None if node is None else typed(node, EnergyConfig)))


def energy_id(cfg: DictConfig | Mapping[str, Any], options: Mapping[str, Any]) -> str:
    """An energy measurement's record id: model, layer norm, nonlocal, norm, init, dataset, features, depth, seed +
    hash of the training identity (:func:`lipgnn.identity.identity_config`) and the validated ``options``."""
    tree = plain(cfg)
    model, dataset = tree.get("model", {}), tree.get("dataset", {})
    parts = [str(model.get("name"))]
    if model.get("layer_norm", "none") != "none":
        parts.append(f"{model['layer_norm']}ln")
    if model.get("nonlocal"):
        parts.append("nl")
    if tree["norm"]["name"] != "none":
        parts.append(str(tree["norm"]["name"]))
    if model.get("init"):
        parts.append(str(model["init"]))
    hashed = {**identity_config(tree), "energy": dict(options)}
    parts += [str(dataset.get("name")), str(options["features"]), f"L{tree.get('depth')}", f"s{tree.get('seed')}",
              loose_digest(hashed)]
    return "-".join(parts)


def build_untrained(cfg: DictConfig) -> tuple[torch.nn.Module, Any]:
    """``(model, data)`` as a training run of ``cfg`` would start (:func:`lipgnn.seeding.start`), in eval mode;
    ``data`` is the dataset's full graph."""
    from lipgnn.config import validate

    model, data, _ = _untrained(validate(cfg))
    return model, data


def _untrained(settings: Any, task: Any = None) -> tuple[torch.nn.Module, Any, Any]:
    """``(model, data, task)``: the model in eval mode, the full graph (row-normalised with
    ``energy.features=row``) and the loaded dataset (``task``: one loaded before, not loaded again)."""
    from torch_geometric.transforms import NormalizeFeatures

    from lipgnn.seeding import start

    model, task = start(settings, task=task)
    data = next(iter(task.eval_batches()))
    if energy_settings(settings.energy).features == "row":
        data = NormalizeFeatures()(data.clone())
    return model.eval(), data, task


@register_job_kind("energy")
class Energy(JobKind):
    def validate(self, cfg: DictConfig) -> None:
        energy_options(cfg)

    def run_id(self, cfg: DictConfig) -> str:
        return energy_id(cfg, energy_options(cfg))

    def record_config(self, cfg: DictConfig) -> dict[str, Any]:
        return {**super().record_config(cfg), "energy": energy_options(cfg)}

    def compute(self, job: Job) -> dict[str, Any]:
        from lipgnn.diagnostics.energy import GraphMeasure
        from lipgnn.diagnostics.probe import DEFINITION, energy_profile
        from lipgnn.train import gc_pause

        settings = job.settings
        gc_pause.resume()
        started = time.time()
        key = json.dumps([dataclasses.asdict(settings.dataset), dataclasses.asdict(energy_settings(settings.energy))],
                         sort_keys=True)
        cached = _GRAPH.get(key)
        model, data, task = _untrained(settings, None if cached is None else cached[0])
        if cached is None:
            _GRAPH.clear()
            cached = _GRAPH[key] = (task, GraphMeasure(data.edge_index, int(data.num_nodes)))
        graph = cached[1]
        profile = energy_profile(model, data, graph, dirichlet_every_layer=False)
        width = profile.pop("width")
        final = profile["laplacian"][-1]
        return {
            "status": "completed", "wall_time_s": round(time.time() - started, 3),
            "diagnostics": {"energy": {
                "definition": DEFINITION, "normalise": "nodes", "width": width, "num_nodes": int(data.num_nodes),
                "init": profile, "final_laplacian": final, "final_laplacian_entries": final / width,
            }},
        }

    def summary(self, record: Mapping[str, Any], path: Path) -> str:
        e = record["diagnostics"]["energy"]
        return (f"[completed] {record['run_id']}: E_2(X^L) = {e['final_laplacian']:.3e} (per entry "
                f"{e['final_laplacian_entries']:.3e}) in {record['wall_time_s']:.1f}s -> {path}")
