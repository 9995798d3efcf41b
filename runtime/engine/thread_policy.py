"""How the engine uses CPU threads: how many compute a step, and which thread owns them.

**How many.** ``EngineConfig.threads`` sets torch's intra-op threads (process-wide, as torch's
setting is); None leaves torch's setting alone (an application embedding the engine decides).
``sglc serve`` owns its process: without ``--threads`` it uses ``OMP_NUM_THREADS`` when set, else
the physical cores it may run on (hyper-threads share a core's vector units, so a second thread
per core only adds synchronisation). The scheduler, the HTTP event loop and the
gRPC threads run between steps and mostly sleep, so they get no cores of their own.

**Which thread.** torch's CPU kernels run on OpenMP (libgomp). libgomp keeps one pool of worker
threads per thread that ever opened a parallel region, and once it manages more threads than
there are CPUs it stops spinning between regions (its "throttled" spin count) and puts workers
to sleep instead, paying a futex wake-up for each of the ~300 parallel regions of a decode step.
Loading the model on the main thread and stepping it on the engine thread made two pools, and a
one-stream decode step took 24 ms instead of 12 (int4 SmolLM2, 2 cores). So the engine's setup
(weight packing, KV buffer fills) runs in a short-lived thread: its pool ends with it, and the
stepping thread's pool is the only one left.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def physical_cores() -> int:
    """Physical cores among the CPUs this process may use (hyper-threads counted once)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/core_id") as f:
                core = f.read().strip()
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id") as f:
                package = f.read().strip()
            cores.add((package, core))
        except OSError:  # NOTE: no sysfs topology (containers, other OSes): count logical CPUs
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


def server_threads(threads: int | None) -> int | None:
    """A server's thread count: ``threads`` when given; else None (torch's own choice) when the
    environment sets ``OMP_NUM_THREADS``, else :func:`physical_cores`."""
    if threads is not None:
        return threads
    return None if os.environ.get("OMP_NUM_THREADS") else physical_cores()


def apply_thread_count(threads: int | None) -> int:
    """Set torch's intra-op threads (None: leave them); returns the count in use."""
    import torch  # NOTE: here: the torch-free engine uses this module's other functions

    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def in_transient_thread(fn: Callable[[], T], name: str = "sglc-setup") -> T:
    """``fn()`` run in a thread that ends when it returns (its OpenMP pool ends with it); its
    exception is re-raised here."""
    return start_transient_thread(fn, name)()


def start_transient_thread(fn: Callable[[], T], name: str = "sglc-setup") -> Callable[[], T]:
    """:func:`in_transient_thread` started now; the returned function waits for ``fn``'s value
    (or re-raises its exception), so the caller can do other work meanwhile."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # NOTE: re-raised in the caller's thread below
            box["error"] = err

    thread = threading.Thread(target=run, name=name)
    thread.start()

    def result() -> T:
        thread.join()
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]  # type: ignore[return-value]

    return result
