r"""Energies of untrained models (Guan & He Tables 2, 4, 6 and Figs. 1, 4), written as run records.

For one composed config (model, dataset, depth, seed) the model is built exactly as a training run builds it
(:func:`lipgnn.train.run`: seed, load the data, re-seed, build), put in eval mode, and traced by forward
hooks; the record holds the energies

.. math::
    \mathcal{E}_2(X^k) = \frac{1}{n} \sum_i |\Delta_\mu X^k(i)|^2 \mu_i, \quad
    \mathcal{E}_1(X^k) = \frac{1}{n} \sum_i \sum_{j \sim i} |X^k(j) - X^k(i)|^2, \qquad k = 0, \dots, L

(§2, :math:`\omega = 1`, :math:`\mu = \deg + 1`, the paper's 1/n prefactor): :math:`\mathcal{E}_2` at every
layer, :math:`\mathcal{E}_1` at :math:`X^0` and at :math:`X^L`, the final hidden layer (before the decoder).
Nothing is trained, so this is its own small runner rather than ``train.py`` (whose ``train.epochs`` must
be >= 1).

Options of the measurement live in the config's ``energy`` node (set by ``conf/experiment/gh_energy.yaml``;
absent → defaults): ``energy.features`` = ``raw`` (the loaders' features) | ``row`` (row-normalised, PyG's
``NormalizeFeatures``). The weight initialisation is the model's own ``model.init`` where the model has it.

Usage (a whole grid: ``conf/grid/<experiment>_<budget>.yaml``'s ``hydra.sweeper.params``; a comma list on
the command line replaces that axis)::

    python -m lipgnn.diagnostics.runner experiment=gh_energy budget=cpu
    python -m lipgnn.diagnostics.runner experiment=gh_energy budget=cpu dataset=cora,pubmed energy.features=row
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.diagnostics.probe import DEFINITION, energy_profile
from lipgnn.errors import ConfigError, LipgnnError
from lipgnn.identity import run_id

FEATURES: tuple[str, ...] = ("raw", "row")
DEFAULT_OPTIONS: dict[str, Any] = {"features": "raw"}
COAUTHOR = {"cs": "CS", "physics": "Physics"}


def energy_options(cfg: DictConfig) -> dict[str, Any]:
    """The ``energy`` node merged over :data:`DEFAULT_OPTIONS`, validated (one-line ConfigError)."""
    options = dict(DEFAULT_OPTIONS)
    node = cfg.get("energy")
    if node is not None:
        options.update(OmegaConf.to_container(node, resolve=True))  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ConfigError(f"energy.{unknown[0]} is unknown; the energy runner's options are: "
                          f"{', '.join(DEFAULT_OPTIONS)}")
    if options["features"] not in FEATURES:
        raise ConfigError(f"energy.features={options['features']!r} is unknown; use raw or row (row-normalised)")
    return options


# ---------------------------------------------------------------------------------------------- data
def load_coauthor_copy(name: str, cfg: DictConfig) -> Any:
    """Coauthor CS / Physics through PyG's ``Coauthor``, processed in a COPY of the raw files under
    ``dataset.cache_dir`` (the data root may be read-only). Used only while the suite has no
    ``conf/dataset/<name>.yaml`` loader of its own."""
    import shutil

    from torch_geometric.datasets import Coauthor

    from lipgnn.data.common import file_lock
    from lipgnn.errors import DatasetNotFoundError

    pyg_name = COAUTHOR[name]
    root = Path(str(cfg.dataset.get("root", "data"))).expanduser()
    cache = Path(str(cfg.dataset.get("cache_dir", ".cache/lipgnn"))).expanduser() / "coauthor"
    source = root / pyg_name / "raw"
    target = cache / pyg_name / "raw"
    with file_lock(cache / f".{pyg_name}.lock"):
        if not target.exists():
            if not source.is_dir():
                raise DatasetNotFoundError(f"{pyg_name} not found: expected {source}/ms_academic_*.npz; "
                                           "set LIPGNN_DATA to the folder holding it")
            shutil.copytree(source, target)
        return Coauthor(str(cache), pyg_name)[0]


def load_graph(cfg: DictConfig) -> tuple[Any, Any]:
    """``(data, spec)``: the dataset's full graph (``x``, ``edge_index``) and its DataSpec."""
    from lipgnn.data import DataSpec, load

    name = str(cfg.dataset.name)
    if cfg.dataset.get("kind") == "coauthor_copy":
        data = load_coauthor_copy(name, cfg)
        spec = DataSpec(num_features=int(data.x.size(1)), num_classes=int(data.y.max()) + 1,
                        step_edges=int(data.num_edges))
    else:
        task = load(cfg.dataset, int(cfg.seed))
        data, spec = next(iter(task.eval_batches())), task.spec
    return data, spec


def _dataset_override(overrides: list[str]) -> list[str]:
    """``dataset=cs|physics`` becomes the fallback loader when the suite has no such dataset config."""
    from lipgnn.config import CONF_DIR

    out = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "dataset" and value in COAUTHOR and not (Path(CONF_DIR) / "dataset" / f"{value}.yaml").exists():
            out += ["dataset=cora", f"dataset.name={value}", "dataset.kind=coauthor_copy",
                    f"dataset.pyg_name={COAUTHOR[value]}"]
        else:
            out.append(item)
    return out


