"""Reaching a Dask scheduler over TLS (`--scheduler tls://...`), as dask-jobqueue's clusters are.

The certificates come from `--tls-ca-file`, `--tls-cert` and `--tls-key` (Dask's names), or from
Dask's own configuration (`distributed.comm.tls.ca-file`, `.client.cert`, `.client.key`, e.g.
in ~/.config/dask/distributed.yaml or DASK_DISTRIBUTED__COMM__TLS__CA_FILE...). A tls:// address
with neither is refused here with one message, before Dask fails on it (a TypeError, then a
timeout).
"""
from dataclasses import dataclass
from pathlib import Path


class ClusterError(ValueError):
    """The scheduler options cannot work together."""


@dataclass(frozen=True)
class TLS:
    """The files a TLS connection to the scheduler needs: the CA's certificate, ours and its key."""

    ca_file: Path
    cert: Path
    key: Path


def _configured() -> bool:
    import dask.config

    return bool(dask.config.get("distributed.comm.tls.ca-file", None)
                and dask.config.get("distributed.comm.tls.client.cert", None))


def security(scheduler: str | None, ca_file: str | None = None, cert: str | None = None,
             key: str | None = None) -> object:
    """The distributed.Security to reach `scheduler` with (None: Dask's default, its configuration).
    Raises ClusterError for TLS options that cannot work."""
    given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    if any(given.values()) and not (scheduler or "").startswith("tls://"):
        raise ClusterError(f"{', '.join(k for k, v in given.items() if v)} need a tls:// scheduler address "
                           f"(not {scheduler or 'none'})")
    if not (scheduler or "").startswith("tls://"):
        return None
    if not any(given.values()):
        if _configured():
            return None
        raise ClusterError(f"{scheduler} is a TLS address: give --tls-ca-file, --tls-cert and --tls-key (the "
                           "CA's certificate, yours and its key), or set Dask's distributed.comm.tls "
                           "configuration")
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise ClusterError(f"TLS needs {', '.join(missing)} too")
    absent = [f"{name} {value}" for name, value in given.items() if not Path(value).is_file()]
    if absent:
        raise ClusterError(f"no such file: {', '.join(absent)}")
    from distributed.security import Security

    return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
