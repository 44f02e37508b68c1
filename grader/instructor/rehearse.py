"""`grader rehearse`: a whole synthetic class (rehearse_class.py) graded through the path the course will
use (here with --jobs, a Dask cluster with --scheduler and TLS, or the Gradescope bundle's run_autograder
per submission), then a late round, and checked end to end: the failures that hurt a course happen
between the pieces each tested alone. Each check passes, fails, or says plainly what it could not see
(`unseen`): it never passes for want of looking. The table is printed; DIR/rehearsal.md holds it and
the figures (time per submission, the projection for a class).
"""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import closing
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ..atomic import write_atomic
from ..spec import Status
from . import hostile
from .autograder import pinned_versions
from .grade_all import STATE, UNPLACED, grade_all
from .lms import Export
from .rehearse_class import HOSTILE_FILE, LAYOUTS, Class, build, resubmit
from .runner import Job, VersionMismatch, grade_jobs, grader_version, payload, pins
from .salt_file import fingerprint

HOSTILE = Path(HOSTILE_FILE).stem
"""The component the hostile submissions' code is in."""
SAMPLE = 3
"""Students graded again alone, to compare test for test with their grade in the class."""
PROJECTED = (100, 300, 1000)
"""Class sizes the time per submission is projected to."""
SCRATCH = ("grade-job-", "grade-all-", "submission-", "grader-", "gradescope-", "sandbox-")
"""The prefixes of the scratch folders a grading makes in the temporary folder (runner, grading, client)."""
RESULTS = ".results.json"
"""Each student's Gradescope results.json in DIR/grades, through the bundle."""
MAX_OUTSIDE = (10.0, 4.0)
"""The points a bug that does not crash may cost outside its component, in integration cases and in the
others: benchmarks/cross_component.py's targets (issues 8 and 32). A crash takes with it the components
that import its file: what that costs is listed, not failed."""
SETTLE_SECONDS = 3.0
"""How long a leftover must stay to count: a folder another grading on the host is still using goes."""


@dataclass(frozen=True)
class Deployment:
    """The path the course grades through: `workers` here, a Dask `scheduler` (with TLS `security`), or
    the Gradescope `bundle` (its run_autograder per submission, on this machine)."""

    workers: int = 1
    scheduler: str | None = None
    security: object = None
    bundle: Path | None = None


@dataclass
class Check:
    """One line of the table: `passed` True, False, or None where the check could not see (`unseen`)."""

    name: str
    passed: bool | None
    evidence: str

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "FAIL", None: "unseen"}[self.passed]


@dataclass
class Graded:
    """What the deployment made of one student: status, total, each test's (status, score, points, message),
    and the sandbox mode its card names (none through the bundle: its results.json does not say)."""

    status: str
    total: float | None
    tests: dict[tuple[str, str], tuple[str, float, float, str]] = field(default_factory=dict)
    mode: str = ""


# -- what each host holds ---------------------------------------------------------------------------


def _leftovers(marker: str) -> dict[str, list[str]]:
    """What the gradings may have left on this host: processes of the escape, scratch folders, control
    groups of judges that are gone, SysV IPC objects."""
    from ..sandbox import cgroup

    temp = Path(tempfile.gettempdir())
    groups = [
        str(path)
        for h in cgroup._hierarchies()
        if h.base.is_dir()  # read only: the groups made
        for path in h.base.glob("judge-*")
        if not Path(f"/proc/{path.name.removeprefix('judge-')}").exists()
    ]
    ipc = [
        f"{kind}: {line.split()[1]}"
        for kind in ("shm", "msg", "sem")
        for line in _lines(Path("/proc/sysvipc") / kind)[1:]
    ]
    return {
        "processes": [str(pid) for pid in hostile.survivors(marker)] if marker else [],
        "scratch": sorted(str(p) for p in temp.iterdir() if p.name.startswith(SCRATCH)),
        "control groups": groups,
        "SysV IPC": ipc,
    }


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def probe(marker: str = "") -> dict:
    """This host's word (run here, or on each Dask worker): what decides its grades (grader version,
    pins, the salt's fingerprint, the sandbox mode), its leftovers and the gradings under way there."""
    from ..salt import deployment_salt
    from ..sandbox.modes import mode

    try:
        sandbox = mode()
    except Exception as error:  # noqa: BLE001 - a mode that cannot be had is this host's answer
        sandbox = f"none ({error})"
    return {
        "host": socket.gethostname(),
        "grader": grader_version(),
        "pins": pins(),
        "salt": fingerprint(deployment_salt()),
        "mode": sandbox,
        "leftovers": _leftovers(marker),
        "busy": _busy(),
    }


