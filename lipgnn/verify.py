"""``lipgnn verify``: rerun committed records on this machine and say whether they reproduce.

    lipgnn verify --sample 10                      # across experiments, cheapest first, within --budget-s
    lipgnn verify --experiment table1              # every finished record of one experiment
    lipgnn verify table3/<run id> <run id> ...     # named records
    lipgnn verify --dirty --replace                # records of uncommitted code, rerun over themselves

Each record is rerun through the run layer (:func:`lipgnn.runs.run`, its own kind: training, gh_depth, energy,
kim) with its own config, seed, thread count and numerics mode (a portable record in a portable child process),
into a temporary results folder; ``--replace`` writes over the committed record instead. A record whose config no
longer gives its run id is not rerun (the code's identity of the run changed). For each record the report says

* ``identical`` (the same history, best and last epochs, or diagnostics, bit for bit, at the record's own thread
  count), ``different`` (with the first epoch or diagnostic that differs), or ``same numbers at another thread
  count`` (never ``identical``: a thread count is part of what makes a number);
* the change of the reported metric (best-validation test accuracy; an energy record's final energy) against the
  seed-to-seed spread of that record's cell;
* whether a table cell or a verdict built on the record would change if the rerun replaced it;
* what differs between the record's run and this one: the code (``git log`` of the paths that compute numbers,
  between the record's commit and this checkout) and the machine (CPU, instruction-set levels, threads).

It writes ``verify.json`` and ``verify.md`` under ``--out`` (default ``<results_dir>/verify``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lipgnn import numerics
from lipgnn.errors import ConfigError, LipgnnError

#: paths whose changes can change a record's numbers (``git log`` between a record's commit and this checkout)
NUMERIC_PATHS: tuple[str, ...] = ("lipgnn/nn", "lipgnn/models", "lipgnn/train", "lipgnn/data", "lipgnn/runs/kinds",
                                  "lipgnn/diagnostics", "lipgnn/lipschitz", "conf", "pyproject.toml")
#: what a rerun adds to each record's own config
RERUN = ["overwrite=true", "log.progress=false", "logger=none"]
#: a record's estimated cost: its recorded wall time times SLOWER (another machine, portable numerics: about 1.3x
#: here), plus OVERHEAD_S (imports, data loading, comparison), seconds
SLOWER, OVERHEAD_S = 1.5, 10.0
FINISHED = ("completed", "diverged")
#: record fields compared for each kind (diagnostics without their timings)
COMPARED = ("status", "history", "best", "last", "epochs_run", "diagnostics")


# ------------------------------------------------------------------------------------------------ selection
def finished_records(results_dir: Path, experiment: str | None = None) -> list[dict[str, Any]]:
    from lipgnn.store import read_record, record_paths

    out = []
    for path in record_paths(results_dir, experiment):
        record = read_record(path)
        if record is not None and record.get("status") in FINISHED:
            out.append(record)
    return out


def named(results_dir: Path, names: Iterable[str]) -> list[dict[str, Any]]:
    """The records ``<experiment>/<run id>`` (or a run id only one experiment folder holds)."""
    from lipgnn.store import read_record

    out = []
    for name in names:
        pattern = f"runs/{name}.json" if "/" in name else f"runs/*/{name}.json"
        hits = sorted(results_dir.glob(pattern))
        if len(hits) != 1:
            raise ConfigError(f"{name}: {len(hits)} records match {results_dir}/{pattern}; pass <experiment>/<run id>")
        record = read_record(hits[0])
        if record is None:
            raise ConfigError(f"{hits[0]} is not a run record this lipgnn reads")
        out.append(record)
    return out


def estimate(record: Mapping[str, Any]) -> float:
    """Seconds a rerun is expected to take: the record's own wall time times :data:`SLOWER` plus :data:`OVERHEAD_S`."""
    return SLOWER * float(record.get("wall_time_s") or 0.0) + OVERHEAD_S


def sample(records: list[dict[str, Any]], n: int, budget_s: float) -> list[dict[str, Any]]:
    """Up to ``n`` records across experiments, cheapest first: each experiment's cheapest in turn (experiments in
    the order of their cheapest record), then each one's second cheapest, ...; a record whose estimate would pass
    ``budget_s`` is left out. Completed records come before diverged ones (a run that diverges at its first
    epoch reruns in no time and shows little)."""
    by_experiment: dict[str, list[dict[str, Any]]] = {}
    for record in sorted(records, key=lambda r: (r.get("status") != "completed", estimate(r), r["run_id"])):
        by_experiment.setdefault(record["experiment"], []).append(record)
    queues = sorted(by_experiment.values(), key=lambda q: (estimate(q[0]), q[0]["experiment"]))
    picked: list[dict[str, Any]] = []
    total = 0.0
    for round_ in range(max((len(q) for q in queues), default=0)):
        for queue in queues:
            if len(picked) == n:
                return picked
            if round_ < len(queue) and total + estimate(queue[round_]) <= budget_s:
                picked.append(queue[round_])
                total += estimate(queue[round_])
    return picked


