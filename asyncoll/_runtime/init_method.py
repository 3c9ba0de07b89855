"""Reading init_process_group's arguments and environment into a Rendezvous."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from asyncoll._runtime import torchrun
from asyncoll._runtime.joining import out_of_range
from asyncoll._runtime.session import Rendezvous
from asyncoll._defaults import DEFAULT_JOB_ID
from asyncoll._wire.endpoint import host_literal, split_addresses, split_host_port
from asyncoll.errors import ConfigurationError

#: Where launchers put the rank and the world size, in order of precedence:
#: torchrun and asyncoll-run, Open MPI's mpirun, Slurm's srun.
_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
_WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")

#: Where asyncoll-run's coordinator is (HOST:PORT, or several, comma-separated:
#: tried in turn when one cannot be reached); it takes precedence over
#: MASTER_ADDR and MASTER_PORT, which asyncoll-run leaves to torch's store.
COORDINATOR_VARIABLE = "ASYNCOLL_COORDINATOR"

#: Backend names accepted, so torch programs run unchanged.
ACCEPTED_BACKENDS = ("asyncoll", "gloo", "cpu:gloo")


def resolve(backend: str | None, init_method: str | None, world_size: int, rank: int,
            timeout: float, job_id: str | None,
            environ: Mapping[str, str], elastic: bool | None = None,
            min_size: int | None = None, max_size: int | None = None) -> Rendezvous:
    """Work out where to join, as torch.distributed would from the same arguments.

    ``env://`` (the default) reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and,
    optionally, RANK (ASYNCOLL_COORDINATOR, set by asyncoll-run, replaces the
    first two); ``tcp://host:port`` takes the address from the URL and
    WORLD_SIZE from the argument or the environment. Where RANK and WORLD_SIZE
    are not set, Open MPI's (OMPI_COMM_WORLD_RANK/SIZE) and Slurm's
    (SLURM_PROCID, SLURM_NTASKS) are used, so mpirun and srun can launch. A rank of -1 lets the
    coordinator choose. Rank 0 may host the coordinator when none is running; under
    torchrun, whose agent's store is at MASTER_PORT, rank 0 hosts it elsewhere and
    publishes it in that store.
    ``elastic``, ``min_size`` and ``max_size`` default to ASYNCOLL_ELASTIC
    ("1": elastic), ASYNCOLL_MIN_SIZE and ASYNCOLL_MAX_SIZE (0 or unset: no bound).
    A rank at or beyond the world size is left for the coordinator to refuse, which
    fails the rest of the rendezvous with it.

    Raises:
        ConfigurationError: an unknown backend or scheme, or a missing or bad value.
    """
    if backend is not None and str(backend).lower() not in ACCEPTED_BACKENDS:
        raise ConfigurationError(f"backend {backend!r} is not available: asyncoll runs on "
                                 f"the CPU over TCP; pass one of {ACCEPTED_BACKENDS} or None")
    url = urlsplit(init_method or "env://")
    launched = standing_coordinators(environ) if url.scheme == "env" else ()
    fallbacks: tuple[tuple[str, int], ...] = ()
    if launched:
        # asyncoll-run's coordinator: MASTER_PORT is left to torch's store.
        (host, port), fallbacks = launched[0], launched[1:]
    elif url.scheme == "env":
        host = host_literal(_require(environ, "MASTER_ADDR"), "MASTER_ADDR")
        port = _int_value("MASTER_PORT", _require(environ, "MASTER_PORT"))
    elif url.scheme == "tcp":
        host, port = _tcp_address(str(init_method), url.netloc)
    else:
        raise ConfigurationError(f"init_method {init_method!r} is not supported; use "
                                 "env:// or tcp://host:port")
    if world_size == -1:
        name = _first_set(environ, _WORLD_SIZE_VARIABLES)
        world_size = _int_value(name, _require(environ, name, "or pass world_size="))
    if rank == -1:
        name = _first_set(environ, _RANK_VARIABLES)
        if name in environ:
            rank = _int_value(name, environ[name])
    # A rank beyond the world is the coordinator's to refuse, so that the rest of the
    # rendezvous fails with it (asyncoll._runtime.joining.connect).
    _check_place(world_size, min(rank, world_size - 1), port)
    job = job_id if job_id is not None else environ.get("ASYNCOLL_JOB_ID", DEFAULT_JOB_ID)
    if elastic is None:
        elastic = environ.get("ASYNCOLL_ELASTIC", "0") not in ("", "0")
    if min_size is None:
        min_size = _int_value("ASYNCOLL_MIN_SIZE", environ.get("ASYNCOLL_MIN_SIZE") or "0")
    if max_size is None:
        max_size = _int_value("ASYNCOLL_MAX_SIZE", environ.get("ASYNCOLL_MAX_SIZE") or "0")
    if elastic and (min(min_size, max_size) < 0 or min_size > world_size
                    or 0 < max_size < world_size):
        raise ConfigurationError(f"an elastic job needs 0 <= min_size <= world_size <= "
                                 f"max_size (0: no bound), got min_size {min_size}, world_size "
                                 f"{world_size}, max_size {max_size}")
    # Under torchrun, MASTER_PORT is its agent's store: the coordinator's address is
    # published there (asyncoll._runtime.torchrun).
    torch_store = url.scheme == "env" and not launched and torchrun.serves_store(environ)
    if launched:
        waits_for = f"the coordinator that {COORDINATOR_VARIABLE} names"
    elif url.scheme == "env" and not torch_store:
        waits_for = ("rank 0 to host the coordinator (or for an asyncoll-coordinator "
                     "daemon)")
    else:
        waits_for = "the coordinator"
    return Rendezvous(host=host, port=port, job=job, world_size=world_size, rank=rank,
                      timeout=timeout, may_host=rank == 0 and not launched and not torch_store,
                      elastic=bool(elastic), min_size=min_size, max_size=max_size,
                      fallbacks=fallbacks, torch_store=torch_store, waits_for=waits_for)


def resolve_published(host: str, port: int, job: str, world_size: int, rank: int, timeout: float,
              fallbacks: tuple[tuple[str, int], ...]) -> Rendezvous:
    """Where to join a job whose coordinator one of its members hosts, at ``host:port``,
    and told the others of (the torch backend's, through torch's store).

    ``fallbacks`` are the standing coordinators to try after it
    (:func:`standing_coordinators` of the hosting member). Such a job is
    elastic, without bounds: it goes on when a member is lost, for torch's
    shrink_group and reconfigure.

    Raises:
        ConfigurationError: a bad world size, rank or port.
    """
    _check_place(world_size, rank, port)
    return Rendezvous(host=host, port=port, job=job, world_size=world_size, rank=rank,
                      timeout=timeout, may_host=False, elastic=True, fallbacks=fallbacks)


def standing_coordinators(environ: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """The coordinators ASYNCOLL_COORDINATOR names, in the order to try them (none when it
    is unset or empty).

    Raises:
        ConfigurationError: it names something that is not HOST:PORT.
    """
    listed = environ.get(COORDINATOR_VARIABLE)
    return split_addresses(listed, COORDINATOR_VARIABLE) if listed else ()


def _check_place(world_size: int, rank: int, port: int) -> None:
    if world_size < 1:
        raise ConfigurationError(f"world_size must be at least 1, got {world_size}")
    if not -1 <= rank < world_size:
        raise ConfigurationError(out_of_range(rank, world_size))
    if not 0 < port < 65536:
        raise ConfigurationError(f"port {port} is not a TCP port; use 1 to 65535")


def _tcp_address(init_method: str, netloc: str) -> tuple[str, int]:
    """The host and port of ``tcp://host:port`` or ``tcp://[v6]:port``."""
    try:
        return split_host_port(netloc.rpartition("@")[2], "init_method")
    except ConfigurationError as exc:
        raise ConfigurationError(f"init_method {init_method!r} must look like tcp://host:port "
                                 "(tcp://[::1]:29500 for an IPv6 address)") from exc


def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str:
    return next((name for name in names if environ.get(name)), names[0])


def _require(environ: Mapping[str, str], name: str, alternative: str = "") -> str:
    value = environ.get(name)
    if not value:
        hint = f" ({alternative})" if alternative else ""
        raise ConfigurationError(f"the environment variable {name} is not set{hint}; "
                                 "launch with asyncoll-run or torchrun, or set it")
    return value


def _int_value(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {text!r}") from None
