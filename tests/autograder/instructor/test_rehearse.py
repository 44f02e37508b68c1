"""`grader rehearse` (issue 33): the synthetic class in each LMS's export reads back as the class it is;
a quick rehearsal here passes every check; a heavy one passes on a real Dask cluster over TLS (two
workers) and through the Gradescope bundle; and a deployment broken on purpose (a worker with another
salt, a worker forced to a weaker sandbox mode, a roster whose ids do not match) fails with that check
named."""
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from attacks import stop_sessions
from grader.cli import main as grader_main
from grader.instructor.classroom import discover
from grader.instructor.rehearse import Deployment, Graded, _bug_problem, rehearse, rehearse_class
from grader.instructor.rehearse_class import LAYOUTS, build
from grader.sandbox.modes import ISOLATION, mode
from helpers import load_bugs

AGREE = "workers agree: salt, grader, pins, sandbox mode"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_class_reads_back_in_each_export_as_the_class_it_is(tmp_path, layout):
    klass = build(tmp_path, layout, quick=True)
    found = discover(klass.export, tmp_path / "scratch")
    assert sorted(s for submission in found for s in submission.students) == sorted(
        s.student for s in klass.students)
    assert len({s.student for s in klass.students}) == len(klass.students)
    if klass.roster:
        roster = klass.roster.read_text()
        assert all(s.user in roster for s in klass.students) and klass.absent in roster


def test_a_bug_may_cost_a_few_points_outside_its_component_a_crash_what_imports_it():
    bugs = load_bugs().BY_NAME
    said = "sin and cos are swapped"

    def graded(outside: float) -> Graded:
        return Graded("graded", 90.0, {("positional", "a"): ("failed", 0.0, 2.0, said),
                                       ("model", "b"): ("failed", 0.0, outside, "wrong logits")})

    assert _bug_problem(bugs["sinusoidal_sin_cos_swapped"], graded(2.0)) == ""
    assert "5 other points lost outside positional" in _bug_problem(bugs["sinusoidal_sin_cos_swapped"],
                                                                    graded(5.0))
    crash = Graded("graded", 60.0, {("block", "a"): ("failed", 0.0, 2.0, "cannot import name"),
                                    ("model", "b"): ("failed", 0.0, 20.0, "block.py cannot be imported")})
    assert _bug_problem(bugs["import_time_error"], crash) == ""  # what imports block.py goes with it


def _verdicts(checks) -> dict[str, bool | None]:
    return {check.name: check.passed for check in checks}


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.xdist_group("grade_all")
def test_a_quick_rehearsal_here_passes_and_a_roster_of_other_ids_fails_the_lms_check(tmp_path, capsys):
    assert grader_main(["rehearse", "--out", str(tmp_path / "good"), "--quick", "--jobs", "2"]) == 0
    said = capsys.readouterr().out
    assert "FAIL" not in said and "| nothing left on the hosts |" in said  # unseen while others grade here
    assert (tmp_path / "good" / "rehearsal.md").read_text().count("| pass |") >= 10

    klass = build(tmp_path / "bad", "canvas", quick=True)
    klass.roster.write_text(klass.roster.read_text().replace(",50", ",70"))  # every id 50NN is now 70NN
    verdicts = _verdicts(rehearse_class(klass, tmp_path / "bad", Deployment(workers=2)))
    assert verdicts["LMS file = gradebook"] is False
    assert verdicts["correct work: full marks"] is True  # the grades are right: only their placing is not


@contextmanager
def _cluster(folder: Path, worker_env: tuple[dict, dict]):
    """A TLS scheduler and two one-thread workers on loopback, each with its own environment; yields
    (address, the TLS options)."""
    from distributed.security import Security

    security, tls = Security.temporary(), []
    for option, text in (("--tls-ca-file", security.tls_ca_file), ("--tls-cert", security.tls_client_cert),
                         ("--tls-key", security.tls_client_key)):
        path = folder / f"{option.removeprefix('--')}.pem"
        path.write_text(text)
        path.chmod(0o600)
        tls += [option, str(path)]
    address_file, dask = folder / "scheduler.json", [sys.executable, "-m", "dask"]
    scheduler = [*dask, "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0",
                 "--no-dashboard",
                 "--scheduler-file", str(address_file), *tls]
    processes = [subprocess.Popen(scheduler,
                                  cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)]
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(address_file.read_text())["address"]
        for env in worker_env:
            processes.append(subprocess.Popen([*dask, "worker", address, "--nthreads", "1", "--no-nanny",
                                               "--no-dashboard", *tls], cwd=folder, env={**os.environ, **env},
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True))
        from distributed import Client

        with Client(address, security=Security(tls_ca_file=tls[1], tls_client_cert=tls[3],
                                               tls_client_key=tls[5], require_encryption=True)) as client:
            client.wait_for_workers(len(worker_env), timeout=120)
        yield address, tls
    finally:
        stop_sessions(processes)


@pytest.mark.parametrize("layout", ["canvas", "moodle"])
@pytest.mark.heavy
@pytest.mark.sandbox
@pytest.mark.xdist_group("grade_all")
def test_a_rehearsal_on_a_tls_cluster_of_two_workers_passes(tmp_path, capsys, layout):
    pytest.importorskip("cryptography", reason="Security.temporary() makes its certificates with it")
    with _cluster(tmp_path, ({}, {})) as (address, tls):
        code = grader_main(["rehearse", "--out", str(tmp_path / "out"), "--quick", "--lms", layout,
                            "--scheduler", address, *tls])
    said = capsys.readouterr().out
    assert code == 0, said
    assert "2 host(s)" in said and "not seen: the scheduler's host" in said


@pytest.mark.heavy
@pytest.mark.sandbox
@pytest.mark.xdist_group("grade_all")
def test_a_rehearsal_through_the_gradescope_bundle_passes(tmp_path, capsys):
    bundle = tmp_path / "autograder.zip"
    assert grader_main(["autograder", "--out", str(bundle)]) == 0
    code = grader_main(["rehearse", "--out", str(tmp_path / "out"), "--quick", "--lms", "gradescope",
                        "--bundle", str(bundle)])
    said = capsys.readouterr().out
    assert code == 0, said


def _weaker() -> str:
    """The next sandbox mode weaker than this machine's that still grades (plain needs an unsafe flag)."""
    return list(ISOLATION)[list(ISOLATION).index(mode()) + 1]


@pytest.mark.parametrize("worker, why", [({"GRADER_SALT": "another-deployments-salt"}, "salt"),
                                         ({"GRADER_SANDBOX": "weaker"}, "mode")])
@pytest.mark.heavy
@pytest.mark.sandbox
@pytest.mark.xdist_group("grade_all")
def test_a_worker_of_another_salt_or_a_weaker_sandbox_fails_the_workers_check(tmp_path, worker, why):
    pytest.importorskip("cryptography", reason="Security.temporary() makes its certificates with it")
    if why == "mode" and mode() not in ("root", "userns"):
        pytest.skip(f"no weaker mode that grades below {mode()!r}")
    worker = {name: _weaker() if value == "weaker" else value for name, value in worker.items()}
    with _cluster(tmp_path, ({}, worker)) as (address, tls):
        from grader.instructor.cluster import security

        deployment = Deployment(2, address, security(address, *tls[1::2]))
        checks = rehearse(tmp_path / "out", deployment, quick=True)
    failed = {check.name: check.evidence for check in checks if check.passed is False}
    assert AGREE in failed, checks
    assert f"{why} " in failed[AGREE] and "tls://127.0.0.1:" in failed[AGREE]  # named with its host
