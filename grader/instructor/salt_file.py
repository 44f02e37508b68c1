"""`grader salt show|export FILE|restore FILE`: keep the deployment's salt (grader/salt.py).

The salt decides every hidden input. A fresh clone or install has none and makes a new one at its
first grading, silently: the hidden inputs change, and so does grader_version, so grade-all
regrades everyone and a regrade request no longer reproduces the grade a student got. Export it once
(to where you keep secrets), and restore it on any machine that grades. `show` prints where the
salt comes from and a fingerprint (a hash prefix: two machines with the same fingerprint draw the
same inputs), never the salt itself.
"""
import hashlib
import os
import re
from pathlib import Path

from ..salt import SALT_VARIABLE, SaltUnavailable, deployment_salt
from ..secret import SALT_FILE

_VALID = re.compile(r"[\x21-\x7e]{16,256}")  # printable, no space: what GRADER_SALT or a file can hold


class SaltError(ValueError):
    """The salt cannot be exported or restored as asked."""


def fingerprint(salt: str) -> str:
    return hashlib.sha256(salt.encode()).hexdigest()[:12]


def show(path: Path = SALT_FILE) -> str:
    """Where this deployment's salt comes from, and its fingerprint (nothing is created)."""
    if os.environ.get(SALT_VARIABLE):
        return f"salt: from ${SALT_VARIABLE}, fingerprint {fingerprint(os.environ[SALT_VARIABLE])}"
    if not path.is_file():
        return (f"salt: none yet at {path}: the first grading makes a new one (restore yours first: "
                "grader salt restore FILE)")
    return f"salt: {path}, fingerprint {fingerprint(path.read_text().strip())}"


def export(target: Path, path: Path = SALT_FILE) -> str:
    """Write the salt (made now if there is none) to `target`, readable by its owner only."""
    try:
        salt = deployment_salt(path)
    except SaltUnavailable as error:
        raise SaltError(str(error)) from error
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SaltError(f"{target} exists: choose a new file") from None
    with os.fdopen(descriptor, "w") as file:
        file.write(salt + "\n")
    return f"wrote the salt (fingerprint {fingerprint(salt)}) to {target}: keep it as private as solutions/"


def restore(source: Path, path: Path = SALT_FILE, force: bool = False) -> str:
    """Make the salt in `source` this deployment's; a different salt already here only with `force`."""
    try:
        salt = Path(source).read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise SaltError(f"cannot read {source}: {error}") from error
    if not _VALID.fullmatch(salt):
        raise SaltError(f"{source} holds no salt (one line of 16 to 256 printable characters, no space)")
    if path.is_file():
        current = path.read_text().strip()
        if current == salt:
            return f"the salt is already {path} (fingerprint {fingerprint(salt)})"
        if not force:
            raise SaltError(f"{path} holds another salt (fingerprint {fingerprint(current)}): replacing it "
                            "changes every hidden input and regrades every student; --force replaces it")
    new = path.with_name(f".{path.name}.new")
    new.unlink(missing_ok=True)
    descriptor = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(salt + "\n")
    os.replace(new, path)
    note = f" (${SALT_VARIABLE} is set and overrides it)" if os.environ.get(SALT_VARIABLE) else ""
    return f"restored the salt (fingerprint {fingerprint(salt)}) to {path}{note}"