def _probes(deployment: Deployment, marker: str = "") -> dict[str, dict]:
    """Every host's probe, by name: each Dask worker (its address), or this machine."""
    if not deployment.scheduler:
        return {f"{socket.gethostname()} (here)": probe(marker)}
    from distributed import Client

    with Client(
        deployment.scheduler, timeout="30s", set_as_default=False, security=deployment.security
    ) as client:
        return client.run(probe, marker)


# -- grading ----------------------------------------------------------------------------------------


def _grade_class(klass: Class, out: Path, deployment: Deployment) -> tuple[dict[str, Graded], int, str]:
    """Grade the class into `out` through the deployment: each student's Graded, grade-all's exit status
    (or the bundle's), and what stopped it ("" when nothing did)."""
    if deployment.bundle:
        return _through_bundle(klass, out, deployment.bundle), 0, ""
    export = Export(klass.layout, klass.roster) if klass.roster else None
    try:
        code = grade_all(
            klass.export,
            out,
            workers=deployment.workers,
            scheduler=deployment.scheduler,
            security=deployment.security,
            export=export,
        )
    except VersionMismatch as error:
        return {}, 2, str(error)
    return _gradebook(out), code, ""


def _gradebook(out: Path) -> dict[str, Graded]:
    state = json.loads((out / STATE).read_text())
    graded = {}
    for student, record in state.items():
        card_file = out / f"{student}.json"
        card = json.loads(card_file.read_text()) if card_file.is_file() else None
        total = (
            card["score"]
            if card and record["status"] == "graded"
            else (0.0 if record["status"] in ("empty", "unreadable") else None)
        )
        tests = {
            (t["component"], t["name"]): (t["status"], t["score"], t["max_score"], t["message"])
            for t in (card or {}).get("tests", [])
        }
        graded[student] = Graded(
            record["status"], total, tests, (card or {}).get("sandbox", {}).get("mode", "")
        )
    return graded


def _through_bundle(klass: Class, out: Path, bundle: Path) -> dict[str, Graded]:
    """Each submission through the bundle as Gradescope runs it: /autograder laid out in a scratch folder
    (the bundle in source/, the student's upload in submission/), run_autograder, its results.json kept
    in `out`. Gradescope grades what is submitted: the late round runs only the late students."""
    out.mkdir(parents=True, exist_ok=True)
    for student in klass.late or klass.students:
        with tempfile.TemporaryDirectory(prefix="rehearse-root-") as scratch:
            root = Path(scratch)
            with zipfile.ZipFile(bundle) as archive:
                archive.extractall(root / "source")
            shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
            _upload(student.source, root / "submission")
            env = {
                **os.environ,
                "AUTOGRADER_ROOT": str(root),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            }
            with open(out / f"{student.student}.log", "w") as log:  # what Gradescope shows staff
                subprocess.run(
                    ["bash", str(root / "run_autograder")],
                    cwd=root,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=3600,
                )
            shutil.copy(root / "results" / "results.json", out / f"{student.student}{RESULTS}")
    return {
        path.name.removesuffix(RESULTS): _from_results(json.loads(path.read_text()))
        for path in out.glob(f"*{RESULTS}")
    }


def _upload(source: Path, submission: Path) -> None:
    """Gradescope's submission/ folder: the student's files, or the one zip or notebook they uploaded."""
    if source.is_dir():
        shutil.copytree(source, submission)
    else:
        submission.mkdir()
        shutil.copy(source, submission)


def _from_results(results: dict) -> Graded:
    """Gradescope's results.json as a Graded: its tests are named "component: name" (" (hidden)")."""
    tests = {}
    for test in results["tests"]:
        component, _, name = test["name"].removesuffix(" (hidden)").partition(": ")
        status = Status.PASSED.value if test["score"] >= test["max_score"] else Status.FAILED.value
        tests[component, name] = (status, test["score"], test["max_score"], test.get("output", ""))
    status = "graded" if tests else ("empty" if "nothing" in results["output"].lower() else "unreadable")
    return Graded(status, results["score"], tests)


# -- the checks -------------------------------------------------------------------------------------


