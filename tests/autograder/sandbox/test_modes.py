"""The sandbox's modes: chosen, validated, refused where they cannot hide what is hidden, and named in
every report; and what holds in each (the network, forbidden APIs, the hidden phase, the seeds, the
student's text). docs/grading.md, "Threat model", points here for each.
"""
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import Phase, given, seed, settings

from grader import cli
from grader.instructor.gradebook import Row, summary
from grader.instructor.runner import Outcome
from grader.judge import _phases
from grader.report import terminal
from grader.results import markdown_text
from grader.salt import SALT_FILE, case_seed
from grader.sandbox import modes
from grader.sandbox.client import Sandbox
from grader.sandbox.errors import SandboxUnavailable, StudentError
from grader.sandbox.modes import describe, mode
from grader.sandbox.uids import uid_pool
from grader.sandbox.worker import landlock
from grader.sandbox.worker.forbidden import static_problem
from grader.scoring import scorecard
from grader.suites import GRADER_SETTINGS
from grader.suites.strategies import key_seeds, seeds
from helpers import ROOT

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")
CONFINED = pytest.mark.skipif(mode() not in ("root", "userns"), reason=f"needs namespaces (here: {mode()!r})")


@pytest.fixture
def asked(monkeypatch):
    """Ask for a mode (GRADER_SANDBOX) with every cached probe forgotten, before and after."""
    def ask(value: str) -> None:
        monkeypatch.setenv("GRADER_SANDBOX", value)
        _forget()
    yield ask
    monkeypatch.delenv("GRADER_SANDBOX", raising=False)
    _forget()


def _forget() -> None:
    for cached in (modes.mode, modes._problem, modes._refusal, modes._setuid_problem):
        cached.cache_clear()


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "attention.py").write_text(textwrap.dedent("""\
        import os, socket, torch

        def uid():
            open("written", "w").write("x")  # its home is its own
            return os.getuid()

        def math(q):
            return torch.ops.aten._scaled_dot_product_attention_math(q, q, q)[0]

        def original():
            found = [c for c in torch.nn.Module.__subclasses__() if c.__name__ == "MultiheadAttention"]
            return found[0](4, 1)

        def connect(port):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return "connected"
            except OSError as error:
                return type(error).__name__

        def processes():
            try:
                return [name for name in os.listdir("/proc") if name.isdigit()]
            except OSError as error:
                return type(error).__name__

        def read(paths):
            found = []
            for path in paths:
                try:
                    found.append(len(open(path, "rb").read()) and path)
                except OSError:
                    pass
            return found
        """))
    return folder


def call(box: Sandbox, target: str, *args):
    return box.request({"op": "call", "target": f"attention.{target}", "args": list(args)}, 60.0)["result"]


# -- choosing and validating a mode --------------------------------------------------------------------
def test_an_unknown_mode_is_an_error_never_a_weaker_mode(asked, submission, tmp_path, capsys):
    asked("Root")
    with pytest.raises(SandboxUnavailable, match="'Root' is not a sandbox mode: choose one of root, userns"):
        mode()
    out = tmp_path / "card.json"
    assert cli.main(["grade", str(submission), "--json", str(out)]) == 2
    assert "not a sandbox mode" in capsys.readouterr().err and not out.exists()


def test_plain_mode_grades_hidden_tests_only_when_told_and_says_so(asked, submission, tmp_path):
    asked("plain")
    with pytest.raises(SandboxUnavailable, match="--unsafe-no-sandbox"):
        Sandbox(submission, tmp_path)
    assert Sandbox(submission, tmp_path, hidden=False).mode == "plain"  # grader check, on one's own code
    box = Sandbox(submission, tmp_path, unsafe_no_sandbox=True)
    isolates = modes.ISOLATION["plain"].report + " (--unsafe-no-sandbox)"
    assert box.report == {"mode": "plain", "isolates": isolates}


def test_worker_uids_come_from_the_ranges_the_namespace_maps():
    assert uid_pool("0 0 4294967295") == range(1 << 30, (1 << 30) + (1 << 26))
    rootless = uid_pool("0 1000 1\n1 100000 65536")  # rootless Docker/Podman
    assert rootless.start == 32769 and rootless.stop == 65537
    assert uid_pool("0 123456 65536").start == 32768  # Kubernetes hostUsers: false
    assert uid_pool("0 1000 1") is None  # unshare --map-root-user: root only


