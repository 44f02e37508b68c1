"""Every zip the grader reads or writes: extraction with caps, and zips that depend on content only.

A zip comes from a student or an LMS, so extraction trusts nothing in it: entries that would land
outside the target, links and special files are refused or left out, and the total size and file
count are capped twice, by what the entries declare before anything is written and by what is
really written (a forged header cannot make the writing go further).
"""
import io
import stat
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path

FIXED_TIME = (1980, 1, 1, 0, 0, 0)
"""Every entry's date in the zips the grader writes: the same files give the same bytes (and hash)."""
_CHUNK = 1 << 20


class ArchiveError(ValueError):
    """A zip that cannot be read, or that breaks a cap or escapes its folder."""


def _regular(member: zipfile.ZipInfo) -> bool:
    """A plain file: not a folder, and not a link or special file (as a Unix zip records them)."""
    kind = stat.S_IFMT(member.external_attr >> 16)  # 0 where the zip recorded no file type
    return not member.is_dir() and kind in (0, stat.S_IFREG)


def safe_extract(archive: Path, target: Path, max_bytes: int, max_files: int,
                 bytes_per_file: int | None = None, skipped: dict[str, str] | None = None) -> list[str]:
    """Extract the plain files of `archive` into `target`; the names of entries left out (links,
    special files). ArchiveError if it is not a readable zip, an entry would land outside `target`,
    or it holds more than `max_files` files or `max_bytes` bytes (`bytes_per_file` times its number
    of files, where that is given, is the cap instead, and no file may be larger). Given `skipped`
    (with `bytes_per_file`: an LMS export, each entry a student's), an entry larger than the cap, or
    that cannot be unpacked, is not written (nothing of it is left) but recorded there, name -> why:
    one entry costs its own student, never the rest."""
    target = Path(target).resolve()
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for member in members:  # Windows PowerShell 5.1's Compress-Archive writes `\` (APPNOTE: `/`)
                member.filename = member.filename.replace("\\", "/")
            files = [m for m in members if _regular(m)]
            if len(files) > max_files:
                raise ArchiveError(f"{Path(archive).name} holds more than {max_files} files")
            if bytes_per_file is not None:
                for member in [m for m in files if m.file_size > bytes_per_file]:
                    if skipped is None:
                        raise ArchiveError(f"its entry {member.filename!r} unpacks to more than "
                                           f"{_size(bytes_per_file)}")
                    skipped[member.filename] = f"is larger than the cap of {_size(bytes_per_file)} for one " \
                                               "file"
                    files.remove(member)
                max_bytes = bytes_per_file * max(1, len(files))
            if sum(m.file_size for m in files) > max_bytes:
                raise ArchiveError(f"{Path(archive).name} unpacks to more than {_size(max_bytes)}")
            for member in members:
                if not (target / member.filename).resolve().is_relative_to(target):
                    raise ArchiveError(f"{Path(archive).name} has an entry outside its folder: "
                                       f"{member.filename!r}")
            budget = max_bytes
            for member in files:
                if skipped is None:
                    budget -= _copy(zf, member, target / member.filename, budget)
                else:
                    _copy_or_skip(zf, member, target / member.filename, min(budget, bytes_per_file), skipped)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError, zlib.error,
            RuntimeError) as error:  # zlib: a corrupt deflate stream; RuntimeError: an encrypted entry
        raise ArchiveError(f"cannot unpack {Path(archive).name}: {error}") from error
    return [m.filename for m in members if not m.is_dir() and not _regular(m)]


def _copy_or_skip(zf: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path, budget: int,
                  skipped: dict[str, str]) -> None:
    """Write one entry; if it breaks (more bytes than its cap, a corrupt stream), remove what was
    written and record why in `skipped`."""
    try:
        _copy(zf, member, path, budget)
    except (ArchiveError, zipfile.BadZipFile, zlib.error, EOFError, RuntimeError,
            NotImplementedError) as error:
        path.unlink(missing_ok=True)
        skipped[member.filename] = f"cannot be unpacked ({error})"


def _copy(zf: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path, budget: int) -> int:
    """Write one entry, never more than `budget` bytes; the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with zf.open(member) as source, open(path, "wb") as out:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            if written > budget:
                raise ArchiveError(f"{member.filename!r} unpacks to more than it declares")
            out.write(chunk)
    return written


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def deterministic_zip(files: Iterable[tuple[str, bytes]], executable: Iterable[str] = ()) -> bytes:
    """A zip of (name, bytes) pairs, in the order given, with fixed dates and modes (0644, or 0755
    for the names in `executable`): the same files always give the same bytes."""
    executable = set(executable)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            entry = zipfile.ZipInfo(name, FIXED_TIME)
            entry.external_attr = (0o100755 if name in executable else 0o100644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    return buffer.getvalue()


def folder_files(folder: Path, prefix: str = "", max_bytes: int | None = None) -> list[tuple[str, bytes]]:
    """The plain files under `folder` as (name, bytes), sorted, without links (following one would
    read outside the folder), special files (never opened) and __pycache__; names start with
    `prefix`. ArchiveError, before reading past it, if they hold more than `max_bytes`."""
    found, size = [], 0
    for path in sorted(Path(folder).rglob("*")):
        relative = path.relative_to(folder)
        if path.is_symlink() or "__pycache__" in relative.parts or not path.is_file():
            continue
        if any(parent.is_symlink() for parent in path.parents if parent.is_relative_to(folder)):
            continue
        size += path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise ArchiveError(f"holds more than {_size(max_bytes)}")
        found.append((prefix + relative.as_posix(), path.read_bytes()))
    return found

