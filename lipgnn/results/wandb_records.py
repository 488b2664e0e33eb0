"""Run records back from W&B: ``lipgnn pull-wandb ENTITY/PROJECT`` (W&B's public API).

A ``logger=wandb`` run uploads its record as the run's file ``lipgnn_record.json``: the bytes
:func:`~lipgnn.store.write_record` writes into the results folder. Where a sweep's jobs wrote their
records to folders the reporting machine cannot read (node-local disks, another cluster), this module brings
them back into ``results_dir/runs/<experiment>/``, where ``make tables`` and ``make report`` read them:

* each W&B run's record file is downloaded and read like a local record (a foreign or corrupt file is
  counted and skipped, never written);
* a lipgnn run rerun with ``overwrite=true`` has several W&B runs (one per attempt): the newest attempt's
  record is the one kept (runs are listed oldest first);
* ad-hoc runs (no ``experiment=``) are left out unless ``experiment`` names them, as ``train.py`` keeps them out
  of ``results/``;
* a record already on disk with the same bytes is left alone; a different one is kept unless it is a failed
  run's record or ``overwrite`` is set, so that pulling never silently replaces a local result.

Why by hand: W&B's API lists runs and downloads files, but knows nothing of lipgnn's records and results layout.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lipgnn.config import AD_HOC_EXPERIMENT
from lipgnn.errors import LipgnnError
from lipgnn.store import read_record, record_text, run_record_path
from lipgnn.train.loggers import RECORD_FILE

__all__ = ["OUTCOMES", "PullError", "describe", "pull_records"]

#: Outcomes counted per W&B run, in the order the summary prints them.
OUTCOMES = ("new", "replaced", "unchanged", "kept local", "older attempt", "other experiment", "ad-hoc run",
            "no record file", "unreadable")


class PullError(LipgnnError):
    """The project cannot be read (bad path, no network, no login): one line."""


def _api() -> Any:
    try:
        import wandb
    except ImportError as exc:  # pragma: no cover - wandb is a dependency
        raise PullError("lipgnn pull-wandb needs the wandb package: pip install wandb") from exc
    return wandb.Api(timeout=60)


def _record_file(run: Any) -> Any | None:
    for file in run.files(names=[RECORD_FILE]):
        if file.name == RECORD_FILE:
            return file
    return None


def _download(file: Any, folder: Path) -> dict | None:
    file.download(root=str(folder), replace=True)
    return read_record(folder / RECORD_FILE)


def pull_records(project: str, results_dir: str | Path, experiment: str | None = None, *, overwrite: bool = False,
                 api: Any = None) -> Counter[str]:
    """Write the records of the W&B runs of ``project`` (``entity/project``) into ``results_dir``; return how many
    runs ended in each of :data:`OUTCOMES` (module docstring). ``experiment`` keeps one experiment's runs only."""
    if project.count("/") != 1 or not all(project.split("/")):
        raise PullError(f"W&B project {project!r} must be written entity/project, e.g. my-team/lipgnn")
    api = api if api is not None else _api()
    try:
        runs: Iterable[Any] = list(api.runs(project))
    except Exception as exc:  # W&B raises its own error types, and requests' for the network
        raise PullError(f"cannot list the runs of W&B project {project}: {' '.join(str(exc).split())} "
                        "(check the network and `wandb login`)") from None
    counts: Counter[str] = Counter({outcome: 0 for outcome in OUTCOMES})
    newest: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="lipgnn-pull-") as tmp:
        for index, run in enumerate(runs):
            job_type = getattr(run, "job_type", None)
            if experiment is not None and job_type not in (None, experiment):
                counts["other experiment"] += 1
                continue
            try:
                file = _record_file(run)
                record = None if file is None else _download(file, Path(tmp) / str(index))
            except Exception as exc:  # the network failed mid-pull: nothing has been written yet
                raise PullError(f"lost W&B while reading run {getattr(run, 'id', index)} of {project}: "
                                f"{' '.join(str(exc).split())}; nothing was written, run the pull again") from None
            if file is None:
                counts["no record file"] += 1
                continue
            if record is None or not {"run_id", "experiment", "status"} <= record.keys():
                counts["unreadable"] += 1
                continue
            if experiment is not None and record["experiment"] != experiment:
                counts["other experiment"] += 1
                continue
            if experiment is None and record["experiment"] == AD_HOC_EXPERIMENT:  # kept out of results/ (docs/usage.md)
                counts["ad-hoc run"] += 1
                continue
            key = (str(record["experiment"]), str(record["run_id"]))
            if key in newest:
                counts["older attempt"] += 1
            newest[key] = record
    from lipgnn.runs import import_record  # the run layer's lock and writer

    for (name, run_id), record in newest.items():
        path = run_record_path(results_dir, name, run_id)
        if path.exists():
            if path.read_text(encoding="utf-8") == record_text(record):
                counts["unchanged"] += 1
                continue
            local = read_record(path)
            if not (overwrite or local is None or local.get("status") == "failed"):
                counts["kept local"] += 1
                continue
            counts["replaced"] += 1
        else:
            counts["new"] += 1
        import_record(results_dir, record)
    return counts


def describe(counts: Counter[str], results_dir: str | Path) -> str:
    """One line for the console: what the pull did, and what to do about records kept local."""
    parts = [f"{counts[o]} {o}" for o in OUTCOMES if counts[o]]
    text = f"{results_dir}: " + (", ".join(parts) if parts else "no W&B runs")
    if counts["kept local"]:
        text += "; records that differ from the local ones were left alone (--overwrite replaces them)"
    if counts["ad-hoc run"]:
        text += f"; ad-hoc runs were left out (--experiment {AD_HOC_EXPERIMENT} --results-dir outputs pulls them)"
    return text
