"""One process owns a study at a time: a row in runs.db's `study_owners`, taken in one write
transaction, so two `autotune search` runs of the same study cannot both start.

A second process is refused with the owner's host, PID and start time (or waits with `--wait`).
A row left by a process that died (kill -9, a crash, a reboot) is taken over: on this host the
owner is dead when its PID is gone or now belongs to another process (the kernel's start time of
the PID differs from the one recorded). An owner on another host cannot be checked from here and
is never taken over.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.errors import StudyBusy
from autotune.models import utc_now
from autotune.store import Store


class StudyOwner(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    study: str
    host: str
    pid: int
    pid_start: str | None = None
    started_at: str
    command: str = ""

    def describe(self) -> str:
        return f"PID {self.pid} on {self.host}, running since {self.started_at}"


def process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot, /proc/PID/stat field 22), which
    tells a live owner from a new process that got a dead owner's PID; None off Linux or when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(owner: StudyOwner, host: str | None = None) -> bool:
    """False only when the owner is known dead: same host, and its PID gone or reused."""
    if owner.host != (host or socket.gethostname()):
        return True
    if not pid_alive(owner.pid):
        return False
    start = process_start(owner.pid)
    return owner.pid_start is None or start is None or start == owner.pid_start


def this_process(study: str) -> StudyOwner:
    pid = os.getpid()
    return StudyOwner(
        study=study,
        host=socket.gethostname(),
        pid=pid,
        pid_start=process_start(pid),
        started_at=utc_now(),
        command=" ".join(sys.argv[:1] + sys.argv[1:8]),
    )


class StudyLock:
    """Context manager: own `study` in `store` for the duration, or raise StudyBusy.

    `wait_s`: None refuses at once; a number waits that long for the owner to finish (inf: no
    limit), polling every `poll_s`. `taken_over` is the dead owner whose lock was taken, if any.
    """

    def __init__(
        self,
        store: Store,
        study: str,
        *,
        wait_s: float | None = None,
        poll_s: float = 1.0,
        on_wait: Callable[[StudyOwner], None] | None = None,
    ) -> None:
        self.store = store
        self.study = study
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.on_wait = on_wait
        self.me = this_process(study)
        self.taken_over: StudyOwner | None = None
        self.held = False

    def _try_take(self) -> StudyOwner | None:
        """Take the lock if it is free or its owner is dead; else return the live owner."""
        conn = self.store.db.conn
        conn.execute("BEGIN IMMEDIATE")  # one writer at a time: no two processes both see it free
        try:
            row = conn.execute("select * from study_owners where study = ?", [self.study]).fetchone()
            if row is not None:
                columns = [d[0] for d in conn.execute("select * from study_owners limit 0").description]
                owner = StudyOwner.model_validate(dict(zip(columns, row)))
                if owner.host == self.me.host and owner.pid == self.me.pid:
                    owner = None  # this process already owns it (re-entry)
                elif owner_alive(owner):
                    conn.execute("ROLLBACK")
                    return owner
                else:
                    self.taken_over = owner
            conn.execute(
                "insert or replace into study_owners (study, host, pid, pid_start, started_at, command) "
                "values (?, ?, ?, ?, ?, ?)",
                [self.me.study, self.me.host, self.me.pid, self.me.pid_start, self.me.started_at, self.me.command],
            )
            conn.execute("COMMIT")
        except sqlite3.Error:
            conn.execute("ROLLBACK")
            raise
        self.held = True
        return None

    def acquire(self) -> StudyLock:
        deadline = None if self.wait_s is None else time.monotonic() + self.wait_s
        told = False
        while True:
            owner = self._try_take()
            if owner is None:
                return self
            if deadline is None:
                raise StudyBusy(
                    f"study {self.study!r} is in use by another autotune process ({owner.describe()}); "
                    "wait for it (--wait), or run another study with --study NAME"
                )
            if time.monotonic() >= deadline:
                raise StudyBusy(
                    f"study {self.study!r} is still in use by {owner.describe()} after waiting {self.wait_s:.0f} s"
                )
            if self.on_wait is not None and not told:
                self.on_wait(owner)
                told = True
            time.sleep(self.poll_s)

    def release(self) -> None:
        if not self.held:
            return
        with self.store.atomic():
            self.store.db.conn.execute(
                "delete from study_owners where study = ? and host = ? and pid = ?",
                [self.study, self.me.host, self.me.pid],
            )
        self.held = False

    def __enter__(self) -> StudyLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def owner_of(store: Store, study: str) -> StudyOwner | None:
    rows = list(store.db["study_owners"].rows_where("study = ?", [study]))
    return StudyOwner.model_validate(rows[0]) if rows else None
