"""The Slurm cluster that ``run_all.py --executor dask --cluster slurm --cluster-config FILE`` starts.

FILE is TOML (``.toml``) or YAML (``.yaml``, ``.yml``) with flat keys at the top level, no ``[slurm]`` table;
``CLUSTER_KEYS`` lists them, all optional. Quote ``walltime`` ("04:00:00"): unquoted, TOML reads a time and YAML
may read seconds.

Each job runs ``processes`` Dask worker processes with one thread each, so a worker runs one benchmark run at a
time and that run may use ``cores // processes`` CPU cores (``ClusterConfig.cores_per_worker``); ``processes``
must divide ``cores``. With ``gpus = G > 0`` each job asks for ``--gres=gpu:G`` and runs G worker processes, each
declaring the Dask resource ``GPU=1``, so a run submitted with ``resources={"GPU": 1}`` has a GPU to itself;
``processes`` defaults to G in such a file and must equal G. Slurm shows all G GPUs to every process of a job, so a
run picks its own with ``local_gpu_index``. Paths are used as written (relative ones are relative to the directory
the jobs are submitted from), except that ``~`` in ``log_directory`` is expanded.

dask-jobqueue is an optional extra (``pip install tdbench[slurm]``); ``require_jobqueue`` says so when it is missing.

An example file with every key: docs/distributed.md, "Slurm through dask-jobqueue".
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dask_jobqueue

INSTALL_HINT = "pip install tdbench[slurm]"
SUFFIXES = (".toml", ".yaml", ".yml")

#: Every key a cluster file accepts, with its meaning.
CLUSTER_KEYS: dict[str, str] = {
    "queue": "Slurm partition of the jobs (#SBATCH -p); default: Slurm's",
    "account": "account charged for the jobs (#SBATCH -A); default: Slurm's",
    "cores": "CPU cores per job (default 1)",
    "memory": 'memory per job, e.g. "16GB" (GB = 10^9 bytes, GiB = 2^30; default "4GB")',
    "walltime": 'time limit per job, quoted, e.g. "01:00:00" or "1-12:00:00" (default "01:00:00")',
    "gpus": "GPUs per job, one per worker process (default 0)",
    "processes": "Dask worker processes per job, one run at a time each (default 1, or gpus when gpus > 0)",
    "jobs": "number of jobs to start (default 1)",
    "job_extra_directives": 'extra #SBATCH options, e.g. ["--constraint=a100"]',
    "job_script_prologue": 'shell lines run before the workers start, e.g. ["source ~/venv/bin/activate"]',
    "local_directory": "scratch directory of the workers on the compute nodes",
    "log_directory": "directory for the jobs' stdout and stderr files",
    "interface": 'network interface of the scheduler and workers, e.g. "ib0"',
}

_WALLTIME = re.compile(r"\d+(:\d\d){0,2}|\d+-\d+(:\d\d){0,2}")  # Slurm's formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_MEMORY = re.compile(r"(\d+(?:\.\d*)?)\s*([kmgt]i?b?)?", re.IGNORECASE)
_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


class MissingExtraError(ValueError, ImportError):
    """An optional dependency that is not installed (a ValueError, so the CLI exits with code 2)."""


def _memory_bytes(text: str) -> float | None:
    """Bytes in a dask-style size such as ``16GB``, ``1.5GiB`` or ``512M``; None if it is not one."""
    match = _MEMORY.fullmatch(text.strip())
    if match is None:
        return None
    unit = (match.group(2) or "").lower().rstrip("b")
    return float(match.group(1)) * _UNITS.get(unit, 1)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ClusterConfig:
    """What each Slurm job asks for and runs, and how many jobs to start (keys: ``CLUSTER_KEYS``)."""

    queue: str | None = None
    account: str | None = None
    cores: int = 1
    memory: str = "4GB"
    walltime: str = "01:00:00"
    gpus: int = 0
    processes: int = 1
    jobs: int = 1
    job_extra_directives: tuple[str, ...] = ()
    job_script_prologue: tuple[str, ...] = ()
    local_directory: str | None = None
    log_directory: str | None = None
    interface: str | None = None

    def __post_init__(self) -> None:
        for name in ("job_extra_directives", "job_script_prologue"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        problems = _problems(self)
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def cores_per_worker(self) -> int:
        """CPU cores each worker process's run may use."""
        return self.cores // self.processes


