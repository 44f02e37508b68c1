"""A grading runs on one CPU (grader/sandbox/affinity.py): its judge and its workers share it, gradings side
by side claim different ones, and the judge's former CPUs come back afterwards."""
import json
import os
import textwrap
import threading

import pytest

from grader.grading import GradeOptions, grade
from grader.sandbox import affinity
from grader.sandbox.client import Sandbox

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="pinning needs Linux and two CPUs")


@pytest.fixture
def locks(tmp_path, monkeypatch) -> None:
    """Claims of this test's own, out of other gradings' way (pytest -n 2)."""
    monkeypatch.setattr(affinity, "CLAIM", f"grader-test-{tmp_path.name}-{os.getpid()}-{{uid}}-{{cpu}}")


def test_one_cpu_pins_to_one_allowed_cpu_then_gives_the_others_back(locks):
    before = os.sched_getaffinity(0)
    with affinity.one_cpu() as cpu:
        assert cpu in before and os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == before


def test_gradings_side_by_side_claim_different_cpus_and_none_past_the_last(locks):
    """Each of len(allowed) threads claims a CPU and holds it: all different; one more runs unpinned."""
    allowed = os.sched_getaffinity(0)
    claimed: list[int | None] = []
    held, done = threading.Semaphore(0), threading.Event()

    def hold() -> None:
        with affinity.one_cpu() as cpu:
            claimed.append(cpu)
            held.release()
            done.wait(30)

    holders = [threading.Thread(target=hold) for _ in allowed]
    for holder in holders:
        holder.start()
        assert held.acquire(timeout=30)
    try:
        with affinity.one_cpu() as extra:
            assert extra is None and os.sched_getaffinity(0) == allowed
    finally:
        done.set()
        for holder in holders:
            holder.join()
    assert sorted(claimed) == sorted(allowed)


def test_a_process_that_may_make_no_socket_grades_unpinned(locks, monkeypatch):
    def refused(*args: object) -> None:
        raise PermissionError("sockets refused")

    monkeypatch.setattr(affinity.socket, "socket", refused)
    before = os.sched_getaffinity(0)
    with affinity.one_cpu() as cpu:
        assert cpu is None and os.sched_getaffinity(0) == before


PROBE = textwrap.dedent("""\
    import os
    def cpus():
        return sorted(os.sched_getaffinity(0))
    """)


@pytest.mark.sandbox
def test_a_gradings_worker_runs_on_its_judges_cpu(tmp_path, locks):
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "attention.py").write_text(PROBE)
    with affinity.one_cpu() as cpu:
        box = Sandbox(submission, tmp_path)
        try:
            seen = box.request({"op": "call", "target": "attention.cpus", "args": []}, 30)["result"]
        finally:
            box.close()
    assert seen == [cpu]


CPUS_AT_IMPORT = "import os\nraise RuntimeError(f'CPUS{sorted(os.sched_getaffinity(0))}')\n"


@pytest.mark.sandbox
def test_a_grading_runs_its_worker_on_one_cpu_and_gives_its_cpus_back(tmp_path, locks):
    """grading.grade, as `grader grade` runs it: the worker that imports the submission is on one CPU,
    and the judge's thread has all of its CPUs again afterwards."""
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "attention.py").write_text(CPUS_AT_IMPORT)
    before = os.sched_getaffinity(0)
    card = grade(submission, GradeOptions(components=("attention",), public_only=True))
    message = card.tests[0].message
    seen = json.loads(message[message.index("CPUS") + 4:message.index("]") + 1])
    assert len(seen) == 1 and set(seen) <= before, message
    assert os.sched_getaffinity(0) == before