def compose(overrides: Sequence[str], *, hydra_node: bool = False) -> DictConfig:
    """The suite's config for ``overrides`` (as ``train.py`` composes it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from lipgnn.config import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose("config", overrides=_dataset_override(list(overrides)), return_hydra_config=hydra_node)


# ---------------------------------------------------------------------------------------------- measure
def build_untrained(cfg: DictConfig, data: Any = None, spec: Any = None) -> tuple[torch.nn.Module, Any]:
    """``(model, data)`` as a training run of ``cfg`` would start: seed, load, re-seed, build; eval mode."""
    from torch_geometric import seed_everything
    from torch_geometric.transforms import NormalizeFeatures

    from lipgnn.models import build_model

    options = energy_options(cfg)
    _validate(cfg)
    seed_everything(int(cfg.seed))
    if data is None:
        data, spec = load_graph(cfg)
    if options["features"] == "row":
        data = NormalizeFeatures()(data.clone())
    seed_everything(int(cfg.seed))
    model = build_model(cfg.model, cfg.norm, spec, int(cfg.depth))
    return model.eval(), data


def _validate(cfg: DictConfig) -> None:
    """The suite's config validation; the fallback Coauthor loader's dataset node is checked by its loader."""
    from lipgnn.config import validate

    if cfg.dataset.get("kind") == "coauthor_copy":
        cfg = cfg.copy()
        cfg.dataset.kind = "planetoid"
    validate(cfg)


def measure(cfg: DictConfig, data: Any = None, spec: Any = None, graph: GraphMeasure | None = None) -> dict[str, Any]:
    """The record (not yet written) of one untrained model's per-layer energies."""
    from lipgnn.provenance import loaded_commit, versions
    from lipgnn.results.store import SCHEMA_VERSION

    started = time.time()
    model, data = build_untrained(cfg, data, spec)
    profile = energy_profile(model, data, graph, dirichlet_every_layer=False)
    width = profile.pop("width")
    config = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(config, dict)
    config.pop("hydra", None)
    config["energy"] = energy_options(cfg)
    final = profile["laplacian"][-1]
    return {
        "schema": SCHEMA_VERSION, "run_id": run_id(cfg, energy=config["energy"]),
        "experiment": str(cfg.experiment_name), "status": "completed", "config": config, "seed": int(cfg.seed),
        "git_commit": loaded_commit(), "versions": versions(), "wall_time_s": round(time.time() - started, 3),
        "diagnostics": {"energy": {
            "definition": DEFINITION, "normalise": "nodes", "width": width, "num_nodes": int(data.num_nodes),
            "init": profile, "final_laplacian": final, "final_laplacian_entries": final / width,
        }},
    }


# ---------------------------------------------------------------------------------------------- grid
def grid_overrides(base: Sequence[str]) -> list[list[str]]:
    """Every point of the experiment's sweep: ``hydra.sweeper.params`` crossed, with command-line comma
    lists replacing (or adding) axes; plain ``key=value`` overrides apply to every point."""
    cfg = compose([item for item in base if "," not in item], hydra_node=True)
    params: dict[str, list[str]] = {}
    sweeper = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    for key, value in dict(sweeper).items():
        params[str(key)] = [v.strip() for v in str(value).split(",")]
    fixed = []
    for item in base:
        key, _, value = item.partition("=")
        if "," in value or key in params:
            params[key] = [v.strip() for v in value.split(",")]
        else:
            fixed.append(item)
    # Datasets outermost: each graph is loaded once per run of the grid.
    order = sorted(params, key=lambda key: key != "dataset")
    axes = [[f"{key}={v}" for v in params[key]] for key in order]
    return [[*fixed, *point] for point in itertools.product(*axes)] if axes else [fixed]


def run_grid(base: Sequence[str], *, overwrite: bool = False, echo: bool = True) -> list[Path]:
    """Measure and write every grid point whose record is absent; the graph is loaded once per dataset."""
    from lipgnn.results.store import run_record_path, write_record

    written: list[Path] = []
    graphs: dict[tuple[str, str], tuple[Any, Any, GraphMeasure]] = {}
    for overrides in grid_overrides(base):
        cfg = compose(overrides)
        path = run_record_path(cfg.results_dir, str(cfg.experiment_name), run_id(cfg, energy=energy_options(cfg)))
        if path.exists() and not overwrite:
            continue
        key = (str(cfg.dataset.name), energy_options(cfg)["features"])
        if key not in graphs:
            graphs.clear()  # one graph in memory at a time (grids iterate datasets in blocks)
            data, spec = load_graph(cfg)
            graphs[key] = (data, spec, GraphMeasure(data.edge_index, int(data.num_nodes)))
        data, spec, graph = graphs[key]
        record = measure(cfg, data, spec, graph)
        written.append(write_record(cfg.results_dir, record))
        if echo:
            e = record["diagnostics"]["energy"]
            print(f"{record['run_id']}: E_2(X^L) = {e['final_laplacian']:.3e} (per entry "
                  f"{e['final_laplacian_entries']:.3e}) in {record['wall_time_s']:.1f}s", flush=True)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lipgnn.diagnostics.runner",
                                     description="energies of untrained models over an experiment's grid, as records")
    parser.add_argument("--overwrite", action="store_true", help="re-measure points whose record exists")
    parser.add_argument("overrides", nargs="+", help="e.g. experiment=gh_energy budget=cpu [dataset=cora,pubmed]")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        written = run_grid(args.overrides, overwrite=args.overwrite)
    except LipgnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(written)} records written", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