def _on_path(folder: Path, name: str, script: str) -> str:
    """A PATH whose `name` is this shell script (then the usual PATH)."""
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + script)
    (folder / name).chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


_SETPRIV_2_32 = """case " $* " in *" --pdeathsig "*)
    echo "setpriv: unrecognized option '--pdeathsig'" >&2; exit 1;; esac
exec /usr/bin/setpriv "$@"
"""
"""util-linux 2.32's setpriv (RHEL/Rocky 8: many clusters, Gradescope's Rocky image): no --pdeathsig."""


@pytest.mark.sandbox
@pytest.mark.skipif(mode() not in ("root", "userns"), reason=f"needs namespaces (here: {mode()!r})")
@pytest.mark.parametrize("asked", ["", "userns"])
def test_every_mode_starts_where_setpriv_has_no_pdeathsig(submission, tmp_path, asked):
    """On RHEL 8's util-linux the namespaced modes start as elsewhere (root stays root, not setuid; a
    non-root job gets userns, not a refusal): the judge's death reaches the template without setpriv."""
    script = tmp_path / "inside.py"
    script.write_text(textwrap.dedent(f"""\
        from pathlib import Path
        from grader.sandbox.client import Sandbox
        from grader.sandbox.modes import mode
        box = Sandbox(Path({str(submission)!r}), Path({str(tmp_path)!r}), hidden=False)
        box.ready()
        print(mode(), box.request({{"op": "call", "target": "attention.uid", "args": []}}, 60)["result"] >= 0)
        box.close()
        """))
    path = _on_path(tmp_path / "bin", "setpriv", _SETPRIV_2_32)
    env = {**os.environ, "PATH": path, "GRADER_SANDBOX": asked}
    assert subprocess.run(["setpriv", "--pdeathsig", "KILL", "true"], env=env).returncode == 1
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [asked or mode(), "True"]


@pytest.mark.skipif(sys.platform != "linux", reason="namespaces are Linux's")
def test_what_a_namespaced_mode_starts_dies_with_the_judge(tmp_path):
    """The launcher's prefix sets the parent-death signal itself: a process it starts is killed with the
    process that started it."""
    marker = tmp_path / "pid"
    judge = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import subprocess, time
        from grader.sandbox.modes import _die_with_judge
        subprocess.Popen([*_die_with_judge(), "sh", "-c", "echo $$ > {marker}; exec sleep 60"])
        time.sleep(60)
        """)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() or not marker.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = int(marker.read_text())
        judge.kill()
        judge.wait()
        time.sleep(0.5)
        state = Path(f"/proc/{child}/stat")
        assert not state.exists() or state.read_text().split()[2] == "Z"
    finally:
        judge.kill()


def test_a_refused_namespace_says_what_the_probe_said(asked, monkeypatch, tmp_path):
    """A non-root user (a SLURM job) whose unshare fails reads unshare's own error, not a guess."""
    asked("")
    refused = "unshare: unshare failed: Operation not permitted"
    monkeypatch.setenv("PATH", _on_path(tmp_path / "bin", "unshare", f"echo '{refused}' >&2\nexit 1\n"))
    monkeypatch.setattr(modes.os, "geteuid", lambda: 1000)
    assert mode() == "plain"
    with pytest.raises(SandboxUnavailable, match=f"'userns' mode was refused: {refused}"):
        modes.sandbox_mode(hidden=True)
    assert modes._problem("userns") == f"user namespaces are refused ({refused})"


