"""A class's submissions, one per student or group, from a folder or from the zip an LMS exports.

SUBMISSIONS is a folder, or a zip of one (unpacked into a scratch folder first). In it:

- Gradescope's "Download submissions" export: `submission_metadata.yml` maps each submission
  folder (`submission_123456`) to its `:submitters`; a group's submission is graded once and is a
  row for each member. A student is their `:sid`, else their `:email`, else their `:name`.
- Canvas's "Download submissions": flat files named `name_[LATE_]userid_fileid_file` (`late_` or
  `LATE_`: any case; a resubmission adds `-N` before the extension; the second number is the id of
  the uploaded file, newer uploads higher). A student's files are gathered in a folder under their
  own names, the newest upload of each name winning (by id, as numbers: never by name order, where
  `9999` sorts after `10000`); the student is `name_userid`.
- Moodle's "Download all submissions": per student a folder `Full Name_PARTICIPANT_assignsubmission_file_`
  (Moodle 4.1 on: without the last `_`), or flat files `Full Name_PARTICIPANT_assignsubmission_file_NAME`
  where "Download submissions in folders" is off; PARTICIPANT is the number the grading worksheet calls
  `Participant N`. Other plugins' entries (`assignsubmission_onlinetext`) are left out; the student is
  `Full_Name_PARTICIPANT`.
- anything else: each entry is one student's submission, named after it (`alice/`, `alice.zip`,
  `alice.ipynb`).

A folder (or zip) holding a single folder (`assignment_123_export/`) is looked into. Hidden entries
(`.git`, `.DS_Store`), `__MACOSX` and `__pycache__` are left out. Only file names and metadata are
read here: whether a submission can be graded is for `grader grade` to say. An entry of an export's
zip larger than one submission's cap is not unpacked: it costs its student's row (`unreadable`,
saying the cap), never the class.

Each submission knows, for an LMS export, the name its feedback must have for the LMS's bulk upload
to file it with the student (`handback`): Canvas files a comment by the first two numbers of its name
(`name_userid_fileid_...`: the user, and one of their submission's files), Moodle by the folder
name of the download (`Full Name_PARTICIPANT_assignsubmission_file_/...`).
"""
import dataclasses
import re
import shutil
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..archive import ArchiveError, safe_extract
from ..submission import MAX_ZIP_BYTES, MODULES

METADATA = "submission_metadata.yml"
MAX_METADATA_BYTES = 32 << 20
"""A class of thousands takes a few MB; larger is refused before it is parsed."""
MAX_ALIASES = 100
"""YAML aliases (`*name`) the metadata may use: a few at most in an export; a billion-laughs file
nests them to expand to gigabytes."""
_CANVAS = re.compile(r"^(?P<name>[^_]+)_(?i:late_)?(?P<user>\d+)_(?P<upload>\d+)_(?P<file>.+)$")
_MOODLE = re.compile(r"^(?P<name>[^_/]+)_(?P<participant>\d+)_assignsubmission_(?P<plugin>[a-z]+)"
                     r"(?:_(?P<file>.*))?$")
MOODLE_FILES = "file"
"""The Moodle submission plugin whose entries are the student's files (others: online text, comments)."""
MOODLE_PARTICIPANT = "Participant "
"""How Moodle's grading worksheet writes a participant's number (its Identifier: "Participant 12345")."""
_RESUBMISSION = re.compile(r"-\d+(?=\.\w+$)")
_LEFT_OUT = ("__MACOSX", "__pycache__")
EXPORT_FILES = 200_000
"""The most files an export's zip may hold (a class of 1,000 submitting a hundred files each)."""


class ClassError(ValueError):
    """SUBMISSIONS cannot be read as a class (as opposed to one bad submission in it)."""


@dataclass(frozen=True)
class Submission:
    """What one student (or a group) submitted: a folder, a zip or a notebook. `keys`: per student,
    what else an LMS knows them by (Canvas' user id; Gradescope's sid, email and name)."""

    students: tuple[str, ...]
    source: Path
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)
    problem: str = ""  # why it cannot be graded (the metadata names a folder outside the export)
    notes: tuple[str, ...] = field(default=(), compare=False)
    """What the instructor should know of how it was put together (files of several uploads merged)."""
    handback: str = field(default="", compare=False)
    """The path its feedback page takes in the LMS's bulk feedback upload ("" where there is none)."""


def student_id(text: str) -> str:
    """An id that is also a safe file name: letters, digits and `.`, `_`, `-`, `@`, `+`."""
    return re.sub(r"[^\w.@+-]", "_", text.strip()).lstrip(".") or "_"


