"""The generated blocks of ``README.md`` and ``docs/*.md``: ``make docs`` (``scripts/make_docs.py --check``: stale?).

No number in these pages is typed by hand. Each block between ``<!-- auto:NAME -->`` and ``<!-- /auto:NAME -->``
(the report's marker syntax, :mod:`lipgnn.results.render.markers`) is rebuilt from committed files:

- ``demo``: the demo's committed records ``results/demo/seed*.json`` (written by ``scripts/demo.py --out``);
- ``demo-map``: the failure map's records (``results/runs/failure_map/``, the same question at 1000 epochs over lr
  and dropout), through its artifact :mod:`lipgnn.results.artifacts.lipschitznorm.failure_map`;
- ``bench-summary``, ``bench-steps``, ``bench-runs``: ``results/bench/summary.csv`` (the step table of
  ``make bench``) and the folders of :data:`CURRENT_BENCH` (a whole ``train.py`` run, the 256-layer SAN row);
- ``config-groups``, ``config-keys``: every option of every group under ``conf/`` and every key of every schema
  of :mod:`lipgnn.config_schema`, so the reference cannot omit one;
- ``verdict-margins``: the declared margins of the reproduction scale (:mod:`lipgnn.results.verdict`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lipgnn.config import CONF_DIR
from lipgnn.config_schema import SCHEMAS, schema_fields
from lipgnn.errors import ConfigError
from lipgnn.results.render.markers import block_names, close_marker, open_marker, replace_blocks

#: The pages with generated blocks, and the blocks each must hold.
PAGES: dict[str, tuple[str, ...]] = {
    "README.md": ("demo", "demo-map", "bench-summary"),
    "docs/performance.md": ("bench-steps", "bench-runs"),
    "docs/config.md": ("config-groups", "config-keys"),
    "docs/verdicts.md": ("verdict-margins",),
}
#: The bench folders (under ``results/bench/``) whose numbers the pages quote as current, besides the step table
#: in ``results/bench/summary.csv``: the latest whole-run comparison and the latest 256-layer SAN row.
CURRENT_BENCH: dict[str, str] = {"whole run": "e2e_5830999", "san": "san256_d33e1fa"}
STEP_VARIANTS = (("pyg_gat", "stock `GATConv`"), ("gat", "our GAT"), ("gat_lip", "our GAT-Lip"),
                 ("pyg_gt", "stock `TransformerConv`"), ("gt", "our GT"), ("gt_lip", "our GT-Lip"))
GRAPH_NAMES = {"cora": "Cora", "pubmed": "PubMed", "arxiv": "arxiv-sized random graph"}


#: ``make demo``'s last line, for scripts: test accuracy at the last epoch and at best validation of both models,
#: the largest attention-gradient norm of each over the first epochs, the demo's wall time.
LAST_LINE = re.compile(r"^demo: GAT last (\d+\.\d)% \(best (\d+\.\d)%\) vs GAT-Lip last (\d+\.\d)% "
                       r"\(best (\d+\.\d)%\); attention-gradient norms (\d\.\de-?\d+) vs (\d\.\de-?\d+); (\d+) s$")


def sci(value: float) -> str:
    """``5.7e4``, ``1.6e-2``: one decimal, the exponent without sign padding."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def last_line(gat: dict[str, Any], lip: dict[str, Any], seconds: float) -> str:
    return (f"demo: GAT last {gat['last_test']:.1f}% (best {gat['best_val_test']:.1f}%) vs GAT-Lip last "
            f"{lip['last_test']:.1f}% (best {lip['best_val_test']:.1f}%); attention-gradient norms "
            f"{sci(gat['grad_norm'])} vs {sci(lip['grad_norm'])}; {round(seconds)} s")


@dataclass
class PageResult:
    path: Path
    changed: bool


# ---------------------------------------------------------------------------------------------- demo