def _lost(graded: Graded, component: str, *, outside: bool = False) -> list[tuple]:
    """The tests not passed in `component` (or outside it): (key, (status, score, max, message))."""
    return [
        (key, test)
        for key, test in graded.tests.items()
        if test[0] != Status.PASSED and (key[0] != component) == outside
    ]


def _said(graded: Graded | None) -> str:
    return "not graded" if graded is None else f"{graded.status}, total {graded.total}"


def _correct(klass: Class, graded: dict[str, Graded]) -> Check:
    expected = [s for s in klass.students if s.status == "graded" and s.total is not None]
    wrong = [
        f"{s.kind} ({s.student}): {_said(graded.get(s.student))}"
        for s in expected
        if s.student not in graded or graded[s.student].total != s.total
    ]
    return Check(
        "correct work: full marks",
        not wrong,
        "; ".join(wrong)
        or f"{len(expected)} correct submissions (folder, zip, nested, __MACOSX, Windows zip, notebook, "
        "reference; the lone file its component's points) got them",
    )


@cache
def _integration() -> frozenset[tuple[str, str]]:
    """The integration cases (the student's whole stack: a bug below costs points there by design)."""
    from ..suites import all_cases

    return frozenset((case.component, case.name) for case in all_cases() if case.integration)


def _outside(bug: object, result: Graded) -> tuple[float, float]:
    """Points a bug lost outside its component: in integration cases, and in the others."""
    lost = [(key, test[2] - test[1]) for key, test in _lost(result, bug.component, outside=True)]
    integration = sum(points for key, points in lost if key in _integration())
    return integration, sum(points for _, points in lost) - integration


def _bug_problem(bug: object, result: Graded | None) -> str:
    """What is wrong with a bug's grade ("" when it is caught as grader audit expects: in its component,
    with one of its keywords; outside it, a bug that does not crash within MAX_OUTSIDE)."""
    if result is None or result.status != "graded":
        return f"{bug.name}: {_said(result)}"
    lost = _lost(result, bug.component)
    words = " ".join(test[3].lower() for _, test in lost)
    if not lost:
        return "" if bug.name == "print_flood" else f"{bug.name}: no {bug.component} test failed"
    if not any(word in words for word in bug.keywords):
        return f"{bug.name}: no {bug.component} message names {'/'.join(bug.keywords)}"
    integration, other = _outside(bug, result)
    if not bug.crash and (integration > MAX_OUTSIDE[0] or other > MAX_OUTSIDE[1]):
        return (
            f"{bug.name}: {integration:g} integration and {other:g} other points lost outside {bug.component}"
            f" (at most {MAX_OUTSIDE[0]:g} and {MAX_OUTSIDE[1]:g})"
        )
    return ""


def _bugs(klass: Class, graded: dict[str, Graded]) -> Check:
    bugs = [s for s in klass.students if s.bug]
    problems = [p for s in bugs if (p := _bug_problem(s.bug, graded.get(s.student)))]
    crashes = sorted(
        {
            f"{s.bug.name} {sum(_outside(s.bug, graded[s.student])):g}"
            for s in bugs
            if s.bug.crash and s.student in graded and sum(_outside(s.bug, graded[s.student]))
        }
    )
    costs = f"; crashes cost the components built on theirs (points): {', '.join(crashes)}" if crashes else ""
    return Check(
        "bugs: caught in their own component",
        not problems,
        (
            "; ".join(problems)
            or f"{len(bugs)} bugs each caught in its component with its named message "
            f"(print_flood's values are right), within the points allowed outside it"
        )
        + costs,
    )


def _alone(klass: Class, graded: dict[str, Graded]) -> Check:
    """A sample graded again alone, here: test for test the same as in the class."""
    sample = [s for s in klass.students if s.student in graded and graded[s.student].tests][:1]
    sample += [s for s in klass.students if s.bug and s.student in graded][: SAMPLE - 1]
    jobs = [Job(*payload(s.source)) for s in sample]
    differ = []
    with closing(grade_jobs(jobs, 1)) as results:
        for index, result in results:
            card = result.get("card") or {"tests": []}
            alone = {
                (t["component"], t["name"]): (t["status"] == Status.PASSED, t["score"]) for t in card["tests"]
            }
            inside = {
                key: (test[0] == Status.PASSED, test[1])
                for key, test in graded[sample[index].student].tests.items()
            }
            if alone != inside:
                keys = sorted(k for k in alone.keys() | inside.keys() if alone.get(k) != inside.get(k))
                differ.append(f"{sample[index].student}: {', '.join('/'.join(k) for k in keys[:3])}")
    return Check(
        "graded alone = graded in the class",
        not differ and bool(sample),
        "; ".join(differ) or f"{', '.join(s.student for s in sample)}: every test the same here alone",
    )