def _problems(config: ClusterConfig) -> list[str]:
    """Every reason ``config`` is not a valid cluster description (empty if it is one)."""
    problems = []
    for name in ("queue", "account", "local_directory", "log_directory", "interface"):
        value = getattr(config, name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            problems.append(f"{name} must be a non-empty string, got {value!r}")
    for name, least in (("cores", 1), ("processes", 1), ("jobs", 1), ("gpus", 0)):
        value = getattr(config, name)
        if not _is_int(value) or value < least:
            kind = "a positive integer" if least else "an integer >= 0"
            problems.append(f"{name} must be {kind}, got {value!r}")
    if not isinstance(config.walltime, str) or not _WALLTIME.fullmatch(config.walltime.strip()):
        problems.append(
            f'walltime must be a quoted string such as "01:00:00" or "1-12:00:00", got {config.walltime!r}'
            " (unquoted, TOML reads 01:00:00 as a time and YAML reads 1:00:00 as 3600 seconds)"
        )
    size = _memory_bytes(config.memory) if isinstance(config.memory, str) else None
    if size is None or size < 2**20:
        problems.append(f'memory must be a size of at least 1MiB such as "16GB", got {config.memory!r}')
    for name in ("job_extra_directives", "job_script_prologue"):
        value = getattr(config, name)
        if not isinstance(value, tuple) or not all(isinstance(line, str) for line in value):
            problems.append(f"{name} must be a list of strings, got {value!r}")
    if isinstance(config.job_extra_directives, tuple):
        for line in config.job_extra_directives:
            if isinstance(line, str) and line.lstrip().startswith("#SBATCH"):
                problems.append(f"job_extra_directives: write {line!r} without '#SBATCH' (it is added)")
            if _is_int(config.gpus) and config.gpus > 0 and re.match(r"\s*--(gres|gpus)\b", str(line)):
                problems.append(f"job_extra_directives: {line!r} clashes with gpus, which adds --gres itself")
    counts = (config.cores, config.processes, config.gpus)
    if all(_is_int(n) for n in counts) and config.cores > 0 and config.processes > 0:
        if config.cores % config.processes:
            problems.append(
                f"processes ({config.processes}) must divide cores ({config.cores}) evenly: "
                "each worker process gets the same number of cores"
            )
        if config.gpus > 0 and config.processes != config.gpus:
            problems.append(
                f"processes ({config.processes}) must equal gpus ({config.gpus}): each worker process uses one GPU"
            )
    return problems


def _read(path: Path) -> Any:
    """The parsed contents of a TOML or YAML file."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"cluster file {path}: unsupported extension {path.suffix!r}; use .toml, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cluster file {path}: cannot read it: {exc}") from exc
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"cluster file {path}: not valid TOML: {exc}") from exc
    try:
        import yaml
    except ImportError as exc:
        raise MissingExtraError(f"cluster file {path}: reading YAML needs PyYAML: {INSTALL_HINT}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"cluster file {path}: not valid YAML: {exc}") from exc


def load_cluster_config(path: Path) -> ClusterConfig:
    """Read and validate a cluster file (.toml, .yaml or .yml)."""
    path = Path(path)
    data = _read(path)
    if data is None:  # an empty YAML file: every key at its default
        data = {}
    if not isinstance(data, Mapping):
        raise ValueError(
            f"cluster file {path}: the top level must be a table of keys, got {type(data).__name__}; "
            f"valid keys: {', '.join(CLUSTER_KEYS)}"
        )
    unknown = [str(key) for key in data if key not in CLUSTER_KEYS]
    if unknown:
        nested = " (keys go at the top level, not in a table)" if "slurm" in unknown else ""
        raise ValueError(
            f"cluster file {path}: unknown key(s) {', '.join(map(repr, unknown))}{nested}; "
            f"valid keys: {', '.join(CLUSTER_KEYS)}"
        )
    values = dict(data)
    if "processes" not in values and _is_int(values.get("gpus")) and values["gpus"] > 0:
        values["processes"] = values["gpus"]
    try:
        return ClusterConfig(**values)
    except ValueError as exc:
        raise ValueError(f"cluster file {path}: {exc}") from exc


def require_jobqueue() -> None:
    """Raise an ImportError-like ValueError saying 'pip install tdbench[slurm]' when dask_jobqueue is missing."""
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"--cluster slurm needs dask-jobqueue, which is not installed: {INSTALL_HINT}") from exc


def make_slurm_cluster(config: ClusterConfig) -> dask_jobqueue.SLURMCluster:
    """The SLURMCluster the config describes (not yet scaled)."""
    require_jobqueue()
    from dask_jobqueue import SLURMCluster

    directives = list(config.job_extra_directives)
    worker_args: list[str] = []
    if config.gpus > 0:
        directives.insert(0, f"--gres=gpu:{config.gpus}")
        worker_args = ["--resources", "GPU=1"]
    log_directory = os.path.expanduser(config.log_directory) if config.log_directory else None
    return SLURMCluster(
        queue=config.queue,
        account=config.account,
        # dask-jobqueue gives each worker process cores // processes threads; passing cores=processes gives one
        # thread each (one run at a time), while job_cpu still books all the job's cores from Slurm.
        cores=config.processes,
        job_cpu=config.cores,
        processes=config.processes,
        memory=config.memory,
        walltime=config.walltime,
        job_extra_directives=directives,
        job_script_prologue=list(config.job_script_prologue),
        worker_extra_args=worker_args,
        local_directory=config.local_directory,
        log_directory=log_directory,
        interface=config.interface,
    )


def local_gpu_index(worker_name: str, processes: int) -> int:
    """Which of its job's GPUs (a ``cuda:N`` index) the Dask worker named ``worker_name`` uses.

    A job with several worker processes names them ``<job>-0``, ``<job>-1``, ...; a job's only worker uses GPU 0.

    >>> local_gpu_index("SLURMCluster-3-1", processes=2), local_gpu_index("SLURMCluster-3", processes=1)
    (1, 0)
    """
    if processes == 1:
        return 0
    head, _, index = str(worker_name).rpartition("-")
    if not head or not index.isdigit() or int(index) >= processes:
        raise ValueError(f"worker name {worker_name!r} does not end with -N, N below processes ({processes})")
    return int(index)
