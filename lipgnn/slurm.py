"""SLURM sweeps through submitit on clusters that keep no job accounting.

hydra-submitit-launcher waits for each job of a sweep by polling ``sacct``. Without an accounting daemon
(slurmdbd), as on small clusters and on the one-node cluster of ``scripts/slurm_local.sh``, every poll fails:
submitit then logs "Bypassing sacct error … status may be inaccurate" every few seconds and never learns a
job's state, so a job that ends without a result (cancelled, killed, out of memory) is waited for forever.
:class:`QueueWatcher` asks ``squeue`` instead when ``sacct`` fails, and says so once per sweep;
:class:`SlurmCallback` (a Hydra callback of ``conf/config.yaml``) installs it when a sweep starts under a
SLURM launcher. submitit offers no hook for its job-state source, so the watcher replaces the class attribute
``SlurmJob.watcher`` that every SLURM job of the process shares.
"""

from __future__ import annotations

import logging
import subprocess
import time
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)

# The state given to a job ``squeue`` no longer lists (the controller forgets a job MinJobAge after its end):
# it is over, and its result file (or the lack of one) says how.
FORGOTTEN = "ENDED"
# squeue's states of a job that is over; any other (CONFIGURING, REQUEUE_HOLD, SUSPENDED, ...) is not, and is
# passed to submitit as PENDING unless submitit knows it as unfinished already.
ENDED_STATES = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "TIMEOUT", FORGOTTEN}
UNFINISHED = {"READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "PREEMPTED"}  # submitit's


def _first_line(exc: BaseException) -> str:
    stderr = getattr(exc, "stderr", None)
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else str(stderr or "")
    return (text.strip().splitlines() or [str(exc)])[0]


def _watcher_class() -> type:
    from submitit.slurm.slurm import SlurmInfoWatcher

    class QueueWatcher(SlurmInfoWatcher):
        """submitit's SLURM state watcher, reading ``squeue`` when ``sacct`` fails (no accounting storage).

        ``squeue --states=all`` lists running, pending and recently ended jobs; a job it no longer knows has
        ended (the controller forgets a job MinJobAge after its end), which lets a sweep finish when a job
        was cancelled without writing a result.
        """

        def __init__(self, delay_s: int = 600) -> None:
            super().__init__(delay_s=delay_s)
            self.reported = False  # the one line per sweep about sacct has been logged

        def update(self) -> None:
            command = self._make_command()
            if command is None:
                return
            self._num_calls += 1
            try:
                self._output = subprocess.run(command, capture_output=True, check=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError) as exc:
                if not self.reported:
                    log.warning("sacct cannot report job states here (%s): reading them from squeue instead",
                                _first_line(exc))
                    self.reported = True
                self._info_dict.update(self._queue_states())
            else:
                self._info_dict.update(self.read_info(self._output))
            self._last_status_check = time.time()
            for job_id in self._registered - self._finished:
                if self.is_done(job_id, mode="cache"):
                    self._finished.add(job_id)

        def _queue_states(self) -> dict[str, dict[str, str]]:
            pending = self._registered - self._finished
            mains = sorted({job_id.split("_")[0] for job_id in pending})
            command = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T",
                       f"--jobs={','.join(mains)}"]
            try:
                out = subprocess.run(command, capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.SubprocessError):
                return {}
            if out.returncode != 0 and "Invalid job id" not in out.stderr:
                return {}  # the controller did not answer: states stay as they were
            states = self.read_info("JobID|State\n" + (out.stdout if out.returncode == 0 else ""))
            for job_id in pending:  # not listed: forgotten by the controller, hence ended
                states.setdefault(job_id, {"JobID": job_id, "State": FORGOTTEN})
            for info in states.values():
                if info["State"] not in ENDED_STATES | UNFINISHED:
                    info["State"] = "PENDING"
            return states

    return QueueWatcher


def install_queue_watcher() -> Any:
    """Make every submitit SLURM job of this process use a fresh :class:`QueueWatcher`; returns it."""
    from submitit.slurm.slurm import SlurmJob

    watcher = _watcher_class()(delay_s=600)
    SlurmJob.watcher = watcher
    return watcher


class SlurmCallback(Callback):
    """Hydra callback: under a SLURM launcher, job states come from ``squeue`` when ``sacct`` fails."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if "SlurmLauncher" in str(config.hydra.launcher.get("_target_", "")):
            install_queue_watcher()