def discover(path: Path, scratch: Path, skip: Path | None = None) -> list[Submission]:
    """The submissions in `path` (a folder or a zip), sorted by student; `skip` is left out (the
    output folder, when it lies inside). Zips are unpacked, Canvas files gathered, into `scratch`."""
    path = Path(path)
    too_large: dict[Path, str] = {}
    if path.is_file() and zipfile.is_zipfile(path):
        root, too_large = _extract(path, Path(scratch) / "export")
    elif path.is_dir():
        root = path
    else:
        raise ClassError(f"{path} is neither a folder of submissions nor a zip of one")
    root = _look_into(root, skip)
    if _holds_exercises(root):
        raise ClassError(f"{path} holds exercise files itself: it is one submission (grader grade {path})")
    metadata = root / METADATA
    if metadata.is_file():
        found = _gradescope(root, metadata)
    else:
        found = _entries(root, Path(scratch) / "lms", skip, too_large)
    if not found:
        raise ClassError(f"{path} holds no submission")
    _refuse_duplicates(found)
    found = [_oversized(submission, too_large) for submission in found]
    return sorted(found, key=lambda submission: submission.students)


def _oversized(submission: Submission, too_large: dict[Path, str]) -> Submission:
    """The submission, unreadable if one of its files was too large to unpack (said once, with the cap)."""
    why = _too_large([submission.source], too_large)
    return dataclasses.replace(submission, problem=why) if why and not submission.problem else submission


def _too_large(paths: list[Path], too_large: dict[Path, str]) -> str:
    """Why one of `paths` (files, or folders holding them) was not unpacked; "" if none was left out."""
    for path in paths:
        path = path.resolve()
        for where, why in too_large.items():
            if where.is_relative_to(path):
                return why
    return ""


def _visible(entries: list[Path], skip: Path | None) -> list[Path]:
    skipped = skip.resolve() if skip else None
    return sorted(entry for entry in entries if not entry.name.startswith(".") and entry.name not in _LEFT_OUT
                  and entry.resolve() != skipped)


def _holds_exercises(folder: Path) -> bool:
    return any((folder / f"{name}.py").is_file() for name in MODULES)


def _look_into(root: Path, skip: Path | None) -> Path:
    """Go down through folders that hold only one folder (an export's `assignment_123_export/`)."""
    while not (root / METADATA).is_file() and not _holds_exercises(root):
        entries = _visible(list(root.iterdir()), skip)
        if len(entries) != 1 or not entries[0].is_dir() or _holds_exercises(entries[0]):
            break
        root = entries[0]
    return root


def _extract(path: Path, target: Path) -> tuple[Path, dict[Path, str]]:
    """An export's zip, capped per file at one submission's cap (submission.MAX_ZIP_BYTES), and in
    all at that cap times its number of files; and each entry left out for being larger than that
    cap or broken (an empty file stands in its place, so that its name still says whose it is) -> why. A
    student's own zip inside is capped again when it is graded, so a zip bomb a student uploaded, or
    a file too large, costs that student's row only."""
    skipped: dict[str, str] = {}
    try:
        safe_extract(path, target, 0, EXPORT_FILES, bytes_per_file=MAX_ZIP_BYTES, skipped=skipped)
    except ArchiveError as error:
        raise ClassError(f"cannot unpack {path}: {error}") from error
    too_large = {}
    for name, why in skipped.items():
        stand_in = target / name
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.touch()
        too_large[stand_in.resolve()] = f"{PurePosixPath(name).name} {why}: not read"
    return target, too_large


def _text(value: object) -> str:
    """A field's text; "" for anything but a string or a number (never the text of a list: aliases
    make a few lines of YAML a list of billions)."""
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""


def _submitter(record: object) -> str:
    """A submitter's id: their sid, else their email, else their name ("" if none is text)."""
    if not isinstance(record, dict):
        return ""
    return next((text for name in ("sid", "email", "name") if (text := _text(_field(record, name)))), "")


def _field(record: dict, name: str) -> object:
    """A Gradescope metadata field: keys are Ruby symbols (`:sid`), plain names accepted too."""
    return record.get(f":{name}", record.get(name))


def _read_metadata(metadata: Path) -> object:
    """The metadata YAML, parsed safely (no Python objects) with its size and aliases bounded."""
    import yaml  # PyYAML: dask's dependency, so in the `instructor` extra

    class Loader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: object, index: object) -> object:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise ClassError(f"{metadata} uses more than {MAX_ALIASES} YAML aliases: not read")
            return super().compose_node(parent, index)

    if metadata.stat().st_size > MAX_METADATA_BYTES:
        raise ClassError(f"{metadata} is larger than {MAX_METADATA_BYTES >> 20} MiB: not read")
    try:
        return yaml.load(metadata.read_text(), Loader=Loader)  # a SafeLoader: data only, no Python objects
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as error:
        raise ClassError(f"{metadata} is not readable: {error}") from error