@AS_ROOT
def test_setuid_mode_refuses_while_the_reference_is_readable_and_says_the_fix(asked, monkeypatch):
    asked("setuid")
    folder = Path(tempfile.mkdtemp(prefix="setuid-", dir="/tmp"))  # pytest's tmp_path is private to root
    folder.chmod(0o755)
    secret = folder / "solutions" / "attention.py"
    secret.parent.mkdir()
    secret.write_text("answer = 42\n")
    monkeypatch.setattr(modes, "secret_files", lambda: [secret])
    monkeypatch.setattr(modes, "secret_roots", lambda: [secret.parent])
    monkeypatch.setattr(modes, "_needed_files", lambda: [])
    monkeypatch.setattr(modes.sys, "executable", "/usr/bin/python3")
    if not Path("/usr/bin/python3").is_file():
        pytest.skip("no /usr/bin/python3 to probe with")
    secret.chmod(0o644)
    with pytest.raises(SandboxUnavailable, match=f"could read 1 file.*chmod -R go= {secret.parent}"):
        modes.sandbox_mode(hidden=True)
    secret.chmod(0o600)
    _forget()
    try:
        assert modes.sandbox_mode(hidden=True) == "setuid"
    finally:
        shutil.rmtree(folder)


@AS_ROOT
def test_setuid_mode_says_why_python_cannot_start(asked, monkeypatch, tmp_path):
    asked("setuid")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python").symlink_to(sys.executable)
    monkeypatch.setattr(modes.sys, "executable", str(private / "python"))
    with pytest.raises(SandboxUnavailable, match="python at .* is not readable by the worker's uid"):
        modes.sandbox_mode(hidden=True)


@pytest.mark.sandbox
@AS_ROOT
@pytest.mark.parametrize("uid_map, expected", [("0 0 65536", "root"), ("0 0 1", "userns")],
                         ids=["a 65536-uid container", "unshare --map-root-user"])
def test_grading_works_inside_a_user_namespace(tmp_path, submission, uid_map, expected):
    """As in rootless Docker/Podman or Kubernetes' user namespaces: the worker's uid is one the namespace
    maps (or, with root only, the userns mode), and the reference stays out of its sight."""
    script = tmp_path / "inside.py"
    script.write_text(textwrap.dedent(f"""\
        import json, sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from grader.sandbox.client import Sandbox
        box = Sandbox(Path({str(submission)!r}), Path({str(tmp_path)!r}))
        uid = box.request({{"op": "call", "target": "attention.uid", "args": []}}, 60)["result"]
        secrets = [{str(ROOT / "solutions" / "attention.py")!r}, {str(SALT_FILE)!r}]
        read = box.request({{"op": "call", "target": "attention.read", "args": [secrets]}}, 60)
        box.close()
        print(json.dumps([box.mode, uid, read["result"]]))
        """))
    process = subprocess.Popen(["unshare", "--user", "--", "sh", "-c", 'read _ && exec "$@"', "sh",
                                sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "GRADER_SANDBOX": ""})
    mine = os.readlink("/proc/self/ns/user")
    while os.readlink(f"/proc/{process.pid}/ns/user") == mine:
        time.sleep(0.01)
    for name in ("uid_map", "gid_map"):
        Path(f"/proc/{process.pid}/{name}").write_text(uid_map)
    out, err = process.communicate("\n", timeout=120)
    assert process.returncode == 0, err
    import json
    chosen, uid, read = json.loads(out.splitlines()[-1])
    assert chosen == expected and read == []
    assert uid in (range(32768, 65534) if expected == "root" else [0])


_REFUSING = textwrap.dedent("""\
    import ctypes, errno, os, platform, struct, sys
    arch, calls = {"x86_64": (0xC000003E, CALLS[0]), "aarch64": (0xC00000B7, CALLS[1])}[platform.machine()]
    n = len(calls)
    steps = [(0x20, 0, 0, 4), (0x15, 0, n + 1, arch), (0x20, 0, 0, 0),
             *((0x15, n - i, 0, call) for i, call in enumerate(calls)),
             (0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050000 | errno.EPERM)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *step) for step in steps))
    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0
    assert libc.prctl(22, 2, ctypes.byref(Program(len(steps), ctypes.addressof(code))), 0, 0) == 0
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    """)
_REFUSE_NAMESPACES = _REFUSING.replace("CALLS", "([272], [97])")
"""Runs python with unshare(2) refused (EPERM), as in a Docker container without CAP_SYS_ADMIN."""
_REDUCED_ROOT = _REFUSING.replace("CALLS", "([272, 105, 106, 113, 114, 116, 117, 119], "
                                           "[97, 146, 144, 145, 143, 159, 147, 149])")
