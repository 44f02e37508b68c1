"""The sandbox boundary: data-only messages, and workers that hang, exit, flood or misbehave; what the
contract forbids is refused, and blocked modules are never imported."""
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
import types
from pathlib import Path

import numpy as np
import pytest

from attacks import OVERSIZED, bzip2_npz, declared_gigabytes, deep_nesting, forged, millions_of_objects
from grader import salt
from grader.grading import GradeOptions
from grader.instructor import runner
from grader.sandbox import channel, launch, modes, processes, template_client
from grader.sandbox import client as sandbox_client
from grader.sandbox.channel import Channel, Deadline
from grader.sandbox.client import Sandbox
from grader.sandbox.errors import StudentError, WorkerLost
from grader.sandbox.modes import mode
from grader.sandbox.worker import landlock, protocol
from grader.sandbox.worker.limits import Limits
from grader.sandbox.worker.messages import TOO_MUCH_OUTPUT
from grader.sandbox.worker.protocol import Handle, ProtocolError, decode, encode
from grader.secret import secret_roots
from helpers import ROOT


def test_round_trip_keeps_structure_and_dtypes():
    value = {"a": (np.arange(3, dtype=np.int64), [np.ones((2, 2), np.float32), None]),
             "b": Handle(7), "c": [1, 2.5, "x", True], "d": np.zeros(0, dtype=bool), "e": np.float64(2),
             "f": np.array(3.5), "g": np.arange(6.0).reshape(2, 3).T}
    back = decode(encode(value)[8:])
    assert isinstance(back["a"], tuple) and back["a"][0].dtype == np.int64
    assert back["a"][1][0].dtype == np.float32 and back["a"][1][1] is None
    assert isinstance(back["b"], Handle) and back["b"] == 7
    assert back["c"] == [1, 2.5, "x", True] and back["d"].dtype == bool
    assert back["e"] == 2 and back["f"].shape == () and back["f"] == 3.5
    assert np.array_equal(back["g"], np.arange(6.0).reshape(2, 3).T)


@pytest.mark.parametrize("layout", [[["|O", [1]]], [["<V8", [1]]], [["<f8", [-1]]], [["<f8", [1.5]]],
                                    [["<f8", [1]] * 2], [["<f8", [2]]]])
def test_arrays_declared_unlike_the_bytes_that_came_are_refused(layout):
    """Objects, records, negative or fractional sizes, and sizes that do not add up to the 16 bytes sent."""
    with pytest.raises(ProtocolError):
        decode(forged({"value": {"$array": 0}, "arrays": layout}, bytes(16)))


def _peak_bytes(body: bytes) -> int:
    """What decode(body) allocates at its peak (it must refuse body)."""
    message = bytearray(body)  # as the judge reads it
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            decode(message)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_reply_declaring_gigabytes_in_a_few_bytes_allocates_nothing():
    """issue 18: 2 x 1 GiB of float64 declared in 2 KB (once: bzip2-compressed .npz members, now refused
    as malformed, never unpacked)."""
    assert _peak_bytes(declared_gigabytes()) < 1 << 20
    assert _peak_bytes(bzip2_npz()) < 1 << 20


def test_a_header_of_millions_of_objects_or_levels_is_refused_before_parsing():
    """issue 18: a 40 MB header of empty objects took the judge to 2 GiB; deep nesting, a RecursionError."""
    body = millions_of_objects()
    assert len(body) > protocol.MAX_HEADER_BYTES and _peak_bytes(body) < 1 << 20
    assert _peak_bytes(deep_nesting()) < 4 << 20
    nested: list = []
    for _ in range(protocol.MAX_DEPTH + 1):
        nested = [nested]
    _peak_bytes(forged({"value": nested, "arrays": []}))
    with pytest.raises(ProtocolError):
        encode(nested)


def test_oversized_message_is_refused_before_reading_it():
    read, write = os.pipe()
    os.write(write, OVERSIZED)
    with io.FileIO(read, "rb") as stream, pytest.raises(ProtocolError):
        protocol.read_message(stream)
    os.close(write)


