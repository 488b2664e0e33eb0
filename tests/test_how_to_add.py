"""docs/ARCHITECTURE.md's "How to add" paths are complete: following one, step by step, in a temporary copy of the
repository gives a working family, job kind or artifact, with nothing else to edit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    for name in ("lipgnn", "conf", "docs", "tests", "scripts"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.png", "*.pdf"))
    shutil.copy(ROOT / "train.py", copy / "train.py")
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: {old!r} is not where ARCHITECTURE.md says"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _python(copy: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_a_family_with_a_key_of_its_own(tmp_path: Path, data_root: Path) -> None:
    copy = _copy(tmp_path)
    schema = copy / "lipgnn" / "config_schema.py"
    # 1. the FAMILIES row; the schema with the family's key, its SCHEMAS and MODEL_SCHEMAS entries
    _edit(schema, '    "pyg_stack": ModelFamily("PYG_STACK", attention=True),\n',
          '    "pyg_stack": ModelFamily("PYG_STACK", attention=True),\n    "toy": ModelFamily("TOY"),\n')
    _edit(schema, "@dataclass\nclass NormConfig:", "@dataclass\nclass ToyConfig(ModelConfig):\n"
          "    toy_scale: float = number(1.0, gt=0)\n\n\n@dataclass\nclass NormConfig:")
    _edit(schema, '    ("model", "base_pyg_stack"): PygStackConfig,\n',
          '    ("model", "base_pyg_stack"): PygStackConfig,\n    ("model", "base_toy"): ToyConfig,\n')
    _edit(schema, '"pyg_stack": PygStackConfig}', '"pyg_stack": PygStackConfig, "toy": ToyConfig}')
    # 2. its YAML
    (copy / "conf" / "model" / "toy.yaml").write_text(
        "# A toy family: GraphConv layers scaled by toy_scale.\ndefaults:\n  - base_toy\n  - _self_\nname: toy\n"
        "hidden: 16               # hidden width\ntoy_scale: 2.0           # multiplies every layer's output\n")
    # 3. its builder, imported by the families package
    (copy / "lipgnn" / "models" / "families" / "toy.py").write_text('''"""A toy family: ``toy_scale * GraphConv(H)``."""

from torch import nn
from torch_geometric.nn import GraphConv

from lipgnn.models.registry import register_model
from lipgnn.models.stack import deep_stack


class Scaled(nn.Module):
    def __init__(self, hidden: int, scale: float) -> None:
        super().__init__()
        self.conv, self.scale = GraphConv(hidden, hidden), scale

    def forward(self, x, edge_index):
        return self.scale * self.conv(x, edge_index)


@register_model("toy")
def build_toy(b):
    return deep_stack(b, lambda layer: (Scaled(b.model.hidden, b.model.toy_scale), "plain"), nn.ReLU)
''')
    _edit(copy / "lipgnn" / "models" / "families" / "__init__.py", "gin, gt, pyg_stack, san\n",
          "gin, gt, pyg_stack, san, toy  # noqa: F401\n")
    # 5. the key counts only for its family
    _edit(copy / "lipgnn" / "identity.py", '    ("model.ffn_hidden", "model.name", ("san",)),\n',
          '    ("model.ffn_hidden", "model.name", ("san",)),\n    ("model.toy_scale", "model.name", ("toy",)),\n')
    out = _python(copy, "-c", """
from lipgnn.config import compose, validate
from lipgnn.errors import ConfigError
from lipgnn.identity import run_id
from lipgnn.seeding import start
cfg = compose(["model=toy", "dataset=cora", "depth=3"])
settings = validate(cfg)
model, task = start(settings)
data = next(iter(task.eval_batches()))
print(type(settings.model).__name__, settings.model.toy_scale, tuple(model(data.x, data.edge_index).shape))
assert run_id(cfg) != run_id(compose(["model=toy", "model.toy_scale=3", "dataset=cora", "depth=3"]))
try:
    validate(compose(["model=toy", "model.toy_scale=0"]))
except ConfigError as exc:
    print("refused:", exc)
""")
    assert "ToyConfig 2.0 (2708, 7)" in out and "refused: model.toy_scale" in out
    _python(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_model_registry.py", "-k",
            "every_declared_family", "tests/test_layers.py")


def test_a_job_kind(tmp_path: Path, data_root: Path) -> None:
    copy = _copy(tmp_path)
    # 1. the kind: gc_pause.resume() first, the model through lipgnn.seeding.start, its own id format
    (copy / "lipgnn" / "runs" / "kinds" / "toy.py").write_text('''"""A toy kind: the initial model's parameter count."""

import time

from omegaconf import DictConfig

from lipgnn.identity import identity_config, loose_digest
from lipgnn.runs.registry import Job, JobKind, register_job_kind