"""Also refuses every call that changes a uid, gid or the groups (setuid, setgid, setreuid, setregid,
setgroups, setresuid, setresgid): root with a reduced capability set, as Colab's kernel runs (no
CAP_SYS_ADMIN, no CAP_SETUID), or a container that drops them."""


@pytest.mark.sandbox
@AS_ROOT
def test_where_namespaces_are_refused_root_falls_back_to_setuid_which_says_what_it_needs(tmp_path):
    from grader.sandbox.worker import seccomp
    if not seccomp.supported():
        pytest.skip("no filter for this architecture")
    correct = ROOT / "examples" / "submissions" / "correct"
    code = textwrap.dedent(f"""\
        from pathlib import Path
        from grader.sandbox.client import Sandbox
        from grader.sandbox.errors import SandboxUnavailable
        from grader.sandbox.modes import mode
        print(mode())
        try:
            print(Sandbox(Path({str(correct)!r}), Path({str(tmp_path)!r})).mode)
        except SandboxUnavailable as error:
            print(error)
        """)
    done = subprocess.run([sys.executable, "-c", _REFUSE_NAMESPACES, "-c", code], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "GRADER_SANDBOX": ""})
    chosen, outcome = done.stdout.splitlines()
    assert chosen == "setuid", done.stderr
    # Either it grades (Python readable by the worker's uid, the reference private to root), or it says why.
    assert outcome == "setuid" or "not readable by the worker's uid" in outcome or "chmod -R go=" in outcome


@pytest.mark.sandbox
@AS_ROOT
def test_reduced_root_checks_in_the_strongest_mode_that_starts_names_it_and_grades_nothing(tmp_path):
    """Where neither root nor setuid mode starts (Colab, a container without CAP_SYS_ADMIN and CAP_SETUID),
    `grader check`, whose public tests hide nothing, runs in the strongest mode that does and names it
    and why; `grader grade` still refuses, with the probes' own errors."""
    from grader.sandbox.worker import seccomp
    if not seccomp.supported():
        pytest.skip("no filter for this architecture")
    correct, card = ROOT / "examples" / "submissions" / "correct", tmp_path / "card.json"
    env = {**os.environ, "GRADER_SANDBOX": ""}

    def grader(*args: str) -> subprocess.CompletedProcess:
        command = ["-m", "grader.cli", *args, "--only", "quiz", str(correct), "--json", str(card)]
        return subprocess.run([sys.executable, "-c", _REDUCED_ROOT, *command], capture_output=True, text=True,
                              timeout=300, env=env, cwd=tmp_path)

    checked = grader("check")
    assert checked.returncode == 0, checked.stderr
    isolation = json.loads(card.read_text())["sandbox"]
    assert isolation["mode"] == "plain"
    assert "('plain' mode: 'setuid' does not start here (the worker's uid" in isolation["summary"]
    assert "cannot be taken here: Operation not permitted" in checked.stdout
    card.unlink()
    graded = grader("grade")
    assert graded.returncode == 2 and not card.exists()
    assert "cannot run in 'setuid' mode here: the worker's uid" in graded.stderr
    assert "'root' mode was refused: unshare: unshare failed: Operation not permitted" in graded.stderr


# -- what holds in setuid mode -------------------------------------------------------------------------
LANDLOCK = pytest.mark.skipif(not landlock.abi(), reason="Landlock unavailable here (reported: "
                              "test_without_landlock_setuid_reports_say_the_process_list_is_visible)")