def demo_records(root: Path) -> list[dict[str, Any]]:
    paths = sorted((root / "results" / "demo").glob("seed*.json"))
    if not paths:
        raise ConfigError(f"no demo records under {root / 'results' / 'demo'}: run "
                          "scripts/demo.py --seed N --out <dir> at a commit and copy its demo.json there as seedN.json")
    return sorted((json.loads(p.read_text()) for p in paths), key=lambda r: r["seed"])


def demo_block(root: Path) -> str:
    records = demo_records(root)
    first = records[0]
    rows = ["| seed | GAT last epoch | GAT best val | GAT-Lip last epoch | GAT-Lip best val | attention-gradient norm "
            "GAT / GAT-Lip | time | commit |", "|---:|---:|---:|---:|---:|---:|---:|:---|"]
    for r in records:
        gat, lip = r["gat"], r["gat_lip"]
        rows.append(f"| {r['seed']} | {gat['last_test']:.1f} % | {gat['best_val_test']:.1f} % | "
                    f"{lip['last_test']:.1f} % | {lip['best_val_test']:.1f} % | {sci(gat['grad_norm'])} / "
                    f"{sci(lip['grad_norm'])} ({gat['grad_norm'] / lip['grad_norm']:,.0f}x) | "
                    f"{r['wall_time_s']:.0f} s | `{r['git_commit'][:7]}` |")
    cpus = sorted({r["cpu"] for r in records})
    modes = {r.get("numerics", "native") for r in records}
    numbers = ("The accuracies and gradient norms are portable: the runs pinned every numeric library to x86-64-v3 "
               "(`numerics=portable`, `lipgnn/numerics.py`), so an x86-64 machine with AVX2 and the same library "
               "versions (each run record names them) runs the same code paths and prints them bit for bit; the "
               "times are this machine's." if modes == {"portable"} else
               "The numbers are machine-bound: the runs used the host's instruction set (`numerics=native`), and "
               "another CPU can print other accuracies.")
    return "\n".join([
        f"Test accuracy of the {first['depth']}-layer models on {first['where']} with "
        f"{first.get('setting', 'the default settings')} after {first['epochs']} epochs "
        "(last epoch, and at the epoch of best validation accuracy), the largest attention-gradient norm over the "
        f"first epochs, and the demo's wall time on one thread of an {', '.join(cpus)} shared with other work "
        "(`results/demo/seed*.json`, from `scripts/demo.py --seed N`):", "", *rows, "",
        f"Seed {first['seed']}'s last line: `{last_line(first['gat'], first['gat_lip'], first['wall_time_s'])}`",
        "", numbers])


# ---------------------------------------------------------------------------------------------- bench


def demo_map_block(root: Path) -> str:
    """What the demo's question gives at the paper's 1000 epochs, at the demo's setting and at lr 0.001, from the
    failure map's records (each point: mean test accuracy over its seeds, and GAT-Lip − GAT with its interval)."""
    from lipgnn.results.artifacts.lipschitznorm import failure_map
    from lipgnn.results.engine import Loader

    frame = Loader(root / "results").frame(failure_map.ARTIFACT)
    done = {(p.depth, p.lr, p.dropout): p for p in failure_map.points(frame, 1000) if p.gat.n and p.lip.n}
    settings = ((0.005, "authors'", "the demo's setting (lr 0.005, the authors' dropouts)"),
                (0.001, "authors'", "lr 0.001 with the authors' dropouts"),
                (0.001, "none", "lr 0.001 without dropout"))
    lines = ["The same question at the paper's 1000 epochs, from the records of the pre-registered "
             "[failure map](results/REPRODUCTION.md#failure_map) (Cora, test accuracy at the epoch of best validation "
             "accuracy, mean over seeds; GAT-Lip − GAT paired over seeds, 95 % interval):", ""]
    for depth in sorted(failure_map.DEPTHS):
        parts = []
        for lr, dropout, name in settings:
            p = done.get((depth, lr, dropout))
            if p is None:
                parts.append(f"{name}: not run yet")
                continue
            parts.append(f"{name}: GAT {100 * p.gat.mean:.1f} % vs GAT-Lip {100 * p.lip.mean:.1f} % "
                         f"(GAT-Lip − GAT in points: {p.diff.text()})")
        lines.append(f"- {depth} layers — " + "; ".join(parts) + ".")
    return "\n".join(lines)


