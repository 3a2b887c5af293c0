"""Checkpoints: a planted file can never run code, states are weights-only, temporaries name their writer."""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from suite.core import checkpoint as ckpt
from suite.results import records as rec


class _Payload:
    """Unpickling this creates ``marker``: what a malicious checkpoint would do (``open`` stands for any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
def test_a_planted_pickle_runs_no_code_and_is_ignored(tmp_path: Path, writer: str) -> None:
    marker = tmp_path / "pwned"
    path = ckpt.checkpoint_path(tmp_path / "out", "sas__fr__seed0__abc.json")
    path.parent.mkdir(parents=True)
    state = {"identity": {}, "payload": _Payload(marker)}
    if writer == "torch.save":
        torch.save(state, path)
    else:
        path.write_bytes(pickle.dumps(state))
    with pytest.warns(UserWarning, match="ignoring unreadable checkpoint") as caught:
        assert ckpt.CheckpointSlot(path).load() is None
    assert not marker.exists()
    assert any(f"ignoring unreadable checkpoint {path}:" in str(w.message) for w in caught)
    pickle.loads(pickle.dumps(_Payload(marker)))  # the payload is real: an unsafe load runs it
    assert marker.exists()


def test_a_checkpoint_that_is_not_a_dict_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    torch.save([torch.zeros(2)], path)
    with pytest.warns(UserWarning, match=f"ignoring checkpoint {path}: it holds a list"):
        assert ckpt.CheckpointSlot(path).load() is None


def test_truncated_checkpoint_is_ignored_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    ckpt.CheckpointSlot(path).save({"x": torch.arange(1000)})
    path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(UserWarning, match="ignoring unreadable checkpoint") as caught:
        assert ckpt.CheckpointSlot(path).load() is None
    assert str(path) in str(caught[0].message)


def test_weights_only_states_round_trip(tmp_path: Path) -> None:
    """What the VTI methods save (module and optimizer state dicts, RNG states, traces) loads back exactly."""
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(layer.parameters())
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = {
        "flow": layer.state_dict(),
        "optimizer": optimizer.state_dict(),
        "generator": torch.Generator().manual_seed(3).get_state(),
        "torch_rng": torch.get_rng_state(),
        "trace": {"loss": [1.5, float("nan")]},
        "finished": [[0.5, None], (None, "diverged")],
        "meta": OrderedDict(shape=torch.Size([2, 3]), dtype=torch.float32, device=torch.device("cpu"), flag=True),
    }
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt")
    slot.save(state)
    loaded = slot.load()
    assert torch.equal(loaded["flow"]["weight"], layer.weight.detach())
    assert torch.equal(loaded["torch_rng"], state["torch_rng"]) and loaded["finished"] == state["finished"]
    assert loaded["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert loaded["meta"] == state["meta"] and loaded["trace"]["loss"][0] == 1.5
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"x": np.zeros(3)}, "state['x'] is a numpy.ndarray"),
        ({"x": [1.0, np.float64(2.0)]}, "state['x'][1] is a numpy.float64"),
        ({"x": {"y": Path("a")}}, "state['x']['y'] is a pathlib"),
        ({"x": {1, 2}}, "state['x'] is a builtins.set"),
    ],
)
def test_saving_a_state_a_weights_only_load_cannot_read_is_refused(tmp_path: Path, bad: dict, where: str) -> None:
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt")
    with pytest.raises(TypeError, match=where.replace("[", r"\[").replace("]", r"\]")):
        slot.save(bad)
    assert not list(tmp_path.iterdir())


def test_checkpoint_temporaries_carry_the_writer_and_are_cleaned_with_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def interrupted_replace(src: str, dst: object) -> None:
        seen.append(src)
        raise KeyboardInterrupt

    path = ckpt.checkpoint_path(tmp_path, "sas__fr__seed0__abc.json")
    monkeypatch.setattr(ckpt.os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        ckpt.CheckpointSlot(path).save({"x": torch.zeros(1)})
    monkeypatch.undo()
    assert rec.temporary_writer(Path(seen[0])) == os.getpid() and not Path(seen[0]).exists()
    # A temporary of this (live) process survives the clean-up of a run starting beside it.
    mine = path.parent / Path(seen[0]).name
    mine.write_bytes(b"partial")
    assert rec.remove_stale_temporaries(tmp_path) == 0 and mine.exists()
