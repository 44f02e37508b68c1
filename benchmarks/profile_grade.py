"""Where a grade's CPU goes: the judge's process and the worker's, by activity, per component.

CPU seconds, not wall time (the machine may be shared), each also as a ratio to the CPU of
`python -c "import torch, numpy, hypothesis"` measured in the same run:

- imports: that baseline; the judge's own imports (grader, suites, reference); torch._dynamo,
  which the first optimizer step would import in each process that trains (grader/sandbox/worker/eager.py
  spares it); a sandbox's first worker, its template launched (an interpreter that imports torch:
  a judge that has read the salt or a hidden test) or forked from the judge (as a grading's is), and
  each further worker, forked from the template;
- the judge's side of `judge()` on a submission, sampled on its CPU clock (ITIMER_PROF) and
  attributed to the innermost frame of a known kind: the reference's code (training runs apart),
  the protocol's encoding and decoding, hypothesis's engine (generation, shrinking, bookkeeping),
  the suites' own code (their torch computations), the judge and the sandbox client;
- the worker's side, per component, from /proc (its protocol share estimated by decoding and
  re-encoding every message the judge exchanged with it), and the number of round trips.

    python benchmarks/profile_grade.py [SUBMISSION] [--public] [--only A,B]
"""
import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "import torch, numpy, hypothesis"
SAMPLE_SECONDS = 0.002
KINDS = (  # (kind, path fragment, function names or None for any): innermost match wins
    ("reference: training runs", "/solutions/trainer.py", {"train"}),
    ("reference: training runs", "/suites/hidden/trainer.py", {"_variant_train"}),
    ("reference: other computations", "/solutions/", None),
    ("protocol: encode/decode", "/sandbox/worker/protocol.py", {"encode", "decode"}),
    ("suites: task data", "/grader/tasks.py", None),
    ("suites: checks and twins", "/grader/suites/", None),
    ("hypothesis: generation, shrinking, engine", "/hypothesis/", None),
    ("sandbox client and student proxy", "/grader/sandbox/", None),
    ("sandbox client and student proxy", "/grader/student.py", None),
    ("judge", "/grader/", None),
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command_cpu(*command: str) -> float:
    """CPU seconds of one command and every process it waited for."""
    before = _children_cpu()
    subprocess.run(command, check=True, capture_output=True)
    return _children_cpu() - before


def python_cpu(code: str) -> float:
    return command_cpu(sys.executable, "-c", code)


def _kind(frame) -> str:
    while frame is not None:
        path, name = frame.f_code.co_filename, frame.f_code.co_name
        for kind, fragment, names in KINDS:
            if fragment in path and (names is None or name in names):
                return kind
        frame = frame.f_back
    return "other"


class Sampler:
    """Samples the main thread's stack every SAMPLE_SECONDS of this process's CPU time, and charges
    the CPU time since the last sample to it (a signal waits for a long C call to return: the
    call's own frame then gets the time)."""

    def __init__(self):
        self.seconds: Counter[str] = Counter()
        self.last = time.process_time()

    def _sample(self, _signal: int, frame) -> None:
        now = time.process_time()
        self.seconds[_kind(frame)] += now - self.last
        self.last = now

    def __enter__(self) -> "Sampler":
        self.last = time.process_time()
        signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, SAMPLE_SECONDS, SAMPLE_SECONDS)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live descendants, and of those they reaped, from /proc."""
    total, ticks = 0.0, os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += sum(map(int, fields[11:15])) / ticks  # utime, stime, cutime, cstime
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            total += tree_cpu(int(child))
    except (OSError, ValueError):
        pass
    return total


class WorkerClock:
    """The worker's CPU per component: its tree's CPU read after each case (a replaced worker's
    last reading is kept)."""

    def __init__(self, sandbox):
        self.sandbox, self.pid, self.last, self.done = sandbox, None, 0.0, 0.0
        self.by_component: dict[str, float] = defaultdict(float)

    def read(self) -> float:
        pid = _tree_root(self.sandbox)
        if pid != self.pid:
            self.done, self.pid, self.last = self.done + self.last, pid, 0.0
        if pid is not None:
            self.last = max(self.last, tree_cpu(pid))
        return self.done + self.last


def _tree_root(sandbox) -> int | None:
    """The process whose tree holds the sandbox's workers: their template (it reaps them: their CPU
    stays in its count), or the worker itself where workers are not forked."""
    if sandbox.template is not None:
        return sandbox.template.process.pid
    return sandbox.worker.pid if sandbox.worker is not None else None


def record_messages(messages: list) -> None:
    """Keep every message the judge sends or receives (to time the worker's side of them later)."""
    from grader.sandbox.channel import Channel, PollChannel

    for kind in (Channel, PollChannel):
        def sending(channel, value, deadline, send=kind.send):
            messages.append(value)
            return send(channel, value, deadline)

        def receiving(channel, deadline, receive=kind.receive):
            value = receive(channel, deadline)
            messages.append(value)
            return value

        kind.send, kind.receive = sending, receiving


def worker_protocol_cpu(messages: list) -> float:
    """CPU seconds the worker spends on these messages: decoding the requests, encoding the replies."""
    from grader.sandbox.worker.protocol import decode, encode

    bodies = [bytearray(encode(m)[8:]) for m in messages]
    start = time.process_time()
    for body in bodies:
        encode(decode(body))
    return (time.process_time() - start) / 2  # each message is both decoded and encoded here


def judge_profile(submission: Path, public_only: bool, components: tuple[str, ...]) -> dict:
    """Grade in this process: the judge's CPU by kind, the worker's by component, round trips."""
    from grader.judge import judge
    from grader.sandbox.client import Sandbox
    from grader.suites import all_cases

    messages: list = []
    record_messages(messages)
    worker_cpu: dict[str, float] = defaultdict(float)
    judge_cpu: dict[str, float] = defaultdict(float)
    cases: dict[str, tuple[float, float, int]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        sandbox = Sandbox(submission, Path(scratch))
        sandbox.start()  # before anything hidden is loaded, as grading.grade: its template forked
        all_cases(public_only)  # imported here, not in the first case's time
        clock = WorkerClock(sandbox)
        marks = [clock.read(), time.process_time(), 0]

        def on_result(result) -> None:
            now = [clock.read(), time.process_time(), len(messages)]
            worker_cpu[result.component] += now[0] - marks[0]
            judge_cpu[result.component] += now[1] - marks[1]
            cases[f"{result.component}.{result.name}"] = (now[1] - marks[1], now[0] - marks[0],
                                                          (now[2] - marks[2]) // 2)
            marks[:] = now

        start = time.process_time()
        with Sampler() as sampler:
            results = judge(submission, public_only=public_only, components=components, sandbox=sandbox,
                            on_result=on_result)
        judge_total = time.process_time() - start
    score = sum(r.score for r in results)
    return {"judge": judge_total, "samples": sampler.seconds, "worker": dict(worker_cpu),
            "judge_by_component": dict(judge_cpu), "cases": cases, "messages": messages, "score": score,
            "worker_total": clock.read(),
            "max": sum(r.max_score for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", nargs="?", default=str(ROOT / "solutions"))
    parser.add_argument("--public", action="store_true", help="the public cases only (`grader check`)")
    parser.add_argument("--only", help="components, comma-separated (default: all)")
    parser.add_argument("--cases", type=int, default=0, metavar="N", help="also list the N costliest cases")
    args = parser.parse_args()
    from grader.spec import COMPONENTS

    components = tuple(args.only.split(",")) if args.only else COMPONENTS
    baseline = python_cpu(BASELINE)
    rows = {"import torch, numpy, hypothesis (the unit)": baseline,
            "judge's imports beyond it (grader, suites, reference)":
                python_cpu(f"{BASELINE}; import grader.judge; "
                           "from grader.suites import all_cases; all_cases(); import solutions.trainer")
                - baseline,
            "torch._dynamo, per process that trains (now saved: sandbox/worker/eager.py)":
                python_cpu("import torch._dynamo") - python_cpu("import torch")}
    from grader.sandbox.client import Sandbox

    further = {}
    for kind in ("launched", "forked from the judge"):  # torch imported between: then the judge forks it
        with tempfile.TemporaryDirectory() as scratch:  # the worker's tree, read from /proc: a worker killed
            box = Sandbox(Path(args.submission), Path(scratch))  # in its PID namespace is not waited for
            box.ready()
            started = tree_cpu(_tree_root(box))
            rows[f"first worker, template {kind}"] = started
            if box.template is not None:
                box.fresh_worker()
                box.ready()
                further["each further worker, forked from the template"] = tree_cpu(_tree_root(box)) - started
            box.close()
        import torch  # noqa: F401
    rows |= further
    profile = judge_profile(Path(args.submission), args.public, components)
    worker_total = profile["worker_total"]
    print(f"{'':<56} {'CPU s':>6} {'x import':>8}")
    for label, seconds in rows.items():
        print(f"{label:<56} {seconds:6.2f} {seconds / baseline:8.2f}")
    print(f"\njudge's side of judge() (imports done): {profile['judge']:.2f} s, "
          f"{profile['judge'] / baseline:.2f}x; by kind (sampled):")
    for kind, seconds in profile["samples"].most_common():
        print(f"  {kind:<54} {seconds:6.2f} {seconds / baseline:8.2f}")
    print(f"\nworker processes during judge() (start-ups included): {worker_total:.2f} s, "
          f"{worker_total / baseline:.2f}x")
    protocol = worker_protocol_cpu(profile["messages"])
    print(f"  protocol (estimated: the same messages decoded and encoded again) {protocol:6.2f}")
    print(f"  round trips: {len(profile['messages']) // 2}")
    print(f"\n{'component':<14} {'judge s':>8} {'worker s':>9}")
    for component, seconds in profile["judge_by_component"].items():
        print(f"{component:<14} {seconds:8.2f} {profile['worker'].get(component, 0.0):9.2f}")
    if args.cases:
        print(f"\n{'case':<50} {'judge s':>8} {'worker s':>9} {'round trips':>12}")
        costliest = sorted(profile["cases"].items(), key=lambda item: -sum(item[1][:2]))[:args.cases]
        for name, (judge_s, worker_s, trips) in costliest:
            print(f"{name:<50} {judge_s:8.2f} {worker_s:9.2f} {trips:12d}")
    print(f"\nscore {profile['score']:g} / {profile['max']:g}")


if __name__ == "__main__":
    main()