def _bench_rows(path: Path) -> dict[tuple[str, int, str], dict[str, float]]:
    import pandas as pd

    frame = pd.read_csv(path)
    return {(r.graph, int(r.depth), r.variant): {"median_s": float(r.median_s), "ratio": float(r.ratio_vs_pyg)}
            for r in frame.itertuples()}


def _commit(folder: Path) -> str:
    meta = folder / "meta.json"
    commit = json.loads(meta.read_text()).get("git_commit") if meta.exists() else None
    return f"`{commit[:7]}`" if commit else "commit not recorded"


def _seconds(value: float) -> str:
    return f"{value:.3f} s" if value < 0.1 else f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _step_cell(cell: dict[str, float] | None) -> str:
    if cell is None:
        return "—"
    ratio = cell["ratio"]
    return f"{_seconds(cell['median_s'])}" + (f" ({ratio:.2f})" if math.isfinite(ratio) else " (no stock run)")


def bench_steps_block(root: Path) -> str:
    rows = _bench_rows(root / "results" / "bench" / "summary.csv")
    points = sorted({(g, d) for g, d, _ in rows}, key=lambda p: (list(GRAPH_NAMES).index(p[0]), p[1]))
    lines = ["| graph, depth | " + " | ".join(label for _, label in STEP_VARIANTS) + " |",
             "|---|" + "---|" * len(STEP_VARIANTS)]
    for graph, depth in points:
        cells = [_step_cell(rows.get((graph, depth, v))) for v, _ in STEP_VARIANTS]
        if any(cell != "—" for cell in cells):
            lines.append(f"| {GRAPH_NAMES.get(graph, graph)}, {depth} | " + " | ".join(cells) + " |")
    return "\n".join([
        "One full-batch training step (forward, loss, backward, Adam; hidden 64, one head, no dropout), one thread, "
        "median over the bench's repeats; in brackets the ratio to the stock PyG stack (< 1 = faster). "
        "`results/bench/summary.csv` (`make bench`):", "", *lines])


def _whole_run(root: Path) -> tuple[dict[str, float], dict[str, float], str]:
    folder = root / "results" / "bench" / CURRENT_BENCH["whole run"]
    rows = _bench_rows(folder / "summary.csv")
    return rows[("pubmed", 30, "train_py_pyg")], rows[("pubmed", 30, "train_py_fused")], _commit(folder)


def bench_runs_block(root: Path) -> str:
    pyg, fused, commit = _whole_run(root)
    folder = root / "results" / "bench" / CURRENT_BENCH["san"]
    san = _bench_rows(folder / "summary.csv")
    lines = [f"- **A whole `train.py` run** (30-layer GAT-Lip, PubMed, dropouts 0.6 / 0.3, 20 epochs with evaluation, "
             f"start-up included): `model.impl=pyg` {_seconds(pyg['median_s'])}, `fused` {_seconds(fused['median_s'])} "
             f"({pyg['median_s'] / fused['median_s']:.2f}x; `results/bench/{CURRENT_BENCH['whole run']}/`, {commit})."]
    for stock, ours, label in (("pyg_san", "san", "Post-LN"), ("pyg_san_pre", "san_pre", "Pre-LN"),
                               ("pyg_san_nonlocal", "san_nonlocal", "nonlocal Post-LN")):
        a, b = san.get(("cora", 256, stock)), san.get(("cora", 256, ours))
        if a and b:
            lines.append(f"- **256-layer SAN step on Cora, {label}**: {_seconds(b['median_s'])} against "
                         f"{_seconds(a['median_s'])} for `impl=pyg` ({a['median_s'] / b['median_s']:.2f}x; "
                         f"`results/bench/{CURRENT_BENCH['san']}/`, {_commit(folder)}, each variant in a process "
                         "of its own).")
    return "\n".join(lines)