@pytest.mark.parametrize("kind", [Channel, channel.PollChannel])
def test_a_peer_that_neither_reads_nor_writes_never_blocks_the_judge(kind):
    """issue 18: a worker that stops reading once blocked the judge's write for good. Both channels: threads
    (Windows), poll() (POSIX)."""
    to_peer, peer_in = os.pipe()
    peer_out, from_peer = os.pipe()
    channel = kind(io.FileIO(peer_in, "wb"), io.FileIO(peer_out, "rb"))
    with pytest.raises(Deadline):  # far more than a pipe holds, and nobody reads it
        channel.send({"x": np.zeros(4 << 20)}, time.monotonic() + 0.5)
    with pytest.raises(Deadline):
        channel.receive(time.monotonic() + 0.5)
    os.write(from_peer, encode({"late": True}))  # the answer still comes to the receive after
    assert channel.receive(time.monotonic() + 30) == {"late": True}
    os.close(from_peer)
    with pytest.raises(EOFError):
        channel.receive(time.monotonic() + 30)
    channel.close()
    os.close(to_peer)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="no /proc here")
def test_a_zombie_has_no_uid_to_kill():
    """A killed worker's first process may wait as a zombie until the machine's init reaps it:
    closing the worker does not poll /proc until then (it runs nothing)."""
    child = subprocess.Popen(["true"])
    while Path(f"/proc/{child.pid}/status").read_text().split("State:")[1].split()[0] != "Z":
        time.sleep(0.01)
    assert processes.uid_of(Path(f"/proc/{child.pid}")) is None
    assert processes.uid_of(Path(f"/proc/{os.getpid()}")) == os.getuid()
    child.wait()


def test_poll_channel_takes_a_message_that_comes_in_parts_and_refuses_an_oversized_one():
    peer_out, from_peer = os.pipe()
    to_peer, peer_in = os.pipe()
    poll_channel = channel.PollChannel(io.FileIO(peer_in, "wb"), io.FileIO(peer_out, "rb"))
    message = encode({"x": np.arange(5.0)})
    for part in (message[:3], message[3:20]):  # the length itself, then the body, cut short
        os.write(from_peer, part)
        with pytest.raises(Deadline):
            poll_channel.receive(time.monotonic() + 0.05)
    os.write(from_peer, message[20:])
    assert poll_channel.receive(time.monotonic() + 30)["x"].tolist() == [0, 1, 2, 3, 4]
    os.write(from_peer, OVERSIZED)
    with pytest.raises(ProtocolError):
        poll_channel.receive(time.monotonic() + 30)
    poll_channel.close()
    os.close(from_peer)
    os.close(to_peer)


def test_objects_that_are_not_data_cannot_be_sent():
    with pytest.raises(TypeError):
        encode({"f": print})


MISBEHAVING = {
    "quiz.py": "ANSWERS = {}\n",
    "attention.py": textwrap.dedent("""\
        import os, subprocess, sys, time
        import torch
        from torch.nn.functional import scaled_dot_product_attention
        def hang():
            while True: pass
        def hang_with_child():
            subprocess.Popen(["sleep", "300"])
            time.sleep(300)
        def die(): os._exit(3)
        def leave(): sys.exit(0)
        def flood():
            for _ in range(10**6): print("x" * 1000)
            return "survived"
        def fine(x): return x * 2
        def cheat():
            import solutions.attention
        def pid(): return os.getpid()
        qkv = [torch.zeros(1, 2, 2)] * 3
        def imported_sdpa(): return scaled_dot_product_attention(*qkv)
        def functional_sdpa(): return torch.nn.functional.scaled_dot_product_attention(*qkv)
        def torch_mha(): return torch.nn.MultiheadAttention(4, 2)
        def subclassed_mha():
            class Mine(torch.nn.modules.activation.MultiheadAttention): pass
            return Mine(4, 2)
        def encoder_layer(): return torch.nn.modules.transformer.TransformerEncoderLayer(4, 2)
        def transformer(): return torch.nn.Transformer(4, 2)
        def allowed(): return torch.nn.Linear(2, 2)(torch.ones(2)).shape[0]
        """),
    "analysis.py": "def broken(:\n",
}