def _hostile(klass: Class, graded: dict[str, Graded]) -> list[Check]:
    rows, carry = [], None
    for student in klass.students:
        if not student.marker:
            continue
        result = graded.get(student.student)
        outside = _lost(result, HOSTILE, outside=True) if result else [("not graded", ())]
        if outside:
            rows.append(f"{student.kind}: lost {len(outside)} tests outside {HOSTILE}")
        if student.kind == "later student's scan" and result:
            message = next((test[3] for test in result.tests.values() if "CARRYOVER{" in test[3]), "")
            carry = hostile.carryover_report(message) if message else None
    evidence = "; ".join(rows) or f"the escape, the secret and the scan each cost their {HOSTILE} only"
    checks = [Check("hostile submissions cost only their own row", not rows, evidence)]
    if carry is None:
        checks.append(
            Check(
                "no earlier student's data reaches a later one",
                None,
                "the later student's scan gave no report (withheld by the bundle's output?)",
            )
        )
    else:
        seen = carry["probe"]["memory"] > 0 and carry["probe"]["files"] > 0
        found = carry["found"]["memory"] + carry["found"]["files"]
        checks.append(
            Check(
                "no earlier student's data reaches a later one",
                seen and not found if seen else None,
                f"the scan read {carry['mebibytes']} MiB and the files it could reach (its probe "
                f"{'found' if seen else 'NOT found: the scan proves nothing'}): the earlier "
                f"student's secret found {found} times",
            )
        )
    return checks


def _broken(klass: Class, graded: dict[str, Graded]) -> Check:
    """Broken files cost their own row: not graded, 0, with the reason (empty or unreadable: the bundle
    tells the student which in words, not by status)."""
    expected = [s for s in klass.students if s.status != "graded"]
    said = {s.kind: _said(graded.get(s.student)) for s in expected}
    wrong = [
        s.kind
        for s in expected
        if s.student not in graded
        or graded[s.student].total != 0.0
        or graded[s.student].status not in ("empty", "unreadable")
    ]
    return Check(
        "broken files: not graded, 0",
        not wrong,
        "; ".join(f"{kind}: {text}" for kind, text in said.items())
        + (f" (wrong: {', '.join(wrong)})" if wrong else ""),
    )


def _lms(klass: Class, out: Path, graded: dict[str, Graded], code: int) -> Check:
    """The LMS file's total for every student equals the gradebook's; nothing unplaced is silent."""
    if klass.roster is None:
        return Check(
            "LMS file = gradebook",
            None,
            "a Gradescope export: Gradescope holds the grades, no LMS file to compare",
        )
    path = out / f"{klass.layout}.csv"
    if code == UNPLACED or not path.is_file():
        said = (out / "summary.md").read_text().partition("## LMS gradebook")[2].strip()[:600]
        return Check(
            "LMS file = gradebook",
            False,
            f"{path.name} not written (grade-all exit {code}): {said or 'no account in summary.md'}",
        )
    with open(path, newline="") as file:
        lines = list(csv.reader(file))
    column = {
        line[1 if klass.layout == "canvas" else 0].removeprefix("Participant "): line[
            -1 if klass.layout == "canvas" else 4
        ]
        for line in lines[1:]
    }
    wrong = [
        f"{s.student}: LMS {column.get(s.user)!r}, gradebook {graded[s.student].total}"
        for s in klass.students
        if s.student in graded and not _same(column.get(s.user), graded[s.student].total)
    ]
    absent = column.get(str(int(klass.students[-1].user) + 1))
    if absent != "0":
        wrong.append(f"the student without a submission: {absent!r}, not 0")
    return Check(
        "LMS file = gradebook",
        not wrong,
        "; ".join(wrong[:5])
        or f"{len(klass.students)} totals in {path.name} equal the gradebook's, the student without a "
        "submission 0, the Test Student left out",
    )


def _same(cell: str | None, total: float | None) -> bool:
    return cell is not None and (cell == "" if total is None else cell != "" and float(cell) == total)


