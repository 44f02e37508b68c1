"""Hostile submissions, one test per attack class of the threat model (docs/grading.md): each asserts
that the attack gained nothing and harmed nothing.

Most run a hostile function in a Sandbox directly (milliseconds after the worker starts); a few grade a
hostile submission end to end with `grader grade`, as an instructor would. What the worker's confinement
can only enforce as root (another uid, a new root, no network) is skipped elsewhere, saying so.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from textwrap import indent

import pytest
import torch

from attacks import call
from grader.instructor.hostile import escape_code, fresh_marker, state, survivors
from grader.judge import judge
from grader.results import Failed, safe_text
from grader.salt import SALT_FILE
from grader.sandbox import client
from grader.sandbox.client import Sandbox
from grader.sandbox.errors import StudentError, WorkerLost
from grader.sandbox.modes import FORKED_MODES, mode
from grader.spec import Status
from grader.student import Student
from helpers import EXAMPLES, ROOT

# one worker runs them all: the escapes of a launched and a forked sandbox's run must not meet in /proc
pytestmark = [pytest.mark.sandbox, pytest.mark.xdist_group("hostile")]
AS_ROOT = pytest.mark.skipif(mode() != "root", reason="enforced only when the grader runs as root "
                             f"with namespaces (here: {mode()!r} mode; docs/grading.md, Threat model)")
ISOLATED = pytest.mark.skipif(mode() not in ("root", "userns"),
                              reason=f"needs a network and PID namespace (here: {mode()!r} mode)")
MARKER = fresh_marker()
"""What the escaping processes sleep for: found in /proc, it means one survived."""

HOSTILE = textwrap.dedent(f"""\
    import os, signal, socket, subprocess, sys, time
    import torch

    def read(paths):
        found = {{}}
        for path in paths:
            try:
                with open(path, "rb") as file:
                    found[path] = len(file.read())
            except OSError:
                pass
        return found

    def listing(paths):
        found = {{}}
        for path in paths:
            try:
                found[path] = sorted(os.listdir(path))
            except OSError:
                pass
        return found

    def write(paths):
        done = []
        for path in paths:
            try:
                with open(path, "a") as file:
                    file.write("# tampered\\n")
                done.append(path)
            except OSError:
                pass
        return done

    def environment():
        return sorted(os.environ)

    def escape():
{indent(escape_code(MARKER), " " * 8)}        return os.getuid()

    def fork_bomb():
        children = 0
        try:
            for _ in range(10000):
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                children += 1
        except OSError:
            pass
        return children

    def kill_everyone():
        for pid in [os.getppid(), *map(int, filter(str.isdigit, os.listdir("/proc")))]:
            if pid not in (0, os.getpid()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        os.kill(-1, signal.SIGKILL)

    def connect(port):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return "connected"
        except OSError as error:
            return type(error).__name__

    def allocate():
        return torch.empty(10**11).shape[0]

    def complex_values():
        return torch.ones(3, dtype=torch.complex128)

    def sparse():
        return torch.eye(3).to_sparse()

    def generator():
        return (i for i in range(3))

    def nan():
        return float("nan")

    def shout():
        print("\\x1b[2J" * 1000)
        raise RuntimeError("\\x1b]0;owned\\x07 \\ud800 \\u202e" + "x" * 10**5)
    """)


@pytest.fixture(params=["launched", "forked"])
def sandbox(request, tmp_path: Path, monkeypatch):
    """A sandbox for HOSTILE, its template launched or forked from this process (as a grading's is, before
    its judge reads the salt or a hidden test): the attacks must gain as little either way, this process's
    environment and memory notwithstanding (it holds the salt and the hidden tests, which a judge that
    forks never does)."""
    if request.param == "forked" and (mode() not in FORKED_MODES or threading.active_count() > 1):
        pytest.skip(f"no template is forked here ({mode()!r} mode, {threading.active_count()} threads)")
    monkeypatch.setattr(client, "forks_template", lambda: request.param == "forked")
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "attention.py").write_text(HOSTILE)
    box = Sandbox(submission, tmp_path)
    yield box
    box.close()


# -- read the reference, the hidden tests, the salt, the instructor's files ---------------------------
@AS_ROOT
def test_the_worker_reads_neither_the_reference_nor_the_grader_nor_other_folders(sandbox):
    secrets = [ROOT / "solutions" / "quiz.py", ROOT / "grader" / "suites" / "hidden" / "quiz.py",
               ROOT / "grader" / "sandbox" / "client.py", SALT_FILE, Path(sys.prefix) / "pyvenv.cfg"]
    assert call(sandbox, "read", [str(path) for path in secrets[:-1]]) == {}
    assert str(secrets[-1]) in call(sandbox, "read", [str(secrets[-1])]), "Python itself stays readable"
    folders = [str(ROOT), "/root", "/home", str(Path.home()), str(sandbox.scratch), "/tmp"]
    seen = {name for names in call(sandbox, "listing", folders).values() for name in names}
    assert not seen & {"solutions", "grader", "tests", "examples", "README.md", "pyproject.toml", ".ssh"}
    assert {name for name in seen if name.startswith("sandbox-")} <= {sandbox.area.name}, \
        "other gradings' folders stay unseen"


def test_the_worker_gets_no_salt_and_a_scrubbed_environment(sandbox):
    assert "GRADER_SALT" in os.environ  # tests/conftest.py pins it
    assert set(call(sandbox, "environment")) <= {"PATH", "HOME", "TMPDIR", "PYTHONPATH", "LANG",
                                                 "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS",
                                                 "MKL_NUM_THREADS", "LC_CTYPE"}


# -- write the grader's files, forge a result -----------------------------------------------------------
@AS_ROOT
def test_the_worker_writes_nothing_of_the_grader_or_the_instructor(sandbox, tmp_path):
    results = tmp_path / "results.json"
    results.write_text("{}")
    targets = [ROOT / "grader" / "cli.py", ROOT / "solutions" / "quiz.py", results]
    before = {path: path.read_bytes() for path in targets}
    assert call(sandbox, "write", [str(path) for path in targets]) == []
    assert {path: path.read_bytes() for path in targets} == before


# -- outlive the grading: double forks, setsid, fork bombs ------------------------------------------------
@ISOLATED
def test_nothing_the_worker_starts_outlives_it(sandbox):
    call(sandbox, "escape")
    assert survivors(MARKER), "the escape ran"
    sandbox.close()
    assert survivors(MARKER) == []


@AS_ROOT
def test_a_fork_bomb_stops_at_the_process_limit_and_dies_with_the_worker(sandbox):
    assert call(sandbox, "fork_bomb") < sandbox.limits.processes
    uid = sandbox.worker.uid
    sandbox.close()
    assert _processes_of(uid) == []


def _processes_of(uid: int) -> list[Path]:
    """The live processes of `uid`, once the kernel has finished tearing down a killed group (it
    kills them all at once, but the exits land over a moment: give it up to 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        found = []
        for process in Path("/proc").glob("[0-9]*"):
            try:
                if _uid(process) == uid and state(process) != "Z":
                    found.append(process)
            except OSError:
                pass
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _uid(process: Path) -> int | None:
    try:
        return int(next(line for line in (process / "status").read_text().splitlines()
                        if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return None


# -- kill the judge -------------------------------------------------------------------------------------
@ISOLATED  # elsewhere the worker is the judge's uid: kill(-1) would kill every process it may signal
def test_killing_everything_it_can_costs_the_worker_only(sandbox):
    """It can signal its own processes only (in a PID namespace it is the first, which kill(-1) spares)."""
    with pytest.raises((WorkerLost, StudentError)):
        call(sandbox, "kill_everyone")
    assert call(sandbox, "environment"), "the judge is alive and the worker answers (or a new one)"


# -- the network ------------------------------------------------------------------------------------------
@ISOLATED
def test_the_worker_cannot_connect_out(sandbox):
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.5)
        # EACCES from the seccomp filter (socket() itself), else ENETUNREACH (no route)
        assert call(sandbox, "connect", server.getsockname()[1]) in ("PermissionError", "OSError")
        with pytest.raises(TimeoutError):
            server.accept()


# -- memory -------------------------------------------------------------------------------------------------
def test_a_100_gb_tensor_fails_in_the_worker(sandbox):
    with pytest.raises(StudentError, match="RuntimeError"):
        call(sandbox, "allocate")


# -- results of the wrong kind --------------------------------------------------------------------------
def test_results_of_a_wrong_kind_fail_and_are_never_cast(sandbox):
    student = Student(sandbox)
    with pytest.raises(Failed, match="complex128"):
        student.call("attention.complex_values")
    from grader.suites.checks import expect_number, expect_tensor
    for target, kind in (("sparse", "sparse_coo tensor"), ("generator", "a generator")):
        with pytest.raises(Failed, match=kind):
            expect_tensor(student.call(f"attention.{target}"), (3,), target)
    with pytest.raises(Failed, match="expected a finite number"):
        expect_number(student.call("attention.nan"), "nan()")


# -- text that would break a report -------------------------------------------------------------------------
def test_student_text_is_made_safe(sandbox):
    with pytest.raises(StudentError) as error:
        call(sandbox, "shout")
    text = str(error.value)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\\x1b" in text
    text.encode("utf-8")  # no lone surrogate left
    assert len(error.value.message) < 1100


def test_safe_text_keeps_ordinary_text():
    assert safe_text("Ünïcode — fine\nline two\ttab") == "Ünïcode — fine\nline two\ttab"
    assert safe_text("\x1b[31m") == "\\x1b[31m" and safe_text("a\ud800b") == "a?b"


# -- end to end: `grader grade` as an instructor runs it ------------------------------------------------
def _hostile_copy(tmp_path: Path, **modules: str) -> Path:
    submission = tmp_path / "hostile"
    shutil.copytree(EXAMPLES / "correct", submission)
    for name, text in modules.items():
        (submission / f"{name}.py").write_text(text)
    return submission


def _grade(submission: Path, out: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(submission), "--json", str(out),
                           *options], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@AS_ROOT  # it kills every process it may signal
def test_a_grading_survives_a_submission_that_attacks_at_import(tmp_path):
    """Its feedforward.py, when imported, forks a process that would later forge the result, kills every
    process it can, and prints escapes: the grade still exits 0 with the judge's own JSON."""
    results = tmp_path / "grade.json"
    attack = HOSTILE + textwrap.dedent(f"""\
        if os.fork() == 0:
            os.setsid()
            time.sleep(3)
            open({str(results)!r}, "w").write('{{"score": 1000}}')
            os._exit(0)
        print("\\x1b[2J\\ud800")
        kill_everyone()
        """)
    done = _grade(_hostile_copy(tmp_path, feedforward=attack), results, "--only", "feedforward")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout
    time.sleep(4)  # the forger's moment has passed
    card = json.loads(results.read_text())
    assert card["score"] == 0 and card["max_score"] == 8
    assert {test["status"] for test in card["tests"]} <= {Status.CRASHED.value, Status.FAILED.value}


@pytest.mark.slow
def test_a_hang_costs_its_own_component_only(tmp_path):
    """Every call into attention sleeps forever: attention's tests time out (the first at the wall-clock
    backstop, the rest blocked at once, or past attention's share of the budget), and quiz, graded after
    it, still gets every point."""
    hang = (EXAMPLES / "correct" / "attention.py").read_text() + textwrap.dedent("""\
        import time
        def _sleep(*args, **kwargs):
            time.sleep(10**6)
        scaled_dot_product_attention = causal_mask = _sleep
        MultiHeadAttention.forward = _sleep
        """)
    submission = _hostile_copy(tmp_path, attention=hang)
    results = judge(submission, components=("attention", "quiz"), budget=20.0)
    quiz = [r for r in results if r.component == "quiz"]
    attention = [r for r in results if r.component == "attention"]
    assert all(r.status is Status.PASSED for r in quiz)
    assert any(r.message.startswith("blocked: _sleep (attention.py)") or "used up their" in r.message
               for r in attention)
    assert all(r.status in (Status.TIMED_OUT, Status.PASSED, Status.FAILED) for r in attention)


# -- unpredictable hidden inputs, the same every run of one deployment ---------------------------------
def _seeds(salt: str) -> dict[str, list[int]]:
    code = ("import json; from grader.suites import all_cases; from grader.salt import deployment_salt; "
            "print(json.dumps({v: [c.examples_seed(deployment_salt()) for c in all_cases() "
            "if c.visibility.value == v] for v in ('public', 'hidden')}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "GRADER_SALT": salt})
    return json.loads(done.stdout)


def test_hidden_examples_follow_the_deployment_salt_and_public_ones_do_not():
    first, again, other = _seeds("one"), _seeds("one"), _seeds("two")
    assert first == again
    assert first["public"] == other["public"]
    assert not set(first["hidden"]) & set(other["hidden"])


def test_the_salt_is_made_once_and_kept_private(tmp_path, monkeypatch):
    from grader.salt import deployment_salt
    monkeypatch.delenv("GRADER_SALT")
    path = tmp_path / "salt"
    salt = deployment_salt(path)
    assert len(salt) == 32 and deployment_salt(path) == salt
    assert path.stat().st_mode & 0o077 == 0


def test_torch_examples_of_the_judge_follow_the_case_seed():
    """The judge seeds torch per case from the same salted seed (never 0 for every case)."""
    from grader.suites import all_cases
    seeds = {case.examples_seed("a salt") for case in all_cases()}
    assert len(seeds) == len(all_cases()) and 0 not in seeds
    torch.manual_seed(next(iter(seeds)))  # a valid torch seed


@pytest.mark.sandbox
def test_a_read_only_install_lists_its_tests_and_grading_there_says_how_to_give_a_salt():
    """Nothing reads (or writes) the salt before a grading starts; without one, grading says how to
    provide it instead of a traceback."""
    code = ("import sys; from pathlib import Path; import grader.salt as s; "
            "s.SALT_FILE = Path('/proc/no-such-folder/salt'); "  # cannot be made, even by root
            "from grader.suites import all_cases; assert len(all_cases()) > 50; "
            "from grader.cli import main; sys.exit(main(['grade', sys.argv[1], '--only', 'quiz']))")
    env = {key: value for key, value in os.environ.items() if key != "GRADER_SALT"}
    done = subprocess.run([sys.executable, "-c", code, str(EXAMPLES / "correct")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "set GRADER_SALT to the salt" in done.stderr