@pytest.fixture
def sandbox(tmp_path: Path):
    submission = tmp_path / "submission"
    submission.mkdir()
    for name, text in MISBEHAVING.items():
        (submission / name).write_text(text)
    box = Sandbox(submission, tmp_path)
    yield box
    box.close()


def call(box: Sandbox, target: str, *args, timeout: float = 10.0):
    return box.request({"op": "call", "target": target, "args": list(args)}, timeout)["result"]


FRESH = textwrap.dedent("""\
    import os, sys
    IMPORTED_IN = os.getpid()
    def where():
        home = os.path.expanduser("~")
        found = sorted(os.listdir(home))
        open(os.path.join(home, f"left-by-{os.getpid()}"), "w").close()
        return [IMPORTED_IN, os.getpid(), os.getuid(), found]
    """)


@pytest.mark.sandbox
@pytest.mark.skipif(mode() not in modes.FORKED_MODES, reason=f"workers are not forked in {mode()!r} mode")
def test_each_worker_is_a_fresh_fork_of_a_template_that_never_imported_the_submission(tmp_path):
    """Workers are forked from their sandbox's template, which imported torch once: each imports the
    submission itself (its module-level code runs in that worker, never in the template), finds an empty
    home, and as root gets a uid of its own."""
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "attention.py").write_text(FRESH)
    box = Sandbox(submission, tmp_path)
    try:
        first = call(box, "attention.where")
        box.fresh_worker()
        second = call(box, "attention.where")
    finally:
        box.close()
    assert first[0] == first[1] and second[0] == second[1] and first[1] != second[1]
    assert first[3] == [] and second[3] == [], "each worker's home starts empty"
    assert (first[2] != second[2]) == (box.mode in ("root", "setuid"))


SECRET = "hunter2-0123456789abcdef"
"""What the judge's environment holds, as MY_SECRET and as the salt; SPY looks for copies of it."""
COPIES = textwrap.dedent("""\
    import ctypes

    def copies(secret: bytes) -> int:
        \"\"\"How many times `secret` is in this process's writable memory.\"\"\"
        found = 0
        for line in open("/proc/self/maps"):
            span, permissions = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if permissions.startswith("rw") and end - start < 1 << 30:
                found += ctypes.string_at(start, end - start).count(secret)
        return found
    """)
"""Python source: the memory scan of SPY and FORGETS."""
SPY = COPIES + textwrap.dedent(f"""\
    import json, os, sys
    secret = "".join(map(chr, {[ord(c) for c in SECRET]})).encode()  # not a constant of this file
    copies = copies(secret)
    stat = open("/proc/self/stat").read().rpartition(")")[2].split()
    block = ctypes.string_at(int(stat[47]), int(stat[48]) - int(stat[47]))
    forked = "grader.sandbox.client" in sys.modules  # the judge's module: a launched template has none
    raise RuntimeError("SPY" + json.dumps({{"forked": forked, "copies": copies,
                                           "block": block.replace(b"\\0", b"").decode(),
                                           "environ": sorted(os.environ), "path": sys.path}}))
    """)


def _spied(folder: Path, command: str) -> dict:
    """What SPY's worker saw in its first test, graded by `grader COMMAND` with SECRET in the judge's
    environment, as MY_SECRET and as GRADER_SALT."""
    env = {key: value for key, value in os.environ.items() if key != "GRADER_SALT"}
    env |= {"MY_SECRET": SECRET, "GRADER_SALT": SECRET}
    card = folder.parent / f"card-{command}.json"
    subprocess.run([sys.executable, "-m", "grader.cli", command, "--only", "attention", "--json", str(card),
                    str(folder)], env=env, check=True, capture_output=True, cwd=ROOT)
    return _spy_report(json.loads(card.read_text()))


def _spy_report(card: dict) -> dict:
    message = card["tests"][0]["message"]
    return json.loads(message[message.index("SPY") + 3:message.rindex("}") + 1])