def _late(klass: Class, out: Path, deployment: Deployment, before: dict) -> Check:
    """The late round: a few resubmit; only they are graded again, and their new totals reach the LMS."""
    late = resubmit(klass)
    graded, code, stopped = _grade_class(klass, out, deployment)
    if stopped:
        return Check("late round: only what changed, into the LMS", False, stopped)
    changed = sorted(s for s, record in _state(out, deployment).items() if before.get(s) != record)
    expected = sorted(s.student for s in late)
    lms = _lms(klass, out, graded, code)
    regraded = f"graded again: {', '.join(changed) or 'none'} (resubmitted: {', '.join(expected)})"
    totals = [s.student for s in late if graded.get(s.student, Graded("", None)).total != s.total]
    ok = changed == expected and not totals and lms.passed is not False
    return Check(
        "late round: only what changed, into the LMS",
        ok,
        f"{regraded}; {'new totals ' + ('wrong: ' + ', '.join(totals) if totals else 'right')}; "
        f"LMS: {lms.evidence}",
    )


def _state(out: Path, deployment: Deployment) -> dict:
    if deployment.bundle:  # what was graded: results.json less its execution time
        return {
            path.name.removesuffix(RESULTS): {**json.loads(path.read_text()), "execution_time": 0}
            for path in out.glob(f"*{RESULTS}")
        }
    return json.loads((out / STATE).read_text()) if (out / STATE).is_file() else {}


def _workers(hosts: dict[str, dict], graded: dict[str, Graded], bundle: Path | None) -> Check:
    """Every host grades with the same salt, grader, pins and sandbox mode as this machine; a weaker
    mode anywhere (a host's, or a card's) fails, named with its host."""
    from ..sandbox.modes import ISOLATION

    here = probe()
    strength = list(ISOLATION)
    differ = [
        f"{host}: {what} {theirs[what]} (here {here[what]})"
        for host, theirs in hosts.items()
        for what in ("salt", "grader", "pins", "mode")
        if theirs[what] != here[what]
    ]
    weaker = sorted(
        {
            g.mode
            for g in graded.values()
            if g.mode and g.mode in strength and strength.index(g.mode) > strength.index(here["mode"])
        }
    )
    differ += (
        [f"cards graded in a weaker mode than here ({here['mode']}): {', '.join(weaker)}"] if weaker else []
    )
    if bundle:
        with zipfile.ZipFile(bundle) as archive:
            salt = fingerprint(archive.read("salt").decode().strip())
            pinned = pinned_versions(archive.read("constraints.txt").decode())
        differ += [f"the bundle's salt {salt} (here {here['salt']})"] if salt != here["salt"] else []
        differ += [
            f"the bundle pins {n} {v} (here {pins()[n]})"
            for n, v in pinned.items()
            if n in pins() and v != pins()[n]
        ]
    return Check(
        "workers agree: salt, grader, pins, sandbox mode",
        not differ,
        "; ".join(differ)
        or f"{len(hosts)} host(s) ({', '.join(hosts)}): salt {here['salt']}, grader {here['grader']}, "
        f"mode {here['mode']}",
    )


def _new(before: dict[str, dict], after: dict[str, dict], host: str, kind: str) -> list[str]:
    was = before.get(host, {}).get("leftovers", {}).get(kind, [])
    return [item for item in after[host]["leftovers"][kind] if item not in was]


def _clean(before: dict[str, dict], deployment: Deployment, marker: str) -> Check:
    """Nothing new left on any host it sees, twice SETTLE_SECONDS apart. A scratch folder on a host where
    another grading runs now may be that grading's: those are said, unseen, never passed nor failed."""
    time.sleep(SETTLE_SECONDS)
    first = _probes(deployment, marker)
    time.sleep(SETTLE_SECONDS)
    after = _probes(deployment, marker)
    left, doubtful = [], []
    for host, probed in after.items():
        for kind in probed["leftovers"]:
            items = [i for i in _new(before, after, host, kind) if i in _new(before, first, host, kind)]
            busy = probed["busy"] if kind == "scratch" else []
            if items:
                where = f" (gradings under way there: {', '.join(busy[:2])})" if busy else ""
                (doubtful if busy else left).append(f"{host}: {kind} {', '.join(items[:3])}{where}")
    seen = f"{len(after)} host(s) seen: {', '.join(after)}"
    if deployment.scheduler:
        seen += "; not seen: the scheduler's host and any host with no worker now"
    verdict = False if left else (None if doubtful else True)
    found = "; ".join(left + doubtful) or "no process, scratch folder, control group or SysV IPC object left"
    return Check("nothing left on the hosts", verdict, f"{found} ({seen})")