def _gradescope(root: Path, metadata: Path) -> list[Submission]:
    records = _read_metadata(metadata)
    if not isinstance(records, dict):
        raise ClassError(f"{metadata} does not map submission folders to their submitters")
    found = []
    for folder, record in records.items():
        submitters = _field(record, "submitters") if isinstance(record, dict) else None
        submitters = submitters if isinstance(submitters, list) else []
        known = {student_id(text): tuple(value for name in ("sid", "email", "name")
                                         if (value := _text(_field(s, name))))
                 for s in submitters if (text := _submitter(s))}
        source = root / str(folder)
        inside = source.resolve().is_relative_to(root.resolve()) and source.resolve() != root.resolve()
        problem = "" if inside else f"{METADATA} names {str(folder)!r}, outside the export: not read"
        found.append(Submission(tuple(known) or (student_id(str(folder)),), source, known, problem))
    return found


def _entries(root: Path, gathered: Path, skip: Path | None, too_large: dict[Path, str]) -> list[Submission]:
    found, canvas, moodle = [], defaultdict(list), defaultdict(list)
    for entry in _visible(list(root.iterdir()), skip):
        if entry.is_file() and (match := _CANVAS.match(entry.name)):
            canvas[match["name"], match["user"]].append((entry, match["file"], int(match["upload"])))
        elif match := _MOODLE.match(entry.name):
            moodle[match["name"], match["participant"]].append((entry, match))
        else:
            found.append(Submission((student_id(entry.name if entry.is_dir() else entry.stem),), entry))
    found += [_canvas(name, user, files, gathered, too_large) for (name, user), files in canvas.items()]
    found += [_moodle(name, participant, entries, gathered, too_large)
              for (name, participant), entries in moodle.items()]
    return found


def _canvas(name: str, user: str, files: list[tuple[Path, str, int]], gathered: Path,
            too_large: dict[Path, str]) -> Submission:
    """A Canvas student's submission: of each file name, their newest upload (highest file id)."""
    student = student_id(f"{name}_{user}")
    newest: dict[str, tuple[Path, int]] = {}
    for path, original, upload in sorted(files, key=lambda file: file[2]):
        newest[student_id(_RESUBMISSION.sub("", original))] = (path, upload)
    uploads = sorted({upload for _, _, upload in files})
    notes = ()
    if len(uploads) > 1:
        kept = ", ".join(f"{kept} from {upload}" for kept, (_, upload) in sorted(newest.items()))
        notes = (f"files of {len(uploads)} uploads ({', '.join(map(str, uploads))}) merged, the newest "
                 f"of each name kept: {kept}",)
    chosen = {kept: path for kept, (path, _) in newest.items()}
    problem = _too_large([path for path, _, _ in files], too_large)
    handback = f"{name}_{user}_{max(uploads)}_feedback.html"
    return Submission((student,), _gather(student, chosen, gathered), {student: (user,)}, problem, notes,
                      handback)


def _moodle(name: str, participant: str, entries: list[tuple[Path, re.Match]], gathered: Path,
            too_large: dict[Path, str]) -> Submission:
    """A Moodle participant's submission: the files of their `assignsubmission_file` entries."""
    student = student_id(f"{name}_{participant}")
    chosen: dict[str, Path] = {}
    for entry, match in entries:
        if match["plugin"] != MOODLE_FILES:
            continue
        if entry.is_dir():
            chosen.update({"/".join(map(student_id, path.relative_to(entry).parts)): path
                           for path in sorted(entry.rglob("*")) if path.is_file() and not path.is_symlink()})
        elif match["file"]:
            chosen[student_id(match["file"])] = entry
    folder = f"{name}_{participant}_assignsubmission_{MOODLE_FILES}_"
    keys = {student: (f"{MOODLE_PARTICIPANT}{participant}",)}
    problem = _too_large([entry for entry, _ in entries], too_large)
    return Submission((student,), _gather(student, chosen, gathered), keys, problem,
                      handback=f"{folder}/feedback.html")


def _gather(student: str, files: dict[str, Path], gathered: Path) -> Path:
    """A student's submission from an LMS's flat files: their one zip or notebook as it is, else a
    folder of their files under the names they gave them (made safe: `..` or `.` would be the folder
    itself); an empty folder for none."""
    if len(files) == 1 and (only := next(iter(files.values()))).suffix in (".zip", ".ipynb"):
        return only
    folder = gathered / student
    folder.mkdir(parents=True)
    for name, path in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / name)
    return folder


def _refuse_duplicates(found: list[Submission]) -> None:
    counts = Counter(student for submission in found for student in submission.students)
    twice = sorted(student for student, n in counts.items() if n > 1)
    if twice:
        where = {student: [s.source.name for s in found if student in s.students] for student in twice}
        listed = "; ".join(f"{student}: {', '.join(sources)}" for student, sources in where.items())
        raise ClassError(f"students with more than one submission (keep one each): {listed}")
