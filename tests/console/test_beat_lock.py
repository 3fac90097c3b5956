"""Exactly one Celery beat (console.kernel.beat_lock): a second acquirer of the beat
lock is refused with a message naming the holder, in PostgreSQL and in the
embedded file lock; a second ``celery beat`` process refuses to start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from django.db import connection

from console.kernel import beat_lock
from console.kernel.beat_lock import BeatLockHeld, FileBeatLock, LockedScheduler, PostgresBeatLock
from console.kernel.celery import app as celery_app
from tests.console.up_process import ROOT, up_env_for

REFUSAL = "another Celery beat holds the beat lock"


def test_a_second_file_lock_is_refused_naming_the_holder(tmp_path):
    path = tmp_path / "celerybeat.lock"
    first, second = FileBeatLock(path), FileBeatLock(path)
    first.acquire()
    try:
        with pytest.raises(BeatLockHeld) as refused:
            second.acquire()
        message = str(refused.value)
        assert REFUSAL in message
        assert f"pid {os.getpid()}" in message  # who holds it
        assert "exactly one beat" in message
    finally:
        first.release()
    second.acquire()  # released: the next one takes it
    assert second.still_held()
    second.release()


@pytest.mark.django_db
def test_a_second_postgres_lock_is_refused_naming_the_holder():
    if connection.vendor != "postgresql":
        pytest.skip("the PostgreSQL advisory lock (the suite's PostgreSQL run covers it)")
    params = connection.get_connection_params()
    first, second = PostgresBeatLock(params), PostgresBeatLock(params)
    first.acquire()
    try:
        assert first.still_held()
        with pytest.raises(BeatLockHeld) as refused:
            second.acquire()
        assert REFUSAL in str(refused.value)
        assert f"console-beat {os.uname().nodename} pid {os.getpid()}" in str(refused.value)
        # The session ends (a PostgreSQL restart, a killed beat): so does the lock.
        with pytest.raises(psycopg.errors.AdminShutdown):
            first._conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    except Exception:
        first.release()
        raise
    assert not first.still_held()
    second.acquire()
    try:
        with pytest.raises(BeatLockHeld):
            first.acquire()
    finally:
        second.release()
        first.release()


@pytest.fixture
def lock_dir(settings, tmp_path, db):
    """The deployment's lock: a file in a var dir of the test's own, or (in the
    suite's PostgreSQL run) the advisory lock in the test database."""
    settings.VAR_DIR = tmp_path
    settings.CONSOLE_BEAT_LOCK = True
    return tmp_path


def scheduler(tmp_path, name: str) -> LockedScheduler:
    return LockedScheduler(app=celery_app, schedule_filename=str(tmp_path / name), lazy=False)


def test_a_second_scheduler_refuses_to_start(lock_dir):
    first = scheduler(lock_dir, "schedule-a")
    try:
        with pytest.raises(SystemExit) as refused:
            scheduler(lock_dir, "schedule-b")
        assert str(refused.value).startswith(f"beat: refusing to start: {REFUSAL}")
        # The second never opened its schedule file.
        assert not list(lock_dir.glob("schedule-b*"))
    finally:
        first.close()
    scheduler(lock_dir, "schedule-b").close()  # the first closed: released


def test_a_scheduler_that_lost_its_lock_to_another_stops(lock_dir, monkeypatch):
    monkeypatch.setattr(beat_lock, "LOCK_CHECK_SECONDS", 0.0)
    first = scheduler(lock_dir, "schedule-a")
    other = beat_lock.beat_lock()
    try:
        first._beat_lock.release()  # as a dropped PostgreSQL session would lose it
        other.acquire()
        with pytest.raises(SystemExit, match="lost the beat lock"):
            first.tick()
    finally:
        other.release()
        first.close()


def test_turned_off_there_is_no_lock(settings):
    settings.CONSOLE_BEAT_LOCK = False
    assert beat_lock.beat_lock() is None


def test_a_second_beat_process_refuses_to_start(tmp_path):
    """Two real ``celery beat`` processes of one deployment: one var dir (the
    embedded file lock) or, in the suite's PostgreSQL run, one database."""
    env = up_env_for(tmp_path)
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        env["DATABASE_URL"] = os.environ["DATABASE_URL"]  # the advisory lock

    def beat(name: str):
        log = (tmp_path / f"{name}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "console", "beat", "-l", "info", "-s",
             str(tmp_path / name)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        log.close()
        return proc, tmp_path / f"{name}.log"

    first, first_log = beat("schedule-a")
    try:
        deadline = time.monotonic() + 90
        while "beat: holding the beat lock" not in first_log.read_text():
            assert first.poll() is None, first_log.read_text()
            assert time.monotonic() < deadline, "the first beat never took the lock"
            time.sleep(0.2)

        second, second_log = beat("schedule-b")
        second.wait(timeout=90)
        output = second_log.read_text()
        assert second.returncode != 0, output
        assert f"beat: refusing to start: {REFUSAL} (console-beat" in output, output
        assert f"pid {first.pid}" in output
        assert first.poll() is None  # the first one runs on
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.wait(timeout=30)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait()
    # Released on the way out: a third one starts.
    third, third_log = beat("schedule-c")
    try:
        deadline = time.monotonic() + 90
        while "beat: holding the beat lock" not in third_log.read_text():
            assert third.poll() is None, third_log.read_text()
            assert time.monotonic() < deadline, "the lock was not released"
            time.sleep(0.2)
    finally:
        third.send_signal(signal.SIGTERM)
        third.wait(timeout=30)
