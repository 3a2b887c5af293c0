"""One leaderboard row per configuration: records of a method made with different settings are never averaged.

A results folder can hold runs of one method at two settings (``--option``, ``--draws``, a different budget), made
by two commands into the same ``--out``. Their records differ in ``config_hash`` (the hash of the run's whole
configuration). Where a (problem, method) has records of more than one configuration, each configuration becomes
its own row, labelled ``method@hash`` (the hash's first 8 characters), and a note says how the configurations
differ; the report layer sees each label as a contender of its own everywhere (leaderboards, verdicts, plots, the
summary). A method with one configuration keeps its plain name (issue 51, H16).
"""

from __future__ import annotations

from typing import Any

from suite.results.records import NOT_APPLICABLE

#: Characters of the configuration hash in a row's label.
LABEL_HASH = 8
#: Separator of method and hash in a label (never part of a registered name, so labels cannot collide with one).
LABEL_MARK = "@"


def _configurations(records: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for record in records:
        if record["status"] != NOT_APPLICABLE:
            found.setdefault((record["problem"], str(record["method"])), set()).add(str(record.get("config_hash")))
    return found


def label_configurations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records``, where a (problem, method) has several configurations relabelled ``method@hash`` (copies)."""
    mixed = {key for key, hashes in _configurations(records).items() if len(hashes) > 1}
    if not mixed:
        return records
    out = []
    for record in records:
        if (record["problem"], str(record["method"])) in mixed and record["status"] != NOT_APPLICABLE:
            label = f"{record['method']}{LABEL_MARK}{str(record.get('config_hash'))[:LABEL_HASH]}"
            record = {**record, "method": label}
        out.append(record)
    return out


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested configuration as {dotted key: leaf value}."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def configuration_notes(records: list[dict[str, Any]], problem: str) -> list[str]:
    """For each labelled row of ``problem``: ``label: key=value, ...``, the settings that set it apart."""
    settings: dict[str, dict[str, Any]] = {}
    for record in records:
        if record["problem"] == problem and LABEL_MARK in str(record["method"]) and record["status"] != NOT_APPLICABLE:
            config = record.get("run_config") if isinstance(record.get("run_config"), dict) else {}
            settings.setdefault(str(record["method"]), _flat(config))
    notes = []
    for label, flat in sorted(settings.items()):
        method = label.split(LABEL_MARK)[0]
        others = [f for other, f in settings.items() if other != label and other.split(LABEL_MARK)[0] == method]
        differing = sorted(key for key in flat if any(other.get(key) != flat[key] for other in others))
        differing += sorted({key for other in others for key in other} - set(flat))
        shown = ", ".join(f"{key}={flat.get(key)}" for key in differing) or "settings not recorded"
        notes.append(f"{label}: {shown}")
    return notes
