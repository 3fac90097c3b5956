"""The supervisor behind ``manage.py up`` with tiny children: a child that exits
is restarted after its backoff while the others keep running; a crash loop
stops everything with the child's name and last output; SIGTERM stops all."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time

import pytest

from console.processes import CrashLoop, Supervisor, describe_exit

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
FAILS = [sys.executable, "-c", "import sys; print('about to fail', flush=True); sys.exit(3)"]


def fails_with_stderr(message: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.stderr.write({message!r} + '\\n'); sys.exit(3)"]


class Log(list):
    def lines(self, prefix: str) -> list[str]:
        return [line for line in self if line.startswith(prefix)]


def supervisor(log: Log, **kwargs) -> Supervisor:
    options = {
        "backoff_initial": 0.1,
        "backoff_max": 0.4,
        "stable_seconds": 60.0,
        "crash_limit": 5,
        "crash_window": 60.0,
        "grace_seconds": 5.0,
        "out": io.BytesIO(),
        "err": io.BytesIO(),
        **kwargs,
    }
    return Supervisor(env=os.environ.copy(), cwd=os.getcwd(), log=log.append, **options)


def poll_until(sup: Supervisor, done, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        sup.poll()
        time.sleep(0.02)


def group_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_that_exits_is_restarted_after_its_backoff_and_the_others_keep_running():
    log = Log()
    sup = supervisor(log, crash_limit=100)
    try:
        sleeper = sup.start("sleeper", SLEEPER)
        flaky = sup.start("flaky", FAILS)
        first_pid, sleeper_pid = flaky.pid, sleeper.pid
        poll_until(sup, lambda: flaky.restarts >= 3)
        assert sleeper.running() and sleeper.pid == sleeper_pid  # untouched
        assert flaky.pid != first_pid
        exits = log.lines("flaky (pid ")
        assert f"flaky (pid {first_pid}) exited (exit code 3) after " in exits[0]
        # Exponential backoff: 0.1 s, 0.2 s, 0.4 s, then capped at 0.4 s.
        delays = [line.split("restarting it in ")[1].split(" s.")[0] for line in exits]
        assert delays[:3] == ["0.1", "0.2", "0.4"]
        restarted = log.lines("Restarted flaky (pid ")
        assert restarted[0].endswith("after it exited (exit code 3); restart 1.")
        # The restarted child's output is passed on as it was written.
        assert sup.out.getvalue().count(b"about to fail\n") >= 3
    finally:
        sup.stop()
    assert not sleeper.running()


def test_the_restart_waits_for_the_backoff():
    log = Log()
    sup = supervisor(log, backoff_initial=0.5, backoff_max=0.5)
    try:
        flaky = sup.start("flaky", FAILS)
        flaky.proc.wait()
        sup.poll()  # noticed: restart scheduled, not done
        noticed = time.monotonic()
        assert flaky.restart_at is not None and flaky.restarts == 0
        sup.poll()
        assert flaky.restarts == 0
        poll_until(sup, lambda: flaky.restarts == 1)
        assert time.monotonic() - noticed >= 0.45
    finally:
        sup.stop()


def test_the_backoff_starts_over_after_a_stable_run():
    log = Log()
    runs_a_while = [sys.executable, "-c", "import sys, time; time.sleep(0.3); sys.exit(1)"]
    sup = supervisor(log, stable_seconds=0.2, crash_limit=100)
    try:
        child = sup.start("steady", runs_a_while)
        poll_until(sup, lambda: child.restarts >= 3)
    finally:
        sup.stop()
    delays = {line.split("restarting it in ")[1] for line in log.lines("steady (pid ")}
    assert delays == {"0.1 s. The others keep running."}


def test_a_child_killed_by_a_signal_is_named_by_the_signal():
    log = Log()
    sup = supervisor(log)
    try:
        child = sup.start("worker", SLEEPER)
        pid = child.pid
        os.kill(pid, signal.SIGKILL)
        poll_until(sup, lambda: child.restarts == 1)
        assert any(
            line.startswith(f"worker (pid {pid}) exited (signal SIGKILL) after ") for line in log
        ), log
        assert child.running() and child.pid != pid
    finally:
        sup.stop()
    assert describe_exit(0) == "exit code 0" and describe_exit(-15) == "signal SIGTERM"


def test_a_crash_loop_stops_everything_naming_the_child_and_its_last_output():
    log = Log()
    sup = supervisor(log, backoff_initial=0.05, backoff_max=0.1, crash_limit=5)
    sleeper = sup.start("sleeper", SLEEPER)
    looping = sup.start("looper", fails_with_stderr("ImportError: no module named nowhere"))
    started = time.monotonic()
    try:
        with pytest.raises(CrashLoop) as caught:
            sup.watch(interval=0.02)
    finally:
        sup.stop()
    assert time.monotonic() - started < 15
    assert looping.restarts == 4  # the fifth exit stops it all
    assert str(caught.value) == (
        "looper is crash-looping: it exited 5 times within 60 s (last: exit code 3)"
    )
    report = caught.value.report().splitlines()
    assert report[0].endswith("; stopping everything.")
    assert report[1].startswith("Last ") and "looper's output" in report[1]
    assert "  looper | ImportError: no module named nowhere" in report[2:]
    assert len(caught.value.tail) <= 20
    assert not sleeper.running() and not looping.running()
    assert group_gone(sleeper.pid)


def test_only_the_last_twenty_lines_are_kept():
    log = Log()
    chatty = [
        sys.executable,
        "-c",
        "import sys\nfor i in range(50): print(f'line {i}')\nsys.exit(2)",
    ]
    sup = supervisor(log, backoff_initial=0.01, backoff_max=0.01, crash_limit=2)
    sup.start("chatty", chatty)
    try:
        with pytest.raises(CrashLoop) as caught:
            sup.watch(interval=0.02)
    finally:
        sup.stop()
    assert caught.value.tail == [f"line {i}" for i in range(30, 50)]


def test_sigterm_stops_every_child_and_restarts_nothing():
    log = Log()
    sup = supervisor(log)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    sup.install_signal_handlers()
    try:
        children = [sup.start("a", SLEEPER), sup.start("b", SLEEPER)]
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        started = time.monotonic()
        sup.watch(interval=0.05)  # returns once the signal arrived
        assert sup.stop_requested == signal.SIGTERM
        assert time.monotonic() - started < 5
        os.kill(children[0].pid, signal.SIGKILL)  # exits after the stop: not restarted
        children[0].proc.wait()
        sup.poll()
        assert children[0].restarts == 0 and children[0].restart_at is None
        sup.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert not any(c.running() for c in children)
    assert all(group_gone(c.pid) for c in children)
    assert children[1].proc.returncode == -signal.SIGTERM
    assert not log.lines("Restarted")
