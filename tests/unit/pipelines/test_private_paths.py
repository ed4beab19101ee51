"""Run files are private to the operator's user, but a volume's mount point is not its to change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.paths import PRIVATE_DIR, private_dir


def test_directories_made_or_found_wider_become_0700(tmp_path: Path) -> None:
    wider = tmp_path / "state"
    wider.mkdir(mode=0o755)
    wider.chmod(0o755)
    run = private_dir(wider / "runs" / "r1", upto=wider)
    for directory in (wider, wider / "runs", run):
        assert directory.stat().st_mode & 0o777 == PRIVATE_DIR


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a directory to another user")
def test_a_mount_point_owned_by_another_user_is_left_as_it_is(tmp_path: Path) -> None:
    """In a Pod, a volume's root is root's (group fsGroup): chmod by the operator's user fails with
    EPERM, and the operator did not start (the chart's store and runs volumes)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    os.chown(volume, 4321, 65532)  # a uid not this process's, as root's is not the operator's in a Pod
    volume.chmod(0o2775)
    run = private_dir(volume / "runs" / "r1", upto=volume)
    assert volume.stat().st_mode & 0o7777 == 0o2775
    assert run.stat().st_mode & 0o777 == PRIVATE_DIR and (volume / "runs").stat().st_mode & 0o777 == PRIVATE_DIR