def bench_summary_block(root: Path) -> str:
    rows = _bench_rows(root / "results" / "bench" / "summary.csv")
    pyg, fused, _ = _whole_run(root)
    graphs = [g for g in ("cora", "pubmed") if (g, 30, "pyg_gat") in rows and (g, 30, "gat_lip") in rows]
    ours = " and ".join(f"{_seconds(rows[(g, 30, 'gat_lip')]['median_s'])} on {GRAPH_NAMES[g]}" for g in graphs)
    stock = " and ".join(_seconds(rows[(g, 30, "pyg_gat")]["median_s"]) for g in graphs)
    return (f"On one CPU thread a 30-layer GAT-Lip training step takes {ours}, against {stock} for the stock PyG "
            f"`GATConv` stack; a whole 20-epoch 30-layer PubMed run takes {_seconds(fused['median_s'])} against "
            f"{_seconds(pyg['median_s'])} ({pyg['median_s'] / fused['median_s']:.1f}x; `results/bench/`, "
            "[docs/performance.md](docs/performance.md)).")


# ---------------------------------------------------------------------------------------------- config


def _yaml_notes(path: Path) -> tuple[str, dict[str, str]]:
    """A YAML file's leading comment (its description) and each top-level key's trailing comment."""
    lines = path.read_text().splitlines()
    head = []
    for line in lines:
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text.startswith("@package"):
            head.append(text)
    notes, parent = {}, ""
    for line in lines:
        m = re.match(r"^( *)([A-Za-z_][\w]*):([^#]*)(?:#\s*(.+))?$", line)
        if not m:
            continue
        key = m.group(2) if not m.group(1) else f"{parent}.{m.group(2)}"
        if not m.group(1):
            parent = m.group(2)
        if m.group(4):
            notes.setdefault(key, m.group(4).strip())
    return " ".join(head), notes


def _groups(conf: Path) -> dict[str, list[Path]]:
    groups = {}
    for folder in sorted(p for p in conf.rglob("*") if p.is_dir()):
        files = sorted(folder.glob("*.yaml"))
        if files:
            groups[folder.relative_to(conf).as_posix()] = files
    return groups


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def config_groups_block(conf: Path) -> str:
    out = ["Every option of every group under `conf/` (`python train.py <group>=<option>`), with the description "
           "its YAML file starts with. `grid/<experiment>_<budget>.yaml` is selected by `experiment=` and `budget=` "
           "together; `variant/` names one of the papers' rows as model + norm + residual."]
    for group, files in _groups(conf).items():
        out += ["", f"### `{group}/`", ""]
        if group == "grid":
            out.append(", ".join(f"`{f.stem}`" for f in files))
            continue
        out += ["| option | what it is |", "|---|---|"]
        out += [f"| `{f.stem}` | {_cell(_yaml_notes(f)[0]) or '—'} |" for f in files]
    return "\n".join(out)


def _allowed(spec: Any) -> str:
    meta = spec.metadata
    if "choices" in meta:
        return " \\| ".join(f"`{c}`" for c in meta["choices"]) + (" \\| `null`" if meta.get("nullable") else "")
    if meta.get("flag"):
        return "`true` \\| `false`"
    if meta.get("threads"):
        return "`auto` or an integer ≥ 1"
    if "integer" in meta:
        bounds = [f"{sym} {meta[key]:g}" for key, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
                  if meta.get(key) is not None]
        kind = "integer" if meta["integer"] else "number"
        return ", ".join([kind, *bounds]) + (", or `null`" if meta.get("nullable") else "")
    if meta.get("text"):
        return "text" + (" or `null`" if meta.get("nullable") else "")
    if str(spec.type).startswith(("list", "dict")):  # a YAML list or mapping, its element type checked by Hydra
        return f"`{_cell(str(spec.type))}`"
    return "see below" if meta.get("nullable") is not None else "a group"


