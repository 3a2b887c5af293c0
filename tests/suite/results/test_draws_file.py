"""Draw files: saved atomically, read back exactly, and every damaged or mismatched file reported by name."""

import zipfile
from pathlib import Path

import numpy as np
import pytest

from suite.results.draws_file import DRAWS_DIR, DrawsFileError, draws_path, load_draws, save_draws


def _arrays(num: int = 200, dim: int = 3, words: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    shape = (num, words) if words else (num,)
    model_index = rng.integers(0, 4, size=shape)
    mask = rng.random((num, dim)) < 0.5
    theta = rng.normal(size=(num, dim)) * mask
    return {"model_index": model_index, "theta": theta, "mask": mask, "log_q": rng.normal(size=num)}


def test_draws_round_trip_with_on_disk_dtypes(tmp_path: Path) -> None:
    arrays = _arrays()
    path = draws_path(tmp_path, "sas__mf__seed0__abc.json")
    assert path == tmp_path / DRAWS_DIR / "sas__mf__seed0__abc.npz"
    entry = save_draws(path, **arrays)
    assert entry["num"] == 200 and len(entry["sha256"]) == 64
    saved = load_draws(path, sha256=entry["sha256"], num=200)
    assert len(saved) == 200
    assert saved.model_index.dtype == np.int64 and saved.theta.dtype == np.float32
    assert saved.log_q is not None and saved.log_q.dtype == np.float32 and saved.mask is not None
    np.testing.assert_array_equal(saved.model_index, arrays["model_index"])
    np.testing.assert_array_equal(saved.theta, arrays["theta"].astype(np.float32))
    np.testing.assert_array_equal(saved.mask, arrays["mask"])
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind


def test_optional_arrays_and_multi_word_model_indices(tmp_path: Path) -> None:
    arrays = _arrays(words=2)
    path = tmp_path / "d.npz"
    save_draws(path, arrays["model_index"], arrays["theta"])
    saved = load_draws(path)
    assert saved.model_index.shape == (200, 2) and saved.mask is None and saved.log_q is None


def test_mismatched_shapes_are_refused_before_writing(tmp_path: Path) -> None:
    arrays = _arrays()
    with pytest.raises(ValueError, match="theta is float32"):
        save_draws(tmp_path / "d.npz", arrays["model_index"][:-1], arrays["theta"])
    with pytest.raises(ValueError, match="log_q"):
        save_draws(tmp_path / "d.npz", arrays["model_index"], arrays["theta"], log_q=arrays["log_q"][:5])
    assert not any(tmp_path.iterdir())


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / DRAWS_DIR / "run.npz"
    return path, save_draws(path, **_arrays(num=5000))


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.99])
def test_a_half_written_file_is_reported_with_its_name(saved: tuple[Path, dict], keep: float) -> None:
    path, entry = saved
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(DrawsFileError, match=str(path)):
        load_draws(path)  # without the record's checksum: the archive itself is found broken
    with pytest.raises(DrawsFileError, match=f"{path}.*SHA-256"):
        load_draws(path, sha256=entry["sha256"])


def test_a_corrupted_byte_is_reported_even_without_a_checksum(saved: tuple[Path, dict]) -> None:
    path, entry = saved
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("theta.npy")
    data = bytearray(path.read_bytes())
    middle = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
    data[middle] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DrawsFileError, match=f"draw file {path} is unreadable"):
        load_draws(path)
    with pytest.raises(DrawsFileError, match="SHA-256"):
        load_draws(path, sha256=entry["sha256"])


def test_missing_files_arrays_and_wrong_counts_are_reported(tmp_path: Path, saved: tuple[Path, dict]) -> None:
    path, entry = saved
    with pytest.raises(DrawsFileError, match="holds 5000 draws, its record says 10"):
        load_draws(path, sha256=entry["sha256"], num=10)
    with pytest.raises(DrawsFileError, match="does not exist"):
        load_draws(tmp_path / "absent.npz")
    partial = tmp_path / "partial.npz"
    np.savez(partial, model_index=np.zeros(3, dtype=np.int64))
    with pytest.raises(DrawsFileError, match=f"{partial} lacks version, theta"):
        load_draws(partial)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, version=np.int64(1), model_index=np.zeros(3, dtype=np.int64), theta=np.zeros((3, 2)))
    with pytest.raises(DrawsFileError, match="theta is float64"):
        load_draws(wrong)


def test_pickled_arrays_are_never_loaded(tmp_path: Path) -> None:
    path = tmp_path / "pickled.npz"
    objects = np.array([{"a": 1}], dtype=object)
    np.savez(path, version=np.int64(1), model_index=objects, theta=np.zeros((1, 1), dtype=np.float32))
    with pytest.raises(DrawsFileError, match=f"{path} is unreadable"):
        load_draws(path)
