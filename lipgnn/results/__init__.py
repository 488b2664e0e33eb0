"""Run records (store, records), the selection protocol, and the artifact registry with its engine.

The engine (``engine``, ``report``), the artifacts (``artifacts/<paper>/<name>.py``) and the plotting helpers
are not imported here (matplotlib is slow to import), so importing this package (done by the trainer for
``write_record``) stays cheap.
"""

from lipgnn.results.store import (
    COLUMNS,
    RECORD_COLUMNS,
    SCHEMA_VERSION,
    load_records,
    read_record,
    run_record_path,
    variant_label,
    write_failure_record,
    write_record,
)

__all__ = [
    "COLUMNS",
    "RECORD_COLUMNS",
    "SCHEMA_VERSION",
    "load_records",
    "read_record",
    "run_record_path",
    "variant_label",
    "write_failure_record",
    "write_record",
]
