"""The deployment's secret salt: what makes the hidden tests' inputs unpredictable.

Each case draws its examples from a seed made of a salt, its component and its name. Hidden
cases use the deployment's salt: the same submission gets the same examples, and so the same
score, every time one deployment grades it, but a student, who has no salt, cannot know them.
Public cases use a public salt, so `grader check` is the same everywhere. Seeding from the name,
not from the test's source (hypothesis's derandomize), also keeps a case's examples when its
code is edited.

The salt is SALT_FILE, inside the hidden suites (which the student release leaves out),
generated at first use; GRADER_SALT in the environment overrides it (the project's own tests
pin it, so that their catches do not depend on one machine's salt).
"""
import hashlib
import os
import secrets
import tempfile
from pathlib import Path

from .secret import SALT_FILE

SALT_VARIABLE = "GRADER_SALT"
PUBLIC_SALT = "public"


_read_here = False
"""True once this process has read the salt: a fork of it (a sandbox's template) could then hold it."""


def read_here() -> bool:
    """Whether this process has read the deployment's salt (sandbox/template_client.forks_template asks)."""
    return _read_here


class SaltUnavailable(RuntimeError):
    """There is no salt, and none can be made here (a read-only install without GRADER_SALT)."""


def deployment_salt(path: Path | None = None) -> str:
    """This deployment's salt: GRADER_SALT, else the salt file (SALT_FILE), written now if there is
    none. Read when a grading starts, never at import: a read-only install still lists its tests."""
    global _read_here
    _read_here = True
    if os.environ.get(SALT_VARIABLE):
        return os.environ[SALT_VARIABLE]
    path = path or SALT_FILE
    try:
        return _salt_file(path)
    except OSError as error:
        raise SaltUnavailable(
            f"the hidden tests need this deployment's salt, and {path} cannot be read or made "
            f"({error.strerror or error}): set {SALT_VARIABLE} to the salt, or install the grader where "
            f"{path.parent} is writable") from error


def grading_salt(public_only: bool) -> str:
    """The salt a grading seeds its examples with: the public one when only public tests run (a
    student's `grader check` needs no salt), else the deployment's."""
    return PUBLIC_SALT if public_only else deployment_salt()


def _salt_file(path: Path) -> str:
    if not path.is_file():
        # Linked into place, so that two gradings starting at once agree on one salt.
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as new:
            new.write(secrets.token_hex(16) + "\n")
        os.chmod(new.name, 0o600)
        try:
            os.link(new.name, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(new.name)
    return path.read_text().strip()


def case_seed(salt: str, component: str, name: str) -> int:
    """The seed of one case's examples."""
    return int.from_bytes(hashlib.sha256(f"{salt}/{component}/{name}".encode()).digest()[:8], "big")