@LANDLOCK
def test_landlock_leaves_the_worker_its_own_files_and_no_other_process(tmp_path):
    """What jail.py applies in setuid mode, tried on a plain process: no listing of /proc, no other
    process's /proc/PID, no file outside the paths given; its own /proc/PID, its home. With ABI 6, no
    signal to a process outside it (its parent, of the same uid) and no abstract socket made outside it."""
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    home = tmp_path / "home"
    home.mkdir()
    code = textwrap.dedent("""\
        import ctypes, os, socket, sys
        sys.path.insert(0, sys.argv[1])
        import landlock
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)
        landlock.restrict([sys.base_prefix, sys.prefix, "/usr", "/lib", "/lib64"], [sys.argv[3]], [])
        def attempt(action):
            try:
                action()
                return "done"
            except OSError as error:
                return type(error).__name__
        print(attempt(lambda: os.listdir("/proc")), attempt(lambda: open("/proc/1/cmdline").read()),
              attempt(lambda: open(sys.argv[2]).read()), attempt(lambda: open("/proc/self/status").read()),
              attempt(lambda: open(os.path.join(sys.argv[3], "x"), "w").write("x")),
              attempt(lambda: os.kill(os.getppid(), 0)),
              attempt(lambda: socket.socket(socket.AF_UNIX).connect("\\0" + sys.argv[4])))
        """)
    with socket.socket(socket.AF_UNIX) as listener:
        name = f"grader-landlock-{os.getpid()}"  # abstract: no file
        listener.bind(f"\0{name}")
        listener.listen()
        done = subprocess.run([sys.executable, "-c", code, str(Path(landlock.__file__).parent), str(outside),
                               str(home), name], capture_output=True, text=True, timeout=60)
    denied = "PermissionError" if landlock.abi() >= 6 else "done"
    assert done.stdout.split() == ["PermissionError", "PermissionError", "PermissionError", "done", "done",
                                   denied, denied], done.stderr


def test_without_landlock_setuid_reports_say_the_process_list_is_visible(monkeypatch):
    monkeypatch.setattr(landlock, "abi", lambda: 0)
    isolates = describe("setuid")["isolates"]
    assert "its process list" in isolates and isolates.endswith("(Landlock unavailable here)")
    summary = modes.isolation_summary("setuid", [], memory="2 GiB")
    assert "a view of the machine's files and processes" in summary
    monkeypatch.setattr(landlock, "abi", lambda: 7)
    assert "no other process (Landlock)" in describe("setuid")["isolates"]
    assert "no view of other files or processes" in modes.isolation_summary("setuid", [], memory="2 GiB")


@pytest.mark.sandbox
@AS_ROOT
@LANDLOCK
def test_a_setuid_worker_sees_no_other_process_and_no_file_it_does_not_need(asked, monkeypatch, submission):
    asked("setuid")
    monkeypatch.setattr(modes, "secret_files", list)  # the reference's privacy has its own test (above)
    problem = modes._problem("setuid")
    if problem:
        pytest.skip(f"setuid mode cannot start here: {problem}")
    scratch = Path(tempfile.mkdtemp(prefix="setuid-", dir="/tmp"))  # pytest's tmp_path is private to root
    scratch.chmod(0o755)
    outside = scratch / "outside.txt"
    outside.write_text("x")
    outside.chmod(0o644)
    box = Sandbox(submission, scratch)
    try:
        assert call(box, "processes") == "PermissionError"
        own = "/proc/self/status"
        assert call(box, "read", ["/proc/1/cmdline", str(outside), own]) == [own]
        assert call(box, "uid") != 0  # it writes its home
        assert "no other process" in box.isolation()["isolates"]
    finally:
        box.close()
        shutil.rmtree(scratch)


