"""One identity for the sweep that runs a trial and the worker that holds a claim."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import psutil

from autotune.store.identity import ProcessIdentity, current_place, process_runs


def _dead_pid() -> tuple[int, float]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(proc.pid).create_time()
    proc.wait()
    return proc.pid, started


def test_this_process_is_alive_and_round_trips_through_the_study_attrs() -> None:
    me = ProcessIdentity.current("gpu 0")
    assert me.alive() and process_runs(me.pid, me.started)
    assert me.place == current_place() and me.name.endswith(f"pid {me.pid} gpu 0")
    back = ProcessIdentity.from_attrs(me.as_attrs())
    assert back == me and back is not None and back.place == me.place


def test_attrs_without_an_identity_give_none() -> None:
    assert ProcessIdentity.from_attrs({}) is None
    assert ProcessIdentity.from_attrs({"orchestrator_pid": "x", "orchestrator_host": "h"}) is None


def test_a_dead_process_of_this_machine_is_not_alive_and_its_reused_pid_is_not_it() -> None:
    me = ProcessIdentity.current()
    pid, started = _dead_pid()
    assert not dataclasses.replace(me, pid=pid, started=started).alive()
    assert not process_runs(me.pid, me.started - 3600)  # same pid, another start: not this process


def test_a_process_elsewhere_is_assumed_alive() -> None:
    pid, started = _dead_pid()
    me = ProcessIdentity.current()
    other_place = dataclasses.replace(me, pid=pid, started=started, place="another-boot/4026531836")
    other_host = ProcessIdentity(pid, "another-host", started)  # an identity recorded without a place
    assert other_place.alive() and other_host.alive()
    assert not other_place.same_machine(me) and not other_host.same_machine(me)


def test_same_machine_by_place_where_both_have_one_else_by_host() -> None:
    a = ProcessIdentity(1, "box", 0.0, place="boot-1/ns-1")
    assert a.same_machine(ProcessIdentity(2, "other-name", 0.0, place="boot-1/ns-1"))
    assert not a.same_machine(ProcessIdentity(2, "box", 0.0, place="boot-1/ns-2"))  # another container
    assert a.same_machine(ProcessIdentity(2, "box", 0.0))  # recorded before places were
    assert not a.same_machine(ProcessIdentity(2, "elsewhere", 0.0))


def test_name_and_place_do_not_make_another_process() -> None:
    a = ProcessIdentity(1, "box", 5.0, place="p", name="box pid 1 gpu 0")
    assert a == ProcessIdentity(1, "box", 5.0)
    assert a != ProcessIdentity(1, "box", 6.0)