# ------------------------------------------------------------------------------------------------ rerun config
def kind_of(record: Mapping[str, Any]) -> str:
    from lipgnn.runs.registry import declared_kind

    return str(record["config"].get("kind") or declared_kind(str(record["experiment"])))


def record_threads(record: Mapping[str, Any]) -> int | None:
    """The thread count the record ran with: its ``num_threads``, else its config's when that is a number."""
    for value in (record.get("num_threads"), (record["config"].get("train") or {}).get("num_threads")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def record_mode(record: Mapping[str, Any]) -> str:
    return str((record.get("numerics") or {}).get("mode") or "native")


def _dataset_option(dataset: Mapping[str, Any]) -> str:
    from lipgnn.config import CONF_DIR

    name = str(dataset.get("name") or "").lower()
    return name if (Path(CONF_DIR) / "dataset" / f"{name}.yaml").is_file() else str(dataset.get("kind"))


def rerun_config(record: Mapping[str, Any], results_dir: Path, threads: int) -> Any:
    """The composed config that reruns ``record``: its groups composed as ``train.py`` would, its stored values over
    them, the keys added since it was written at their neutral value (:data:`lipgnn.identity.NEUTRAL`)."""
    from omegaconf import OmegaConf, open_dict

    from lipgnn.config import compose, validate
    from lipgnn.identity import NEUTRAL, get_dotted

    config = record["config"]
    kind = kind_of(record)
    common = [f"results_dir={results_dir}", f"train.num_threads={threads}", f"numerics={record_mode(record)}", *RERUN]
    if kind == "kim":  # a unit's config is its own: compose the experiment at the unit's budget
        experiment, budget, seed = str(record["experiment"]), str(config["budget"]["name"]), int(record["seed"])
        unit = str(record["run_id"]).removeprefix(f"{experiment}-").rsplit("-", 1)[0]
        unit = unit.removesuffix(f"-s{seed}").removesuffix(f"-{budget}")
        return compose([f"experiment={experiment}", f"budget={budget}", f"kim.unit={unit}", f"seed={seed}", *common])
    cfg = compose([f"model={config['model']['name']}", f"norm={config['norm']['name']}",
                   f"dataset={_dataset_option(config['dataset'])}", f"kind={kind}", *common])
    stored = {k: v for k, v in config.items() if k not in ("logger", "hydra")}
    for group in ("train", "log"):  # what runs it here: this rerun's values, not the record's
        stored[group] = {k: v for k, v in (stored.get(group) or {}).items()
                         if k not in ("num_threads", "progress")}
    stored.update(results_dir=str(results_dir), numerics=record_mode(record), overwrite=True)
    with open_dict(cfg):
        merged = OmegaConf.merge(cfg, stored)
        for key, value in NEUTRAL.items():
            if get_dotted(config, key) is None and OmegaConf.select(merged, key, default=None) is not None:
                OmegaConf.update(merged, key, value)
    validate(merged)
    return merged


# ------------------------------------------------------------------------------------------------ comparison
def _drop_timings(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drop_timings(v) for k, v in value.items() if not str(k).endswith("time_s")}
    if isinstance(value, list):
        return [_drop_timings(v) for v in value]
    return value


def first_difference(old: Any, new: Any, where: str = "") -> str | None:
    """The first path at which two JSON values differ (``None``: equal)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            found = first_difference(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list):
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found is not None:
                return found
        return None if len(old) == len(new) else f"{where} (length {len(old)} vs {len(new)})"
    return None if old == new else where


def first_epoch(old: Mapping[str, Any], new: Mapping[str, Any]) -> int | None:
    """The first epoch whose loss or any score differs between two histories (None: none differs)."""
    a, b = old.get("history") or {}, new.get("history") or {}
    epochs = a.get("epoch") or []
    for i, epoch in enumerate(epochs):
        for key in sorted(set(a) | set(b)):
            if key == "epoch":
                continue
            x, y = (a.get(key) or [])[i:i + 1], (b.get(key) or [])[i:i + 1]
            if x != y:
                return int(epoch)
    return None if len(epochs) == len(b.get("epoch") or []) else int(epochs[-1]) + 1 if epochs else 1


def metric(record: Mapping[str, Any]) -> float | None:
    """The record's reported number: best-validation test accuracy (training kinds), the final energy (energy)."""
    if record.get("best"):
        value = record["best"].get("test")
        return None if value is None else float(value)
    energy = ((record.get("diagnostics") or {}).get("energy") or {}).get("final_laplacian")
    return None if energy is None else float(energy)


def seed_spread(frame: Any, record: Mapping[str, Any]) -> float | None:
    """The standard deviation of :func:`metric` over the seeds of the record's cell (its config key)."""
    from lipgnn.store.records import config_key

    if frame is None or frame.empty:
        return None
    cell = frame[frame["config_key"] == config_key(record["config"])]
    if record.get("best"):
        values = [float(v) for v in cell["best_test"] if math.isfinite(v)]
    else:
        values = [m for m in (metric({"diagnostics": d}) for d in cell["diagnostics"]) if m is not None]
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def code_changes(commit: str, root: Path) -> dict[str, Any]:
    """The commits between the record's and this checkout that touch :data:`NUMERIC_PATHS`."""
    from lipgnn.provenance import loaded_commit

    here = loaded_commit()
    sha = commit.removesuffix("-dirty")
    notes = []
    if commit.endswith("-dirty"):
        notes.append("the record's code had uncommitted changes, which it does not store")
    if here.endswith("-dirty"):
        notes.append("this checkout has uncommitted changes")
    if sha == here.removesuffix("-dirty"):
        return {"commits": [], "notes": notes}
    try:
        out = subprocess.run(["git", "log", "--format=%h %s", f"{sha}..{here.removesuffix('-dirty')}", "--",
                              *NUMERIC_PATHS], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commits": None, "notes": [*notes, f"git log failed: {exc}"]}
    if out.returncode != 0:
        return {"commits": None, "notes": [*notes, f"commit {sha[:10]} is not in this checkout"]}
    return {"commits": [line[:100] for line in out.stdout.splitlines()], "notes": notes}


def machine_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between the numeric environments of the record and of the rerun."""
    was, now = old.get("numerics"), new.get("numerics") or {}
    if not was:
        return ["the record names no numeric environment (written before records carried it)"]
    out = []
    if was.get("cpu", {}).get("model") != now.get("cpu", {}).get("model"):
        out.append(f"CPU {was.get('cpu', {}).get('model')} -> {now.get('cpu', {}).get('model')}")
    for lib, level in (was.get("levels") or {}).items():
        if (now.get("levels") or {}).get(lib) != level:
            out.append(f"{lib} {level} -> {(now.get('levels') or {}).get(lib)}")
    return out


def cause(code: Mapping[str, Any], machine: list[str]) -> str:
    """What can explain a difference: the code (commits touching the numerics), the machine, both, or neither."""
    commits = code.get("commits")
    code_changed = commits is None or bool(commits) or bool(code.get("notes"))
    unknown = bool(machine) and machine[0].startswith("the record names no numeric environment")
    if unknown:
        return "code changed; machine not recorded" if code_changed else "machine not recorded; same code"
    if machine:
        return "code and machine changed" if code_changed else "machine changed"
    return "code changed" if code_changed else "same code and machine"


# ------------------------------------------------------------------------------------------------ verdicts
class Impact:
    """Whether a table cell or a verdict changes when one rerun replaces its record: each artifact reading the
    record's experiment, its table and its claims computed with the committed records and with the rerun in place."""

    def __init__(self, results_dir: Path) -> None:
        from lipgnn.results.engine import Loader

        self.loader = Loader(results_dir)
        self._before: dict[str, tuple[str, list[str]]] = {}

    def frame(self, experiment: str) -> Any:
        return self.loader.experiment(experiment)

    @staticmethod
    def _outputs(artifact: Any, frame: Any) -> tuple[str, list[str]]:
        table = artifact.table(frame)["md"] if artifact.table is not None else ""
        claims = [f"{c.quote[:60]}: {c.verdict}" for c in artifact.claims(frame)] if artifact.claims else []
        return table, claims

    def changes(self, record: Mapping[str, Any]) -> list[str]:
        from lipgnn.results import registry
        from lipgnn.store.records import flatten_record, records_frame

        out = []
        for artifact in registry.artifacts():
            if record["experiment"] not in artifact.experiments:
                continue
            frame = self.loader.frame(artifact)
            rows = frame.index[(frame["run_id"] == record["run_id"]) & (frame["experiment"] == record["experiment"])]
            if len(rows) != 1:
                continue
            try:
                if artifact.name not in self._before:
                    self._before[artifact.name] = self._outputs(artifact, frame)
                table, claims = self._before[artifact.name]
                replaced = frame.copy()
                new = records_frame([flatten_record(record, frame.at[rows[0], "path"])]).iloc[0]
                for column in new.index.intersection(replaced.columns):
                    replaced.at[rows[0], column] = new[column]
                table2, claims2 = self._outputs(artifact, replaced)
            except Exception as exc:  # an artifact that cannot be computed on this frame: say so, go on
                out.append(f"{artifact.name}: not computed ({type(exc).__name__}: {exc})")
                continue
            if table2 != table:
                out.append(f"{artifact.name}: table cell")
            out += [f"{artifact.name}: verdict {a} -> {b.rsplit(': ', 1)[-1]}" for a, b in zip(claims, claims2,
                                                                                            strict=False) if a != b]
        return out


# ------------------------------------------------------------------------------------------------ rerun
def rerun_one(record: dict[str, Any], results_dir: Path, into: Path, threads: int | None) -> dict[str, Any]:
    """Rerun ``record`` into ``into`` through the run layer; the rerun's record (read back from its file)."""
    from lipgnn.runs import job_id, run
    from lipgnn.store import read_record, run_record_path

    use = threads or record_threads(record) or 1
    cfg = rerun_config(record, into, use)
    if job_id(cfg) != record["run_id"]:
        raise ConfigError(f"its config now gives run id {job_id(cfg)}: what the run computes changed")
    run(cfg, progress=False)
    new = read_record(run_record_path(into, str(record["experiment"]), str(record["run_id"])))
    if new is None:
        raise ConfigError("the rerun wrote no record")
    return new


def compare(record: dict[str, Any], new: dict[str, Any], impact: Impact | None, root: Path) -> dict[str, Any]:
    old_threads, new_threads = record_threads(record), new.get("num_threads")
    diff = first_difference(_drop_timings({k: record.get(k) for k in COMPARED}),
                            _drop_timings({k: new.get(k) for k in COMPARED}))
    if diff is None and old_threads is None:
        outcome = "same numbers, the record's thread count unknown"
    elif diff is None:
        outcome = "identical" if old_threads == new_threads else "same numbers at another thread count"
    else:
        outcome = "different"
    before, after = metric(record), metric(new)
    row: dict[str, Any] = {
        "record": f"{record['experiment']}/{record['run_id']}", "kind": kind_of(record), "outcome": outcome,
        "threads": {"record": old_threads, "rerun": new_threads}, "numerics": record_mode(record),
        "first_difference": diff, "first_epoch": first_epoch(record, new) if diff and record.get("history") else None,
        "metric": {"record": before, "rerun": after,
                   "delta": None if before is None or after is None else after - before},
        "wall_time_s": new.get("wall_time_s"),
        "code": code_changes(str(record.get("git_commit") or "unknown"), root),
        "machine": machine_changes(record, new), "commit": record.get("git_commit"),
    }
    if diff is not None:
        row["cause"] = cause(row["code"], row["machine"])
    if impact is not None and diff is not None:
        spread, delta = seed_spread(impact.frame(str(record["experiment"])), record), row["metric"]["delta"]
        row["metric"].update(seed_std=spread, in_spreads=None if delta is None or not spread else abs(delta) / spread)
        row["changes"] = impact.changes(new)
    return row


def verify(records: list[dict[str, Any]], results_dir: Path, *, replace: bool = False, threads: int | None = None,
           impact: bool = True, root: Path | None = None) -> list[dict[str, Any]]:
    """Rerun each record (those of the mode this process runs here, the others in a child process) and compare."""
    root = root or Path(__file__).resolve().parents[1]
    here = numerics.active_mode()
    mine = [r for r in records if record_mode(r) == here]
    others = [r for r in records if record_mode(r) != here]
    checker = Impact(results_dir) if impact else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="lipgnn-verify-") as tmp:
        into = results_dir if replace else Path(tmp)
        for record in mine:
            started = time.time()
            print(f"verify: rerunning {record['experiment']}/{record['run_id']} ({kind_of(record)}, "
                  f"{record_threads(record) or 'unknown -> 1'} thread(s), {here})", flush=True)
            try:
                new = rerun_one(record, results_dir, into, threads)
            except (LipgnnError, OSError) as exc:
                rows.append({"record": f"{record['experiment']}/{record['run_id']}", "kind": kind_of(record),
                             "outcome": "not rerun", "error": str(exc), "wall_time_s": round(time.time() - started, 1)})
                continue
            rows.append(compare(record, new, checker, root))
            print(f"verify: {rows[-1]['record']}: {rows[-1]['outcome']}", flush=True)
        if others:
            rows += _in_child(others, results_dir, replace, threads, impact)
    return rows


def _in_child(records: list[dict[str, Any]], results_dir: Path, replace: bool, threads: int | None,
              impact: bool) -> list[dict[str, Any]]:
    """The records of the other numerics mode, rerun by ``lipgnn verify`` in a process started in that mode."""
    env = {k: v for k, v in os.environ.items() if k not in numerics.PORTABLE and k != numerics.ENV}
    modes = {record_mode(r) for r in records}
    rows = []
    for mode in sorted(modes):
        with tempfile.TemporaryDirectory(prefix="lipgnn-verify-child-") as tmp:
            out = Path(tmp) / "rows.json"
            ids = [f"{r['experiment']}/{r['run_id']}" for r in records if record_mode(r) == mode]
            args = [sys.executable, "-m", "lipgnn.verify", *ids, "--results-dir", str(results_dir),
                    "--rows-only", str(out), *(["--replace"] if replace else []),
                    *(["--threads", str(threads)] if threads else []), *([] if impact else ["--no-impact"])]
            child_env = {**env, **(numerics.PORTABLE if mode == "portable" else {}), numerics.ENV: mode}
            done = subprocess.run(args, env=child_env)
            rows += json.loads(out.read_text()) if out.is_file() else [
                {"record": i, "outcome": "not rerun", "error": f"the {mode} child process failed ({done.returncode})"}
                for i in ids]
    return rows


# ------------------------------------------------------------------------------------------------ report
def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    spreads = [r["metric"].get("in_spreads") for r in rows if isinstance(r.get("metric"), dict)
               and r["metric"].get("in_spreads") is not None]
    accuracy = [r for r in rows if isinstance(r.get("metric"), dict) and r["metric"].get("delta") is not None
                and r["metric"].get("record") is not None and abs(r["metric"]["record"]) <= 1]
    largest = max(accuracy, key=lambda r: abs(r["metric"]["delta"]), default=None)
    return {"rerun": sum(r["outcome"] != "not rerun" for r in rows),
            "largest_accuracy_change": None if largest is None else {
                "record": largest["record"], "delta": largest["metric"]["delta"],
                "seed_std": largest["metric"].get("seed_std"), "in_spreads": largest["metric"].get("in_spreads")},
            "identical": sum(r["outcome"] == "identical" for r in rows),
            "different": sum(r["outcome"] == "different" for r in rows),
            "other_threads": sum(r["outcome"].startswith("same numbers") for r in rows),
            "not_rerun": sum(r["outcome"] == "not rerun" for r in rows),
            "largest_change_in_spreads": max(spreads, default=None),
            "causes": {c: sum(r.get("cause") == c for r in rows) for c in sorted({r["cause"] for r in rows
                                                                                    if r.get("cause")})},
            "verdicts_changed": sorted({c for r in rows for c in r.get("changes", []) if ": verdict " in c}),
            "table_cells_changed": sorted({c for r in rows for c in r.get("changes", []) if c.endswith("table cell")})}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}" if abs(value) <= 1 else f"{value:.3e}"