def _saw_nothing_of_the_judge(seen: dict, scratch: Path) -> None:
    assert seen["forked"]
    assert seen["environ"] == sorted(launch.environment(scratch, "")), "a launched worker's names, no more"
    assert seen["block"] == ""
    assert seen["copies"] <= 2, "the secret's bytes: the spy's own, and its string's"
    assert str(ROOT) not in seen["path"], "the judge's working directory is not searched"


@pytest.mark.sandbox
@pytest.mark.skipif(mode() not in modes.FORKED_MODES, reason=f"workers are not forked in {mode()!r} mode")
@pytest.mark.parametrize("command", ["check", "grade"])
def test_a_grading_forks_its_template_from_the_judge_and_leaves_it_nothing_of_the_judges_environment(
        tmp_path, command):
    """`grader check` and `grader grade` fork the template from the judge before it reads the salt or a
    hidden test, sparing it torch's import: the worker then has the judge's (public) modules, but the
    environment the judge started with is gone, in os.environ and in memory: no copy of the salt's or
    another variable's value but the spy's own, and the environment a launched template's worker gets."""
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "attention.py").write_text(SPY)
    _saw_nothing_of_the_judge(_spied(spy, command), tmp_path)


@pytest.mark.sandbox
@pytest.mark.skipif(mode() not in modes.FORKED_MODES, reason=f"workers are not forked in {mode()!r} mode")
def test_a_forked_and_a_launched_template_give_their_workers_the_same_paths_and_environment(tmp_path,
                                                                                          monkeypatch):
    """Whichever way its template started, a worker sees the same sys.path and environment: a submission
    imports in a grading's worker what it imports in any other's."""
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "attention.py").write_text(SPY)
    seen = {}
    for forked in (True, False):
        monkeypatch.setattr(sandbox_client, "forks_template", lambda forked=forked: forked)
        box = Sandbox(spy, tmp_path)
        try:
            with pytest.raises(StudentError) as error:
                box.request({"op": "import", "module": "attention"}, 60)
        finally:
            box.close()
        seen[forked] = _spy_report({"tests": [{"message": error.value.message}]})
        seen[forked]["path"] = [entry.replace(str(box.area), "AREA") for entry in seen[forked]["path"]]
    assert seen[True]["forked"] and not seen[False]["forked"]
    assert seen[True]["path"] == seen[False]["path"] and seen[True]["environ"] == seen[False]["environ"]


@pytest.mark.sandbox
@pytest.mark.skipif(mode() not in modes.FORKED_MODES, reason=f"workers are not forked in {mode()!r} mode")
def test_each_grading_of_a_class_forks_its_template_and_leaves_it_nothing_of_the_judges_environment(
        tmp_path, monkeypatch):
    """grade-all's judge process grades each job in a fork of itself, which has read neither the salt nor
    a hidden test: the second submission it grades forks its template as the first did, and neither
    worker finds a copy of the salt, which is in the judge process's environment."""
    monkeypatch.setenv("GRADER_SALT", SECRET)
    monkeypatch.setenv("MY_SECRET", SECRET)
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "attention.py").write_text(SPY)
    name, data = runner.payload(spy)
    jobs = [runner.Job(name, data, GradeOptions(components=("attention",)))] * 2
    results = [result for _, result in runner.grade_jobs(jobs, workers=1)]  # one judge process grades both
    assert [result["outcome"] for result in results] == ["graded"] * 2
    for result in results:
        _saw_nothing_of_the_judge(_spy_report(result["card"]), tmp_path)


FORGETS = COPIES + textwrap.dedent("""\
    import sys
    from grader.sandbox.worker import template

    template._forget_environment({"PATH": "/usr/bin"})
    secret = bytes(c - 1 for c in bytes.fromhex(sys.argv[1]))  # no str of it: the bytes searched for alone
    print(copies(secret) - 1)
    """)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc (Linux)")
