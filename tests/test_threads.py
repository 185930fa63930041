"""The threads a model runs on when none is named: within the process's affinity and a container's CPU limit."""

import os

import pytest

from locsum_sdk import threads
from locsum_sdk.threads import cpu_limit, usable_cpus


def write(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("files, limit", [
    ({"cpu.max": "200000 100000\n"}, 2.0),  # cgroup v2: quota and period in microseconds
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),  # no limit
    ({"cpu.max": "max 100000\n", "cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}, None),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3.0),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "garbage"}, None),
    ({"cpu.max": "lots 100000\n"}, None),  # not a number: no limit read, not an error
    ({"cpu.max": "0 0"}, None),
    ({}, None),
])
def test_the_cpu_limit_is_read_from_either_cgroup_version(tmp_path, files, limit):
    assert cpu_limit(write(tmp_path, files)) == limit


@pytest.mark.parametrize("files, cpus", [
    ({"cpu.max": "250000 100000"}, 2),  # 2.5 CPUs of time: 2 threads (a third would be throttled)
    ({"cpu.max": "50000 100000"}, 1),  # half a CPU: still one thread
    ({"cpu.max": "1600000 100000"}, 8),  # a limit above the affinity: the affinity
    ({}, 8),
])
def test_usable_cpus_are_the_affinity_within_the_cpu_limit(tmp_path, monkeypatch, files, cpus):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(threads, "CGROUP", write(tmp_path, files))
    assert usable_cpus() == cpus
