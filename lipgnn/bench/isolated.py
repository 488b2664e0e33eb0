"""Timing each variant of a step table in a worker process of its own, rounds still interleaved.

Why: a training process holds one model. Timed in one process, the variants share one C heap, and a
variant's step runs on the heap the others left behind. On the 256-layer SAN row (Cora; the stock PyG
stack's step peaks at 2.2 GB, the fused one at 1.1 GB, some ten thousand tensors a step) that slowed both:
glibc's ``_int_malloc`` took 1.7 % of a fused step in a process that had trained nothing else and 7.4 % with
PyG steps in between (``perf``), and the steps took 1.010 s (fused) and 2.396 s (PyG) in one process against
0.953 s and 2.194 s in two, in the same window (docs/performance.md, "The bench's SAN row in processes of its
own"). So the bench can give every variant its own process (:class:`Workers`). The rounds keep their rotating
order: the parent asks each worker for one step in turn, so a shared machine's drift still spreads over all
variants, and each step's times are the worker's own clocks.

A worker builds its model exactly as the in-process table does (:func:`lipgnn.bench.variants.build_variant`,
the same seed, so the same weights), sets the same thread count and allocator settings, and reports its eval
output (for ``max|Δ|`` against the stock stack), the CSR preparation time, the warm-up's peak memory and then
one step's (wall, CPU) seconds per request. It runs one untimed step before the warm-up, so that the
libraries' one-off costs (in one process the first variant's alone) stay out of its memory peak.
``multiprocessing``'s ``spawn`` start keeps CUDA usable in the workers and leaves nothing of the parent's heap
in them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch

__all__ = ["WorkerSpec", "Workers"]


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to rebuild one variant's step (picklable)."""

    graph: str
    seed: int
    variant: str
    depth: int
    hidden: int
    heads: int
    device: str
    threads: int | None
    malloc_tuning: bool
    compare_output: bool


def _serve(conn: Connection, spec: WorkerSpec) -> None:
    from lipgnn.bench.graphs import load_graph
    from lipgnn.bench.memory import measure_step_memory
    from lipgnn.bench.variants import build_variant, eval_output, make_step, prebuild_csr
    from lipgnn.train.allocator import tune_malloc

    if spec.threads:
        torch.set_num_threads(spec.threads)
    if spec.malloc_tuning:
        tune_malloc()
    device = torch.device(spec.device)
    graph = load_graph(spec.graph, seed=spec.seed).to(device)
    model = build_variant(spec.variant, spec.depth, graph.x.size(1), graph.num_classes, hidden=spec.hidden,
                          heads=spec.heads, seed=spec.seed).to(device)
    prep = prebuild_csr(spec.variant, graph)
    output = eval_output(model, graph).cpu() if spec.compare_output else None
    step = make_step(model, graph, device)
    # An untimed first step: in one process the first variant alone pays the libraries' one-off costs (numba
    # loading its cached loops, MKL's buffers), which would otherwise enter every worker's memory peak.
    step()
    conn.send(("ready", os.getpid(), output))
    while True:
        request = conn.recv()
        if request == "warmup":
            conn.send((prep, *measure_step_memory(step, device)))
        elif request == "step":
            conn.send(step())
        else:
            return


def _worker(conn: Connection, spec: WorkerSpec) -> None:
    try:
        _serve(conn, spec)
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as one line
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        conn.close()


class Workers:
    """One worker process per variant (a context manager: the workers stop on exit, also on an error).

    ``pids`` and ``outputs`` are filled once every worker has built its model; ``ask(variant, request)``
    sends ``"warmup"`` or ``"step"`` to that variant's worker and returns its answer.
    """

    def __init__(self, specs: list[WorkerSpec]) -> None:
        self.specs = {s.variant: s for s in specs}
        self.pids: dict[str, int] = {}
        self.outputs: dict[str, torch.Tensor] = {}
        self._procs: dict[str, Any] = {}
        self._conns: dict[str, Connection] = {}

    def __enter__(self) -> Workers:
        ctx = mp.get_context("spawn")
        try:
            for variant, spec in self.specs.items():
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, spec), name=f"bench-{variant}", daemon=True)
                proc.start()
                child.close()
                self._procs[variant], self._conns[variant] = proc, parent
            for variant in self.specs:
                _, pid, output = self._reply(variant)
                self.pids[variant] = pid
                if output is not None:
                    self.outputs[variant] = output
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def ask(self, variant: str, request: str) -> Any:
        self._conns[variant].send(request)
        return self._reply(variant)

    def _reply(self, variant: str) -> Any:
        try:
            reply = self._conns[variant].recv()
        except EOFError:
            proc = self._procs[variant]
            proc.join(5)
            raise RuntimeError(f"bench worker for {variant!r} exited (code {proc.exitcode}) without answering"
                               ) from None
        if isinstance(reply, tuple) and reply and reply[0] == "error":
            raise RuntimeError(f"bench worker for {variant!r} failed: {reply[1]}\n{reply[2]}")
        return reply

    def __exit__(self, *exc: object) -> None:
        for conn in self._conns.values():
            try:
                conn.send("stop")
            except (BrokenPipeError, OSError):
                pass
            conn.close()
        for proc in self._procs.values():
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