def _change(value: float, reference: float | None) -> str:
    """A change in points for an accuracy (a fraction), relative for anything else (an energy)."""
    if reference is not None and abs(reference) <= 1:
        return f"{100 * value:+.1f} pt"
    return f"{100 * value / reference:+.2g} %" if reference else f"{value:+.3g}"


def markdown(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    lines = [f"# lipgnn verify: {s['rerun']} record(s) rerun, {s['identical']} identical", "",
             f"Machine: {report['machine']}. Code: `{report['commit']}`. Selection: {report['selection']}. "
             f"Time: {report['wall_time_s']:.0f} s (announced: {report['announced_s']:.0f} s).", "",
             "| record | kind | threads (record / rerun) | outcome (cause) | first difference | metric: record → rerun "
             "(Δ / seed sd) | cells and verdicts changed | code changes since its commit | machine changes |",
             "|:---|:---|:---|:---|:---|:---|:---|:---|:---|"]
    for r in report["rows"]:
        if r["outcome"] == "not rerun":
            lines.append(f"| `{r['record']}` | {r.get('kind', '')} | | not rerun: {r.get('error')} | | | | | |")
            continue
        m, code = r["metric"], r["code"]
        spread = "" if not m.get("delta") else f" (Δ {_change(m['delta'], m['record'])}; seed sd " + (
            "unknown)" if m.get("seed_std") is None else f"{_change(m['seed_std'], m['record']).lstrip('+')}" + (
                f", {m['in_spreads']:.2f} sd)" if m.get("in_spreads") is not None else ")"))
        where = "" if r["first_difference"] is None else (f"epoch {r['first_epoch']}" if r.get("first_epoch")
                                                          else f"`{r['first_difference']}`")
        outcome = f"{r['outcome']} ({r['cause']})" if r.get("cause") else r["outcome"]
        commits = code.get("commits")
        code_text = ("unknown" if commits is None else f"{len(commits)} commit(s)") + "".join(
            f"; {n}" for n in code.get("notes", []))
        lines.append(f"| `{r['record']}` | {r['kind']} | {r['threads']['record'] or 'unknown'} / "
                     f"{r['threads']['rerun']} | "
                     f"{outcome} | {where} | {_pct(m['record'])} → {_pct(m['rerun'])}{spread} | "
                     f"{'; '.join(r.get('changes', [])) or 'none'} | {code_text} | "
                     f"{'; '.join(r['machine']) or 'none'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lipgnn verify", description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", help="<experiment>/<run id> or a run id")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--experiment", default=None, help="every finished record of one experiment")
    parser.add_argument("--sample", type=int, default=None, help="N records across experiments, cheapest first")
    parser.add_argument("--budget-s", type=float, default=900.0, help="--sample's time budget (default 900 s)")
    parser.add_argument("--dirty", action="store_true", help="the records written from uncommitted code")
    parser.add_argument("--replace", action="store_true", help="write the reruns over the records")
    parser.add_argument("--threads", type=int, default=None, help="another thread count (never 'identical')")
    parser.add_argument("--out", type=Path, default=None, help="default: <results-dir>/verify")
    parser.add_argument("--no-impact", action="store_true", help="skip the table and verdict recomputation")
    parser.add_argument("--rows-only", type=Path, default=None, help=argparse.SUPPRESS)  # a child's rows
    args = parser.parse_args(argv)
    try:
        if args.records:
            records, selection = named(args.results_dir, args.records), f"{len(args.records)} named record(s)"
        elif args.experiment or args.dirty:
            records = [r for r in finished_records(args.results_dir, args.experiment)
                       if not args.dirty or str(r.get("git_commit", "")).endswith("-dirty")]
            selection = " ".join(filter(None, [f"experiment {args.experiment}" if args.experiment else "",
                                               "records of uncommitted code" if args.dirty else ""]))
        elif args.sample:
            records = sample(finished_records(args.results_dir), args.sample, args.budget_s)
            selection = f"--sample {args.sample} within {args.budget_s:.0f} s, cheapest first across experiments"
        else:
            parser.error("give run ids, --experiment, --dirty or --sample N")
        announced = sum(estimate(r) for r in records)
        if args.rows_only is None:
            print(f"verify: {len(records)} record(s), estimated {announced:.0f} s ({SLOWER:g}x their recorded wall "
                  f"times + {OVERHEAD_S:.0f} s each) on {numerics.cpu()['model']}", flush=True)
        started = time.time()
        rows = verify(records, args.results_dir, replace=args.replace, threads=args.threads,
                      impact=not args.no_impact)
    except LipgnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.rows_only is not None:
        args.rows_only.write_text(json.dumps(rows, default=str))
        return 0
    from lipgnn.provenance import loaded_commit

    report = {"schema": 1, "selection": selection, "commit": loaded_commit(), "announced_s": round(announced, 1),
              "wall_time_s": round(time.time() - started, 1), "machine": numerics.describe(numerics.environment(
                  args.threads or 1)), "summary": summary(rows), "rows": rows}
    out = args.out or args.results_dir / "verify"
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "verify.md").write_text(markdown(report))
    s = report["summary"]
    print(f"verify: {s['rerun']} rerun, {s['identical']} identical, {s['different']} different, "
          f"{s['not_rerun']} not rerun in {report['wall_time_s']:.0f} s (announced {announced:.0f} s) -> "
          f"{out / 'verify.md'}")
    return 0 if s["not_rerun"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