def _default(spec: Any) -> str:
    if spec.default is not dataclasses.MISSING and spec.default != "???":
        plain = spec.default is None or isinstance(spec.default, bool)
        return f"`{json.dumps(spec.default) if plain else spec.default}`"
    if spec.default_factory is not dataclasses.MISSING:
        return f"`{spec.default_factory()}`" if spec.default_factory in (list, dict) else "(a group)"
    return "(set by the option)"


def config_keys_block(conf: Path) -> str:
    out = ["Every key of every typed schema (`lipgnn/config_schema.py`): its range or choices are checked before a "
           "run starts. The notes are the comments beside each key in the group's YAML files."]
    for (group, name), schema in SCHEMAS.items():
        notes: dict[str, str] = {}
        for path in sorted((conf / group).glob("*.yaml")) if group else [conf / "config.yaml"]:
            for key, note in _yaml_notes(path)[1].items():
                notes.setdefault(key, note)
        fields: dict[str, Any] = {}
        for key, spec in schema_fields(schema).items():
            nested = spec.default_factory if dataclasses.is_dataclass(spec.default_factory) else None
            fields |= {f"{key}.{k}": f for k, f in schema_fields(nested).items()} if nested else {key: spec}
        title = f"`{group}.*` keys, schema `{name}`" if group else "top-level keys"
        out += ["", f"### {title} ({schema.__name__})", "", "| key | allowed | default | note |", "|---|---|---|---|"]
        for key, spec in fields.items():
            out.append(f"| `{key}` | {_allowed(spec)} | {_cell(_default(spec))} | {_cell(notes.get(key, ''))} |")
    return "\n".join(out)


def verdict_margins_block() -> str:
    """The reproduction scale's declared margins and levels, from the constants the verdicts use."""
    from lipgnn.results import stats, verdict

    rows = [("`SIZE_MARGIN`", f"{verdict.SIZE_MARGIN:g} × the paper's effect"),
            ("`FLOOR_MARGIN`", f"{100 * verdict.FLOOR_MARGIN:g} points above the majority class or chance"),
            ("`MIN_BUDGET`", f"{100 * verdict.MIN_BUDGET:g} % of the paper's epochs or passes"),
            ("`LEVEL`", f"{100 * stats.LEVEL:g} % two-sided intervals; tests and adjusted p-values at "
                        f"{100 * (1 - stats.LEVEL):.0f} %"),
            ("`MIN_SEEDS`", f"{stats.MIN_SEEDS} paired seeds")]
    out = ["| constant | value |", "|:---|:---|"]
    out += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- pages


def blocks(root: Path) -> dict[str, str]:
    conf = Path(CONF_DIR)
    return {"demo": demo_block(root), "demo-map": demo_map_block(root), "bench-summary": bench_summary_block(root),
            "bench-steps": bench_steps_block(root), "bench-runs": bench_runs_block(root),
            "config-groups": config_groups_block(conf), "config-keys": config_keys_block(conf),
            "verdict-margins": verdict_margins_block()}


def refresh(root: str | Path = ".", *, write: bool = True) -> list[PageResult]:
    """Rebuild every page's blocks from the committed files; ``write=False`` only says which pages are stale.

    A page that lacks one of its blocks is an error (the block would silently never be refreshed).
    """
    root = Path(root)
    made = blocks(root)
    results = []
    for name, wanted in PAGES.items():
        path = root / name
        text = path.read_text(encoding="utf-8")
        missing = [b for b in wanted if b not in block_names(text)]
        if missing:
            raise ConfigError(f"{path} lacks the block(s) {', '.join(missing)}: add "
                              + ", ".join(f"{open_marker(b)} ... {close_marker(b)}" for b in missing))
        new, _, _ = replace_blocks(text, {b: made[b] for b in wanted})
        if write and new != text:
            path.write_text(new, encoding="utf-8")
        results.append(PageResult(path, new != text))
    return results
