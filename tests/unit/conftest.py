"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from tests.unit.fakeapi import FakeApi


@pytest.fixture
def kube() -> FakeApi:
    """An empty in-memory API server (`tests.unit.fakeapi.FakeApi`), fresh for each test."""
    return FakeApi()