# -- what holds in every confined mode ---------------------------------------------------------------
def test_the_seccomp_filter_takes_the_network_but_not_unix_sockets():
    code = textwrap.dedent("""\
        import ctypes, socket, sys
        sys.path.insert(0, sys.argv[1])
        import seccomp
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)
        seccomp.deny_network()
        socket.socketpair()
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                socket.socket(family)
                print("open")
            except PermissionError:
                print("denied")
        """)
    from grader.sandbox.worker import seccomp
    if not seccomp.supported():
        pytest.skip("no filter for this architecture")
    done = subprocess.run([sys.executable, "-c", code, str(Path(seccomp.__file__).parent)],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["denied", "denied"], done.stderr


@pytest.mark.sandbox
@CONFINED
def test_a_namespaced_worker_sees_no_other_process(submission, tmp_path):
    box = Sandbox(submission, tmp_path)
    try:
        seen = call(box, "processes")
        # its sandbox's own PID namespace, where the first process is the template it was forked from
        # (none of the submission's code runs there): "root" mode's hidepid hides it from the worker's uid
        assert (len(seen), "1" in seen) == ((1, False) if box.mode == "root" else (2, True)), seen
    finally:
        box.close()


@pytest.mark.sandbox
@CONFINED
def test_forbidden_apis_refuse_however_they_are_reached(submission, tmp_path):
    import numpy as np
    box = Sandbox(submission, tmp_path)
    try:
        with pytest.raises(StudentError, match="forbids torch's attention kernel aten::_scaled_dot_product"):
            call(box, "math", np.ones((1, 2, 3, 4)))
        with pytest.raises(StudentError, match="forbids torch.nn.MultiheadAttention"):
            call(box, "original")
        with socket.create_server(("127.0.0.1", 0)) as server:
            # seccomp's EACCES, before the network namespace's ENETUNREACH
            assert call(box, "connect", server.getsockname()[1]) == "PermissionError"
    finally:
        box.close()


def test_the_judge_reads_forbidden_names_in_the_source():
    assert "_scaled_dot_product_attention_math" in static_problem(
        "import torch\ny = torch.ops.aten._scaled_dot_product_attention_math(q, k, v)\n")
    assert "__subclasses__" in static_problem("import torch\nm = torch.nn.Module.__subclasses__()\n")
    assert "MultiheadAttention" in static_problem("import torch.nn as nn\ngetattr(nn, 'MultiheadAttention')")
    correct = (ROOT / "examples" / "submissions" / "correct").glob("*.py")
    for path in [*correct, *(ROOT / "solutions").glob("*.py")]:
        assert static_problem(path.read_text()) == "", path


# -- the hidden phase --------------------------------------------------------------------------------------
class _Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def fresh_worker(self) -> None:
        self.events.append("fresh worker")


def test_every_public_case_runs_before_any_hidden_one_in_workers_of_their_own():
    from types import SimpleNamespace
    cases = [SimpleNamespace(public=public) for public in (True, False, True, False, True)]
    sandbox = _Recorder()
    order = []
    for index in _phases(cases, sandbox):
        order.append(index)
        sandbox.events.append(f"case {index}")
    assert order == [0, 2, 4, 1, 3]
    assert sandbox.events == ["case 0", "case 2", "case 4", "fresh worker", "case 1", "case 3"]


# -- unguessable hidden inputs -----------------------------------------------------------------------------
def _drawn(salt: str) -> list[int]:
    found: list[int] = []

    @seed(case_seed(salt, "attention", "a_case"))
    @settings(GRADER_SETTINGS, max_examples=40, phases=(Phase.generate,))
    @given(seeds)
    def draw(value: int) -> None:
        found.append(value)

    key_seeds(case_seed(salt, "attention", "a_case"))
    draw()
    return found


def test_hidden_tensor_seeds_span_64_bits_and_follow_the_salt():
    """Hypothesis favours 0, 1, 2**k...: salted, even those give seeds nobody without the salt can list."""
    one, two = _drawn("one"), _drawn("two")
    assert not set(one) & set(two)
    assert all(2**32 < value < 2**64 for value in one), "not a space one could enumerate"


# -- reports: which mode, and the student's text inert -------------------------------------------------------
def test_every_report_names_the_sandbox_mode():
    card = scorecard([])
    card.sandbox = describe("userns")
    assert "sandbox: userns (a new root without the grader" in terminal(card, "Grade")
    assert card.to_json()["sandbox"]["mode"] == "userns"
    from grader.instructor.gradescope import results
    assert results(card.to_json(), [])["extra_data"]["sandbox"]["mode"] == "userns"
    text = summary([Row("alice", Outcome.GRADED, card=card.to_json())], "0.1")
    assert "Sandbox: userns for 1 graded" in text


def test_student_text_is_inert_in_markdown_and_the_terminal(tmp_path, capsys):
    payload = "<img src=x onerror=alert(1)> [click](http://evil) \x1b]0;owned\x07"
    text = summary([Row("bob", Outcome.ERROR, f"{payload}Error: boom")], "0.1")
    assert "<img" not in text and "](http" not in text and "\x1b" not in text
    assert markdown_text("a_b*c") == "a\\_b\\*c"
    archive = tmp_path / "hostile.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as written:
        written.writestr("../\x1b[2J\x1b]0;title\x07.py", "x = 1\n")
    archive.write_bytes(buffer.getvalue())
    assert cli.main(["grade", str(archive)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err
