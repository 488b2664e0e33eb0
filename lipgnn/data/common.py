"""Helpers shared by the dataset loaders: stable seeding, file mirroring, fail-fast downloads."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

# Seconds allowed for the network probe made before any download. Offline machines fail in DNS or connect;
# the probe runs in a daemon thread so a resolver that hangs cannot hang the run either.
NET_PROBE_TIMEOUT_S = 3.0
# Per-socket-operation timeout while a download runs: urllib (used by PyG and ogb) sets none by itself.
DOWNLOAD_SOCKET_TIMEOUT_S = 60.0


def missing_data_fix(folder: str, download: bool, reason: str) -> str:
    """What to do when a dataset's files are missing under the root: where the files go, ``LIPGNN_DATA``, and a
    download only where it is off (with it on, ``reason`` says why it did not work here)."""
    fix = (f"put the files there, or set LIPGNN_DATA (or dataset.root=) to a folder holding {folder} "
           "(`make` sets LIPGNN_DATA to ../shared/datasets when that folder exists; python does not)")
    if not download:
        fix += ", or pass dataset.download=true on a machine with a network"
    return f"{fix} ({reason})"


def stable_seed(*parts: object) -> int:
    """63-bit seed from a tuple of values, identical across processes (Python's ``hash`` is salted)."""
    digest = hashlib.sha256(repr(tuple(parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def make_generator(*parts: object) -> torch.Generator:
    """A CPU generator seeded from ``parts`` only, so its draws are independent of global RNG state."""
    return torch.Generator().manual_seed(stable_seed(*parts))


def network_reachable(host: str, port: int = 443, timeout: float | None = None) -> bool:
    """True when a TCP connection to ``host:port`` opens within ``timeout`` seconds (DNS included)."""
    timeout = NET_PROBE_TIMEOUT_S if timeout is None else timeout
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except Exception:  # any failure of the probe means "no usable network", never a crash in this thread
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


@contextlib.contextmanager
def download_timeout(seconds: float = DOWNLOAD_SOCKET_TIMEOUT_S) -> Iterator[None]:
    """Give every socket opened inside the block a timeout (a stalled download raises instead of hanging)."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def all_exist(folder: Path, names: Iterable[str]) -> bool:
    # Path.exists follows symlinks, so a dangling link from an old mirror counts as missing.
    return all((folder / name).exists() for name in names)


def mirror_file(src: Path, dst: Path) -> bool:
    """Make ``dst`` a symlink to ``src`` (copy where links are unsupported). Returns True if ``dst`` changed."""
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    # Build under a private name and rename over dst: atomic, so parallel runs never see a missing file.
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.symlink_to(src.resolve())
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)
    return True


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock on ``path`` while PyG/ogb process into a shared cache (parallel multirun jobs)."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        yield


def mirror_files(src_dir: Path, dst_dir: Path, names: Iterable[str]) -> bool:
    """Mirror ``names`` from ``src_dir`` into ``dst_dir``; True if any link was created or replaced."""
    changed = False
    for name in names:
        changed |= mirror_file(src_dir / name, dst_dir / name)
    return changed


def is_writable_dir(path: Path) -> bool:
    """True when ``path`` (or its nearest existing ancestor, where it would be created) is writable. Permission
    bits only: nothing is written (the dataset roots this checks may be shared, read-only copies)."""
    from lipgnn.config import nearest_existing

    probe = nearest_existing(path)
    return probe is not None and probe.is_dir() and os.access(probe, os.W_OK)