def _busy() -> list[str]:
    """Gradings under way on this host that are not this process's (nor its parents'): a process of the
    grader's that has a process under a child (an idle judge has its fork server alone)."""
    mine, pid = set(), os.getpid()
    while pid > 1:
        mine.add(pid)
        pid = int((_lines(Path(f"/proc/{pid}/stat")) or ["0 (x) x 0"])[0].rsplit(")", 1)[1].split()[1])
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        command = _command(entry)
        if (
            "grader" in command
            and int(entry.name) not in mine
            and any(_children(child) for child in _children(int(entry.name)))
        ):
            found.append(f"{entry.name} {command[:60]}")
    return found


def _command(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").glob("*")
        for child in " ".join(_lines(task / "children")).split()
    ]


def machine_cpu() -> float:
    """CPU seconds this machine has spent busy since boot, all processes (/proc/stat): a grading's
    processes are reaped by others (the judge's fork server), so no rusage of ours counts them."""
    fields = [int(x) for x in _lines(Path("/proc/stat"))[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def _timing(submissions: int, wall: float, cpu: float | None, where: str) -> Check:
    """The time per submission, and the projection for PROJECTED class sizes on this deployment."""
    per = wall / max(1, submissions)
    spent = (
        f"{cpu / submissions:.1f} s of this machine's CPU (all its load)"
        if cpu is not None
        else "CPU not measured (spent on the cluster's hosts)"
    )
    lines = [
        f"{submissions} submissions in {wall:.0f} s ({where}): {per:.1f} s of wall time and {spent} per "
        "submission",
        *(f"a class of {n}: about {n * per / 60:.0f} min" for n in PROJECTED),
    ]
    return Check("time per submission", True, "; ".join(lines))


def rehearse_class(klass: Class, out: Path, deployment: Deployment) -> list[Check]:
    """Grade `klass` through the deployment into out/grades, then its late round; every check."""
    grades = out / "grades"
    shutil.rmtree(grades, ignore_errors=True)  # a rehearsal grades everything: its figures are the class's
    marker = next((s.marker for s in klass.students if s.kind == "escaping processes"), "")
    before = _probes(deployment, marker)
    cpu, start = machine_cpu(), time.monotonic()
    graded, code, stopped = _grade_class(klass, grades, deployment)
    wall, here_cpu = time.monotonic() - start, machine_cpu() - cpu
    checks = [Check("class graded through the deployment", not stopped, stopped or f"{len(graded)} students")]
    hosts = _probes(deployment, marker)
    checks.append(_workers(hosts, graded, deployment.bundle))
    if not stopped:
        checks += [
            _correct(klass, graded),
            _bugs(klass, graded),
            _alone(klass, graded),
            *_hostile(klass, graded),
            _broken(klass, graded),
            _lms(klass, grades, graded, code),
            _late(klass, grades, deployment, _state(grades, deployment)),
            _timing(
                len(klass.students), wall, None if deployment.scheduler else here_cpu, _where(deployment)
            ),
        ]
    checks.append(_clean(before, deployment, marker))
    return checks


def _where(deployment: Deployment) -> str:
    if deployment.bundle:
        return "the Gradescope bundle, one submission at a time"
    return f"on {deployment.scheduler}" if deployment.scheduler else f"{deployment.workers} at a time here"


def table(checks: list[Check]) -> str:
    """The checks as a Markdown table: each one's verdict and its evidence."""
    rows = [f"| {c.name} | {c.verdict} | {c.evidence.replace('|', '/')} |" for c in checks]
    return "\n".join(["| check | verdict | evidence |", "| --- | --- | --- |", *rows])


def rehearse(
    out: Path,
    deployment: Deployment,
    *,
    layout: str = LAYOUTS[0],
    quick: bool = False,
    size: int | None = None,
) -> list[Check]:
    """Build the class in `out`, grade and check it; write out/rehearsal.md. The checks, in order."""
    out = Path(out)
    klass = build(out, layout, quick=quick, size=size)
    checks = rehearse_class(klass, out, deployment)
    write_atomic(
        out / "rehearsal.md",
        f"# Rehearsal: {len(klass.students)} students, {layout} export, graded {_where(deployment)}\n\n"
        f"{table(checks)}\n",
    )
    return checks
