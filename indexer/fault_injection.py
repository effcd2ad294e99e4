"""Faults injected into build tasks, for tests and for operators rehearsing
failures: ``NGRAM_BUILD_FAULT=PHASE:INDEX:MODE[,...]``, e.g. ``map:1:kill``.

kill: the task's process exits on its first attempt (as if the node died);
kill-always: it exits on every attempt (a task the OOM killer always stops);
raise: its first attempt raises an OSError (a transient failure);
fail: every attempt raises (a task that cannot succeed).

The driver reads the variable once (``faults_from_env``) and hands each
faulted task a ``Fault`` in its description; the task calls ``inject_fault``
before its work. Sample tasks take no faults.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from indexer.storage import Store

FAULT_ENV = "NGRAM_BUILD_FAULT"
PHASES = ("sample", "map", "reduce")
MODES = ("kill", "kill-always", "raise", "fail")

#: {(phase, task index): mode}, as ``faults_from_env`` reads them.
FaultPlan = dict[tuple[str, int], str]


class Fault(NamedTuple):
    """One task's fault: its mode, and the store key of the marker that makes
    kill and raise happen once, whichever node runs the retry."""

    mode: str
    marker: str


class InjectedFault(OSError):
    """A transient failure injected by NGRAM_BUILD_FAULT (retried like any OSError)."""


class PermanentFault(RuntimeError):
    """A failure injected by NGRAM_BUILD_FAULT on every attempt."""


def faults_from_env(value: str | None) -> FaultPlan:
    """``map:1:kill,reduce:0:raise`` -> {("map", 1): "kill", ("reduce", 0): "raise"}."""
    faults = {}
    for item in filter(None, (value or "").split(",")):
        phase, index, mode = (item.split(":") + ["kill"])[:3]
        if phase not in PHASES or mode not in MODES or not index.isdigit():
            raise ValueError(f"{FAULT_ENV}: {item!r} is not PHASE:INDEX:MODE (PHASE sample|map|reduce, "
                             "MODE kill|kill-always|raise|fail)")
        faults[(phase, int(index))] = mode
    return faults


def fault_for(faults: FaultPlan, phase: str, index: int) -> Fault | None:
    """The fault of task ``index`` of ``phase``, if the plan has one."""
    mode = faults.get((phase, index))
    return Fault(mode, f"faults/{phase}-{index:05d}") if mode else None


def inject_fault(store: Store, fault: Fault | None) -> None:
    """Fails as ``fault`` says (nothing when None)."""
    if fault is None:
        return
    mode, marker = fault
    if mode == "fail":
        raise PermanentFault(f"injected permanent fault ({FAULT_ENV})")
    if mode == "kill-always":
        os._exit(17)
    if store.exists(marker):
        return
    store.write_bytes(marker, b"")
    if mode == "kill":
        os._exit(17)
    raise InjectedFault(f"injected transient fault ({FAULT_ENV})")
