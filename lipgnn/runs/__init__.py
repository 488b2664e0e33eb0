"""One run layer for every record: ``python train.py [-m] experiment=<name> budget=<b> ...``.

Every job, whatever it computes, goes compose → validate → identity → lock/resume → compute → record
(:mod:`lipgnn.runs.layer`). What it computes is its *job kind*, declared by the experiment (``kind:`` in
``conf/experiment/<name>.yaml``, default ``training``) and registered by name (:mod:`lipgnn.runs.registry`):

* ``training`` (:mod:`lipgnn.runs.kinds.training`): train one model; resumes through checkpoints;
* ``gh_depth`` (:mod:`lipgnn.runs.kinds.gh_depth`): a training run plus diagnostics of the trained model;
* ``energy`` (:mod:`lipgnn.runs.kinds.energy`): energies of an untrained model (a cheap unit);
* ``kim`` (:mod:`lipgnn.runs.kinds.kim`): a unit of Kim et al.'s experiments (a cheap unit).

Every kind is launched, resumed (a rerun skips finished records and resumes checkpoints), listed
(``lipgnn sweep-status``, which asks :func:`job_id`) and summarised the same way.
"""

from lipgnn.runs.kinds import job_kind
from lipgnn.runs.layer import checkpoint_path, import_record, job_id, run
from lipgnn.runs.registry import Job, JobKind, register_job_kind

__all__ = ["Job", "JobKind", "checkpoint_path", "import_record", "job_id", "job_kind", "register_job_kind", "run"]
