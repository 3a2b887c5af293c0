"""Cluster files: TOML and YAML read alike, bad files are refused by name, and the Slurm job script is as asked."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from suite.run.cluster_config import (
    CLUSTER_KEYS,
    ClusterConfig,
    MissingExtraError,
    load_cluster_config,
    local_gpu_index,
    make_slurm_cluster,
    require_jobqueue,
)

FULL_TOML = """\
queue = "gpu"
account = "proj"
cores = 8
memory = "16GB"
walltime = "02:30:00"
gpus = 2
processes = 2
jobs = 3
job_extra_directives = ["--constraint=a100"]
job_script_prologue = ["source ~/venv/bin/activate", "module load cuda"]
local_directory = "/scratch/dask"
log_directory = "logs"
interface = "ib0"
"""

FULL_YAML = """\
queue: gpu
account: proj
cores: 8
memory: 16GB
walltime: "02:30:00"
gpus: 2
processes: 2
jobs: 3
job_extra_directives:
  - --constraint=a100
job_script_prologue:
  - source ~/venv/bin/activate
  - module load cuda
local_directory: /scratch/dask
log_directory: logs
interface: ib0
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@contextmanager
def _cluster(config: ClusterConfig, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The cluster ``config`` describes, closed afterwards; fails if building it submitted a job."""
    slurm = pytest.importorskip("dask_jobqueue.slurm")
    submitted = []

    async def no_submit(self: object, script_filename: str) -> str:
        submitted.append(script_filename)
        raise AssertionError("building the cluster submitted a job")

    monkeypatch.setattr(slurm.SLURMJob, "_submit_job", no_submit)
    cluster = make_slurm_cluster(config)
    try:
        yield cluster
        assert submitted == [] and len(cluster.workers) == 0
    finally:
        cluster.close()


def _sbatch_lines(script: str) -> list[str]:
    """The script's '#SBATCH' lines, less the job name (dask's config sets that, not the cluster file)."""
    return [line for line in script.splitlines() if line.startswith("#SBATCH") and not line.startswith("#SBATCH -J")]


def test_keys_are_the_config_fields() -> None:
    assert list(CLUSTER_KEYS) == [field.name for field in dataclasses.fields(ClusterConfig)]
    assert all(meaning.strip() for meaning in CLUSTER_KEYS.values())


def test_toml_and_yaml_files_with_the_same_content_give_the_same_config(tmp_path: Path) -> None:
    from_toml = load_cluster_config(_write(tmp_path, "c.toml", FULL_TOML))
    from_yaml = load_cluster_config(_write(tmp_path, "c.yaml", FULL_YAML))
    from_yml = load_cluster_config(_write(tmp_path, "c.yml", FULL_YAML))
    assert from_toml == from_yaml == from_yml
    assert from_toml == ClusterConfig(
        queue="gpu",
        account="proj",
        cores=8,
        memory="16GB",
        walltime="02:30:00",
        gpus=2,
        processes=2,
        jobs=3,
        job_extra_directives=("--constraint=a100",),
        job_script_prologue=("source ~/venv/bin/activate", "module load cuda"),
        local_directory="/scratch/dask",
        log_directory="logs",
        interface="ib0",
    )
    assert from_toml.cores_per_worker == 4


def test_missing_keys_take_the_defaults(tmp_path: Path) -> None:
    assert load_cluster_config(_write(tmp_path, "empty.yaml", "")) == ClusterConfig()
    assert load_cluster_config(_write(tmp_path, "empty.toml", "")) == ClusterConfig()
    assert load_cluster_config(_write(tmp_path, "one.toml", "jobs = 5\n")) == ClusterConfig(jobs=5)


def test_processes_default_to_gpus(tmp_path: Path) -> None:
    config = load_cluster_config(_write(tmp_path, "c.toml", "cores = 8\ngpus = 4\n"))
    assert (config.gpus, config.processes, config.cores_per_worker) == (4, 4, 2)


def test_gpu_job_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = dataclasses.replace(
        load_cluster_config(_write(tmp_path, "c.toml", FULL_TOML)), interface=None, log_directory=None
    )
    with _cluster(config, monkeypatch) as cluster:
        script = cluster.job_script()
    assert _sbatch_lines(script) == [
        "#SBATCH -p gpu",
        "#SBATCH -A proj",
        "#SBATCH -n 1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --mem=15G",  # dask-jobqueue books 16GB (10^9 bytes) as whole GiB, rounded up
        "#SBATCH -t 02:30:00",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --constraint=a100",
    ]
    lines = script.splitlines()
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert lines.index("source ~/venv/bin/activate") < lines.index("module load cuda") < lines.index(worker)
    # Two worker processes, one GPU and one thread (one run at a time) each, half the job's memory each.
    for part in ("--nworkers 2", "--nthreads 1", "--resources GPU=1", "--memory-limit 7.45GiB"):
        assert part in worker
    assert "--local-directory /scratch/dask" in worker


def test_cpu_job_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = tmp_path / "logs"
    config = ClusterConfig(
        cores=4, memory="8GiB", walltime="1-00:00:00", processes=2, log_directory=str(logs), interface="lo"
    )
    with _cluster(config, monkeypatch) as cluster:
        script = cluster.job_script()
    assert _sbatch_lines(script) == [
        f"#SBATCH -e {logs}/dask-worker-%J.err",
        f"#SBATCH -o {logs}/dask-worker-%J.out",
        "#SBATCH -n 1",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=8G",
        "#SBATCH -t 1-00:00:00",
    ]
    assert logs.is_dir()  # dask-jobqueue makes the log directory when it builds the job
    worker = next(line for line in script.splitlines() if "distributed.cli.dask_worker" in line)
    for part in ("--nworkers 2", "--nthreads 1", "--memory-limit 4.00GiB", "--interface lo"):
        assert part in worker
    assert "--resources" not in worker and "gres" not in script


def test_one_process_job_has_one_single_threaded_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    with _cluster(ClusterConfig(cores=16, gpus=1), monkeypatch) as cluster:
        script = cluster.job_script()
    assert "#SBATCH --cpus-per-task=16" in script.splitlines()
    assert "#SBATCH --gres=gpu:1" in script.splitlines()
    worker = next(line for line in script.splitlines() if "distributed.cli.dask_worker" in line)
    assert "--nthreads 1" in worker and "--nworkers" not in worker and "--resources GPU=1" in worker


def test_unknown_key_names_the_file_and_the_valid_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.toml", 'cpus = 4\nqueue = "gpu"\n')
    with pytest.raises(ValueError, match="unknown key") as info:
        load_cluster_config(path)
    message = str(info.value)
    assert str(path) in message and "'cpus'" in message
    assert all(key in message for key in CLUSTER_KEYS)


def test_a_slurm_table_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.toml", '[slurm]\nqueue = "gpu"\n')
    with pytest.raises(ValueError, match="top level") as info:
        load_cluster_config(path)
    assert str(path) in str(info.value) and "'slurm'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("c.toml", 'cores = "four"\n', "cores"),
        ("c.toml", "cores = 0\n", "cores"),
        ("c.toml", "cores = true\n", "cores"),
        ("c.toml", "cores = 2.0\n", "cores"),
        ("c.toml", "jobs = -1\n", "jobs"),
        ("c.toml", "processes = 0\n", "processes"),
        ("c.toml", "gpus = -1\n", "gpus"),
        ("c.toml", "walltime = 01:00:00\n", "walltime"),  # TOML: a time, not a string
        ("c.yaml", "walltime: 1:00:00\n", "walltime"),  # YAML: 3600, not a string
        ("c.toml", 'walltime = "an hour"\n', "walltime"),
        ("c.toml", 'memory = "lots"\n', "memory"),
        ("c.toml", "memory = 16\n", "memory"),
        ("c.toml", 'memory = "512KB"\n', "memory"),
        ("c.yaml", "queue: 5\n", "queue"),
        ("c.toml", 'account = ""\n', "account"),
        ("c.toml", 'job_extra_directives = "--constraint=a100"\n', "job_extra_directives"),
        ("c.yaml", "job_script_prologue: [1, 2]\n", "job_script_prologue"),
        ("c.toml", 'job_extra_directives = ["#SBATCH --exclusive"]\n', "job_extra_directives"),
        ("c.toml", 'gpus = 1\njob_extra_directives = ["--gres=gpu:1"]\n', "job_extra_directives"),
    ],
)
def test_bad_values_are_refused_by_key_and_file(tmp_path: Path, name: str, text: str, key: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(ValueError, match=key) as info:
        load_cluster_config(path)
    assert str(path) in str(info.value)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.toml", 'cores = "four"\njobs = 0\nmemory = "lots"\n')
    with pytest.raises(ValueError) as info:
        load_cluster_config(path)
    assert all(key in str(info.value) for key in ("cores", "jobs", "memory"))


def test_processes_must_divide_cores(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.toml", "cores = 6\nprocesses = 4\n")
    with pytest.raises(ValueError, match=r"processes \(4\) must divide cores \(6\) evenly") as info:
        load_cluster_config(path)
    assert str(path) in str(info.value)


def test_processes_must_equal_gpus(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "cores: 8\ngpus: 2\nprocesses: 1\n")
    with pytest.raises(ValueError, match=r"processes \(1\) must equal gpus \(2\)"):
        load_cluster_config(path)


@pytest.mark.parametrize(
    ("name", "text", "parser"), [("c.toml", "cores = \n", "TOML"), ("c.yaml", "cores: [1, 2\n", "YAML")]
)
def test_unparsable_file_names_the_format_and_the_parser_message(
    tmp_path: Path, name: str, text: str, parser: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(ValueError, match=f"(?s)not valid {parser}: .*line") as info:
        load_cluster_config(path)
    assert str(path) in str(info.value)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "- cores: 4\n- jobs: 2\n")
    with pytest.raises(ValueError, match="top level must be a table") as info:
        load_cluster_config(path)
    assert str(path) in str(info.value)


def test_unsupported_extension(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.json", '{"cores": 4}')
    with pytest.raises(ValueError, match=r"\.toml, \.yaml or \.yml") as info:
        load_cluster_config(path)
    assert str(path) in str(info.value)


def test_missing_file_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ValueError, match="cannot read") as info:
        load_cluster_config(path)
    assert str(path) in str(info.value)


def test_direct_construction_is_checked_and_lists_become_tuples() -> None:
    with pytest.raises(ValueError, match="cores must be a positive integer"):
        ClusterConfig(cores=0)
    config = ClusterConfig(job_script_prologue=["module load cuda"])  # type: ignore[arg-type]
    assert config.job_script_prologue == ("module load cuda",)
    assert hash(config) == hash(ClusterConfig(job_script_prologue=("module load cuda",)))


def test_missing_jobqueue_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # import dask_jobqueue now raises ImportError
    for call in (require_jobqueue, lambda: make_slurm_cluster(ClusterConfig())):
        with pytest.raises(MissingExtraError, match=r"pip install tdbench\[slurm\]") as info:
            call()
        assert isinstance(info.value, ValueError) and isinstance(info.value, ImportError)


def test_require_jobqueue_passes_when_installed() -> None:
    pytest.importorskip("dask_jobqueue")
    assert require_jobqueue() is None


def test_local_gpu_index() -> None:
    assert [local_gpu_index(f"SLURMCluster-7-{i}", processes=4) for i in range(4)] == [0, 1, 2, 3]
    assert local_gpu_index("SLURMCluster-7", processes=1) == 0
    with pytest.raises(ValueError, match="processes"):
        local_gpu_index("SLURMCluster-7-4", processes=4)
    with pytest.raises(ValueError, match="-N"):
        local_gpu_index("worker", processes=2)
