"""One memory limit, the same in `grader check` as in a grading as root (issue 31): each worker process may
hold Limits.group_memory_bytes (RLIMIT_DATA, in every mode), and as root its processes together too (its
control group). Running out says so, with the limit, whichever of the two is reached; where no group
can be made, the check says that the processes' sum is not limited."""
import os
import textwrap
from pathlib import Path

import pytest

from grader.sandbox import cgroup
from grader.sandbox.client import Sandbox
from grader.sandbox.errors import StudentError, WorkerLost
from grader.sandbox.modes import mode
from grader.sandbox.worker.limits import Limits

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(mode() == "plain" and os.name != "posix",
                                                      reason="RLIMIT_DATA is Linux's")]
LIMIT = Limits().memory
MODES = [pytest.param(name, marks=pytest.mark.skipif(
    name != "plain" and mode() not in (name, "root"), reason=f"needs {name!r} mode (here: {mode()!r})"))
    for name in ("root", "userns", "plain")]


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "attention.py").write_text(textwrap.dedent("""\
        import os, time, torch

        def mask(gib):  # as a causal mask of a huge size would
            return torch.ones(int(gib * 2**30), dtype=torch.uint8).numel()

        def with_a_child(gib):  # a child holds 0.5 GiB, then the worker reaches for `gib` more
            ready, told = os.pipe()
            if os.fork() == 0:
                held = torch.ones(2**29, dtype=torch.uint8)
                os.write(told, b"held")  # whatever the machine's load: the worker waits for it
                time.sleep(5)  # it holds the worker's pipes: the judge sees the end when it exits
                os._exit(0)
            os.read(ready, 4)
            return mask(gib)
        """))
    return folder


def _call(box: Sandbox, target: str, *args):
    return box.request({"op": "call", "target": f"attention.{target}", "args": list(args)}, 60.0)["result"]


@pytest.mark.parametrize("asked", MODES)
def test_a_worker_past_the_memory_limit_fails_saying_memory_and_the_limit(asked, submission, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("GRADER_SANDBOX", asked)
    mode.cache_clear()
    try:
        box = Sandbox(submission, tmp_path, hidden=False)
        try:
            assert _call(box, "mask", 0.5) == 2**29  # under the limit: as usual
            with pytest.raises(StudentError, match=rf"out of memory \(the limit is {LIMIT} a worker\): .*"
                                                   "allocate"):
                _call(box, "mask", 3)  # 8 GiB of address space would have let it try, and swap
            summary = box.isolation()["summary"]
            assert f"with time and memory ({LIMIT}) limits" in summary
            grouped = asked in ("root", "setuid") and "memory" in cgroup.available()
            assert ("the memory of its processes together (no control group here" in summary) != grouped
        finally:
            box.close()
    finally:
        mode.cache_clear()


@pytest.mark.skipif(mode() != "root" or "memory" not in cgroup.available(), reason="needs a memory cgroup")
def test_a_worker_killed_for_its_processes_memory_together_says_memory_and_the_limit(submission, tmp_path):
    box = Sandbox(submission, tmp_path, hidden=False)
    try:
        with pytest.raises(WorkerLost, match=rf"ran out of memory \(the limit is {LIMIT}, all it starts "
                                             "included\\) and was killed"):
            _call(box, "with_a_child", 1.75)  # each under the limit alone, not together: the larger goes
    finally:
        box.close()
