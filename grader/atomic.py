"""Files written whole or not at all: a reader, or a rerun after Ctrl-C, never sees half of one."""
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, content: str | bytes) -> None:
    """Write `content` to a temporary file beside `path`, then rename it over `path`."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide a gradebook from the course's other staff
        with os.fdopen(fd, "wb") as out:
            out.write(content.encode() if isinstance(content, str) else content)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