def test_a_template_keeps_no_byte_of_the_environment_it_forgets():
    """template._forget_environment in a process started with the salt in its environment and never
    reading it (as a judge forks a template): afterwards no copy of the value is left in its memory, freed
    or not (os.environ's own bytes, the block the process started with)."""
    shifted = bytes(c + 1 for c in SECRET.encode()).hex()
    env = {key: value for key, value in os.environ.items() if key != "GRADER_SALT"} | {"GRADER_SALT": SECRET}
    run = subprocess.run([sys.executable, "-c", FORGETS, shifted], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert run.stdout.strip() == "0"


def test_a_judge_forks_a_template_only_before_it_holds_anything_hidden(monkeypatch):
    """Torch imported, one thread, the salt unread (in the environment or not) and no module of the
    reference or the hidden suites loaded: the template may be forked. Once the salt is read, or a hidden
    module loaded, or with a second thread, it is launched."""
    monkeypatch.setenv("GRADER_SALT", "x")
    monkeypatch.setattr(salt, "_read_here", False)
    monkeypatch.setattr(template_client.threading, "active_count", lambda: 1)
    roots = tuple(f"{root}{os.sep}" for root in secret_roots())
    for name, module in list(sys.modules.items()):  # what other tests of this process loaded
        if str(getattr(module, "__file__", None) or "").startswith(roots):
            monkeypatch.delitem(sys.modules, name)
    assert template_client.forks_template()
    assert salt.deployment_salt() == "x" and not template_client.forks_template()
    monkeypatch.setattr(salt, "_read_here", False)
    monkeypatch.setattr(template_client.threading, "active_count", lambda: 2)
    assert not template_client.forks_template()
    monkeypatch.setattr(template_client.threading, "active_count", lambda: 1)
    loaded = types.ModuleType("loaded")
    loaded.__file__ = str(ROOT / "grader" / "suites" / "hidden" / "quiz.py")
    monkeypatch.setitem(sys.modules, "loaded", loaded)
    assert not template_client.forks_template()


@pytest.mark.sandbox
@pytest.mark.skipif(mode() not in modes.FORKED_MODES, reason=f"workers are not forked in {mode()!r} mode")
def test_the_template_outlives_a_sigint(sandbox):
    """Python's SIGINT handler would end the template (a "userns" worker, of its uid, may send it one),
    and the sandbox would have to start another: it ignores SIGINT and forks the next worker."""
    assert call(sandbox, "attention.fine", 1) == 2
    template = sandbox.template
    os.kill(processes.first_child(template.process.pid), signal.SIGINT)
    sandbox.fresh_worker()
    assert call(sandbox, "attention.fine", 2) == 4
    assert sandbox.template is template and not template.lost and template.process.poll() is None


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_hang_times_out_and_the_next_call_gets_a_new_worker(sandbox):
    assert call(sandbox, "attention.fine", 2) == 4
    with pytest.raises(WorkerLost) as lost:
        call(sandbox, "attention.hang", timeout=1.0)
    assert lost.value.timed_out
    assert call(sandbox, "attention.fine", 3) == 6


@pytest.mark.sandbox
@pytest.mark.skipif(mode() in ("root", "userns"), reason="the worker's PID namespace is killed whole "
                    "instead: test_hostile.py::test_nothing_the_worker_starts_outlives_it")
def test_the_whole_process_group_is_killed(sandbox):
    worker_pid = call(sandbox, "attention.pid")
    with pytest.raises(WorkerLost):
        call(sandbox, "attention.hang_with_child", timeout=1.5)
    deadline = time.monotonic() + 30  # generous: the loop ends as soon as they are gone
    while _live_members(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _live_members(worker_pid) == []


def _live_members(pgid: int) -> list[int]:
    """Processes of this group that are neither gone nor zombies (read from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.mark.slow
@pytest.mark.sandbox
def test_os_exit_costs_one_call(sandbox):
    with pytest.raises(WorkerLost, match="exited with code 3"):
        call(sandbox, "attention.die")
    assert call(sandbox, "attention.fine", 1) == 2


FORGER = textwrap.dedent("""\
    import json, struct

    def forged(value):
        header = json.dumps({"value": value, "arrays": []}).encode()
        body = struct.pack(">Q", len(header)) + header
        return struct.pack(">Q", len(body)) + body

    def without_id():
        write(pipes()[1], forged({"ok": {"result": 1}}))
        return 2

    def with_the_next_id(request_id):
        write(pipes()[1], forged({"id": request_id, "ok": {"result": 1}}))
        return 2
    """)


@pytest.mark.sandbox
@pytest.mark.parametrize("forgery", ["without_id", "with_the_next_id"])
def test_a_reply_the_submission_writes_itself_loses_its_worker_and_the_next_call_is_answered_right(
        sandbox, forgery):
    """Each reply echoes its request's id and has its op's shape: a reply the student's code writes to the
    worker's pipe (without an id, or with the id of the call it is made in) is refused, and not taken as
    the answer to a later request: the worker is lost, saying the submission wrote to the grader's channel,
    and the next calls get a fresh worker's right answers."""
    from attacks import _PIPES

    (sandbox.area / "submission" / "forger.py").write_text(_PIPES + FORGER)
    assert call(sandbox, "attention.fine", 2) == 4
    with pytest.raises(WorkerLost, match="the submission wrote to the grader's channel") as lost:
        # the request's id is the worker's second: its first was the call above
        call(sandbox, f"forger.{forgery}", *([2] if forgery == "with_the_next_id" else []))
        call(sandbox, "attention.fine", 3)  # a forgery with the right id shows at the next reply
    assert not lost.value.timed_out
    assert [call(sandbox, "attention.fine", n) for n in (5, 6)] == [10, 12]


LEAVER = textwrap.dedent("""\
    import ctypes, os
    FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), os.environ.get("TMPDIR", "/"))
    KEY = 0x29292929
    libc = ctypes.CDLL(None, use_errno=True)

    def leave():
        for folder in FOLDERS:
            try:
                with open(os.path.join(folder, "left-behind"), "w") as note:
                    note.write("a hidden input")
                os.chmod(os.path.join(folder, "left-behind"), 0o666)
            except OSError:
                pass
        libc.shmget(KEY, 4096, 0o1666)  # IPC_CREAT, readable by all

    def find():
        return ([folder for folder in FOLDERS if os.path.exists(os.path.join(folder, "left-behind"))],
                libc.shmget(KEY, 0, 0) >= 0)
    """)


@pytest.mark.sandbox
@pytest.mark.skipif(mode() == "plain", reason="'plain' mode keeps nothing apart: it refuses hidden tests")
@pytest.mark.skipif(mode() == "setuid" and not landlock.abi(), reason="without Landlock, a 'setuid' worker "
                    "writes where the machine lets every user (its report says it sees the machine's files)")
def test_a_worker_leaves_nothing_for_the_next_worker(sandbox):
    """No writable folder is shared by two workers (in "root" and "userns" the new root is read-only, /tmp
    too, and each worker has a home of its own, its TMPDIR; in "setuid", Landlock lets it write only its
    own home), and no SysV IPC object outlives a worker (an IPC namespace of its own, or seccomp): what
    a hidden phase's worker learns, it cannot leave for a later one."""
    (sandbox.area / "submission" / "leaver.py").write_text(LEAVER)
    call(sandbox, "leaver.leave")
    sandbox.fresh_worker()
    assert call(sandbox, "leaver.find") == ([], False)


@pytest.mark.sandbox
def test_system_exit_is_an_error_of_the_call_not_the_worker(sandbox):
    with pytest.raises(StudentError, match="SystemExit"):
        call(sandbox, "attention.leave")
    assert call(sandbox, "attention.fine", 1) == 2


@pytest.mark.sandbox
def test_a_print_flood_is_capped_and_said_plainly_and_does_not_reach_the_judge(sandbox, capfd):
    with pytest.raises(StudentError) as flood:
        call(sandbox, "attention.flood", timeout=60)
    assert flood.value.type_name == TOO_MUCH_OUTPUT
    assert flood.value.message == "your code printed more than 8 MiB: remove the prints"
    assert "attention.py, line" in flood.value.where
    assert sandbox.worker.log_path.stat().st_size <= 8 * 1024 * 1024
    assert "xxxx" not in capfd.readouterr().out
    assert call(sandbox, "attention.fine", 1) == 2, "the log is emptied: later calls may print again"


@pytest.mark.sandbox
def test_a_syntax_error_names_the_file_and_line_once(sandbox):
    with pytest.raises(StudentError) as error:
        call(sandbox, "analysis.broken")
    assert error.value.type_name == "SyntaxError" and error.value.where == "analysis.py, line 1"
    assert (error.value.file, error.value.line) == ("analysis.py", 1)
    assert str(error.value).count("line 1") == 1


@pytest.mark.sandbox
@pytest.mark.parametrize("target, name", [
    ("imported_sdpa", "torch.nn.functional.scaled_dot_product_attention"),
    ("functional_sdpa", "torch.nn.functional.scaled_dot_product_attention"),
    ("torch_mha", "torch.nn.MultiheadAttention"),
    ("subclassed_mha", "torch.nn.MultiheadAttention"),
    ("encoder_layer", "torch.nn.TransformerEncoderLayer"),
    ("transformer", "torch.nn.Transformer"),
])
def test_what_the_contract_forbids_raises_naming_the_rule(sandbox, target, name):
    """Looked up at import time (`from torch.nn.functional import ...`) or at the call, by any alias."""
    with pytest.raises(StudentError) as error:
        call(sandbox, f"attention.{target}")
    assert error.value.message == f"docs/spec.md forbids {name} in the exercises: it is what you are building"
    assert error.value.file == "attention.py"
    assert call(sandbox, "attention.allowed") == 2


@pytest.mark.sandbox
def test_a_blocked_module_is_never_imported_again(sandbox):
    """Importing it fails at once, naming it (analysis.py, run, would raise SyntaxError); the worker that
    tried it is replaced."""
    call(sandbox, "attention.fine", 1)
    sandbox.block("analysis")
    assert sandbox.worker is None
    with pytest.raises(StudentError) as error:
        call(sandbox, "analysis.broken", timeout=30)
    assert error.value.type_name == "ModuleNotFoundError" and error.value.file == "analysis.py"
    assert call(sandbox, "attention.fine", 1) == 2


@pytest.mark.sandbox
def test_the_reference_cannot_be_imported_in_the_worker(sandbox):
    with pytest.raises(StudentError, match="reference solutions cannot be imported"):
        call(sandbox, "attention.cheat")


@pytest.mark.sandbox
def test_a_worker_that_cannot_start_says_why(tmp_path: Path):
    """issue 19: once only "the other side closed the channel", its log (which said why) deleted."""
    (tmp_path / "submission").mkdir()
    box = Sandbox(tmp_path / "submission", tmp_path, limits=Limits(open_files=3))  # too few for any import
    try:
        with pytest.raises(WorkerLost, match="the worker could not start") as lost:
            box.ready()
    finally:
        box.close()
    assert "its log ends with" in str(lost.value) and "Error" in str(lost.value)


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in entry.read_bytes().decode(errors="replace") and int(entry.parent.name) != os.getpid():
                found.append(int(entry.parent.name))
        except OSError:
            pass
    return found


@pytest.mark.slow
@pytest.mark.sandbox
def test_ctrl_c_stops_a_grading_within_seconds_whatever_the_worker_does(tmp_path: Path):
    """issue 18: a worker that stopped reading once left `grader grade` deaf to Ctrl-C."""
    submission = tmp_path / "submission"
    shutil.copytree(ROOT / "exercises", submission)
    (submission / "attention.py").write_text("import time\nwhile True:\n    time.sleep(1)\n")
    command = [sys.executable, "-m", "grader.cli", "check", str(submission), "--timeout-scale", "100"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # tmp_path is in the workers' command lines too
    judge = subprocess.Popen(command, cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(_processes_mentioning(str(tmp_path))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # until the worker runs
        time.sleep(10)  # it imports torch, then attention.py, which never returns: the judge waits on it
        assert judge.poll() is None, "still grading"
        judge.send_signal(signal.SIGINT)
        _, err = judge.communicate(timeout=30)
    finally:
        judge.kill()
    assert judge.returncode == 130 and "grader: interrupted" in err and "Traceback" not in err
    deadline = time.monotonic() + 30
    while _processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_mentioning(str(tmp_path)) == [], "its workers are gone with it"