@register_job_kind("toy")
class Toy(JobKind):
    def run_id(self, cfg: DictConfig) -> str:
        return f"toy-{cfg.model.name}-s{cfg.seed}-{loose_digest({**identity_config(cfg), 'toy': dict(cfg.toy)})}"

    def compute(self, job: Job) -> dict:
        from lipgnn.seeding import start
        from lipgnn.train import gc_pause

        gc_pause.resume()
        started = time.time()
        model, _ = start(job.settings)
        count = sum(p.numel() for p in model.parameters()) * job.settings.toy.factor
        return {"status": "completed", "wall_time_s": time.time() - started, "diagnostics": {"count": count}}
''')
    # 2. imported by the kinds package
    _edit(copy / "lipgnn" / "runs" / "kinds" / "__init__.py",
          "from lipgnn.runs.kinds import energy, gh_collapse, gh_depth, kim, training\n",
          "from lipgnn.runs.kinds import energy, gh_collapse, gh_depth, kim, toy, training  # noqa: F401\n")
    # 3. its config node: a schema, a nullable root field, and not part of a training run's identity
    rule = f"# {'-' * 94} the rest\n"
    _edit(copy / "lipgnn" / "config_schema.py", rule,
          f"@dataclass\nclass ToyConfig:\n    factor: int = number(MISSING, ge=1, integer=True)\n\n\n{rule}")
    _edit(copy / "lipgnn" / "config_schema.py", '    kim: Any = field(default=None, metadata={"nullable": True})\n',
          '    kim: Any = field(default=None, metadata={"nullable": True})\n'
          '    toy: Any = field(default=None, metadata={"nullable": True})\n')
    _edit(copy / "lipgnn" / "config_schema.py", '    ("energy", "base_energy"): EnergyConfig,\n',
          '    ("energy", "base_energy"): EnergyConfig,\n    ("toy", "base_toy"): ToyConfig,\n')
    _edit(copy / "lipgnn" / "identity.py", '"energy", "kind", "kim",', '"energy", "kind", "kim", "toy",')
    # 4. an experiment that declares it and names its node's schema
    (copy / "conf" / "experiment" / "toy.yaml").write_text(
        "# @package _global_\n# toy: a toy job kind.\ndefaults:\n  - /toy: base_toy\nkind: toy\nexperiment_name: toy\n"
        "model:\n  name: gcn\ntoy:\n  factor: 2\n")
    results = tmp_path / "out"
    _python(copy, "train.py", "experiment=toy", "model=gcn", "dataset=cora", f"results_dir={results}")
    (path,) = (results / "runs" / "toy").glob("*.json")
    record = json.loads(path.read_text())
    assert path.stem.startswith("toy-gcn-s0-") and record["status"] == "completed"
    assert record["diagnostics"]["count"] > 0 and record["config"]["toy"] == {"factor": 2}
    again = _python(copy, "train.py", "experiment=toy", "model=gcn", "dataset=cora", f"results_dir={results}")
    assert "skip" in again.lower() and [p.name for p in (results / "runs" / "toy").glob("*.json")] == [path.name]


def test_an_artifact(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    results = copy / "results"
    shutil.copytree(ROOT / "results" / "runs" / "fig2", results / "runs" / "fig2")
    shutil.copytree(ROOT / "results" / "reproduction", results / "reproduction")
    shutil.copy(ROOT / "results" / "REPRODUCTION.md", results / "REPRODUCTION.md")
    # the experiment exists (fig2); one file defines the artifact, the paper protocol names it
    (copy / "lipgnn" / "results" / "artifacts" / "kim" / "toy.py").write_text('''"""A toy artifact: fig2's records."""

from lipgnn.results.artifact import Artifact


def _table(df):
    n = len(df)
    return {"csv": f"records\\n{n}\\n", "md": f"| records |\\n|---|\\n| {n} |\\n", "tex": f"records & {n}\\n"}


def _report(df):
    return {"toy-count": f"{len(df)} records counted."}


ARTIFACT = Artifact(name="toy", paper="kim", title="Toy: fig2's records counted", experiments=("fig2",),
                    table=_table, report=_report)
''')
    with (copy / "docs" / "paper_protocol.yaml").open("a", encoding="utf-8") as handle:
        handle.write('toy: {beyond: "a toy beyond the papers"}\n')
    _python(copy, "scripts/make_tables.py", "--results-dir", str(results), "--only", "toy")
    assert (results / "tables" / "toy.csv").read_text() == "records\n10\n"
    _python(copy, "scripts/make_report.py", "--results-dir", str(results), "--paper", "kim", "--append-missing")
    assert "10 records counted." in (results / "reproduction" / "kim.md").read_text()
    _python(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_registry.py", "-k",
            "loads or toy", "tests/test_layers.py")


def test_the_how_to_names_every_step() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8").split("## How to add", 1)[1]
    for needed in ("APPLIES_WHEN", "NEUTRAL", "MODEL_SCHEMAS", "SCHEMAS", "conf/variant/", "stack.py",
                   "NON_IDENTITY_KEYS", "gc_pause.resume()", "lipgnn.seeding.start", "docs/paper_protocol.yaml"):
        assert needed in text, needed
