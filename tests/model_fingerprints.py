"""Fingerprints of the models every experiment's grid builds: one job per distinct combination of model,
norm and variant overrides, built at depth <= 3 on a synthetic dense spec with seeds 0 and 1.

A fingerprint hashes the ``state_dict`` (names, shapes, dtypes, initial values) and every module's class
and plain attributes (dropout rates, LipschitzNorm's formula and alpha, which conv implementation), so a
default that changes in the builder, the schema or a YAML file shows up. ``python tests/model_fingerprints.py``
rewrites ``tests/data/model_fingerprints.json``; ``tests/test_model_defaults.py`` compares against it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

REFERENCE = Path(__file__).resolve().parent / "data" / "model_fingerprints.json"
_PLAIN = (int, float, str, bool, type(None))


def grid_jobs() -> dict[str, list[str]]:
    """Key -> overrides of the first job of each distinct model/norm/variant combination of every grid."""
    from lipgnn.config import CONF_DIR
    from lipgnn.sweep import sweep_jobs

    jobs: dict[str, list[str]] = {}
    for experiment in sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml")):
        for job in sweep_jobs(experiment, ["budget=cpu"]):
            combo = sorted(o for o in job if o.startswith(("model", "norm", "variant", "dropout")))
            jobs.setdefault(f"{experiment}:{' '.join(combo)}", job)
    return jobs


def _attributes(module: torch.nn.Module) -> list[Any]:
    out: list[Any] = [type(module).__qualname__]
    for key, value in sorted(vars(module).items()):
        if key.startswith("_") or key == "training":
            continue
        if isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)):
            out.append((key, repr(value)))
    return out


def fingerprint(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    for name, module in model.named_modules():
        digest.update(json.dumps([name, _attributes(module)]).encode())
    return digest.hexdigest()


def fingerprints() -> dict[str, dict[str, Any]]:
    from lipgnn.config import compose
    from lipgnn.data.spec import DataSpec
    from lipgnn.models import build_model

    spec = DataSpec(num_features=12, num_classes=4)
    out: dict[str, dict[str, Any]] = {}
    for key, job in grid_jobs().items():
        cfg = compose(job)
        depth = min(int(cfg.depth), 3)
        seeds = {}
        for seed in (0, 1):
            torch.manual_seed(seed)
            seeds[str(seed)] = fingerprint(build_model(cfg.model, cfg.norm, spec, depth, device="cpu"))
        out[key] = {"overrides": job, "depth": depth, "seeds": seeds}
    return out


if __name__ == "__main__":
    REFERENCE.write_text(json.dumps(fingerprints(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE}")
