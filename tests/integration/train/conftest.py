"""Session fixture: the real multi-process runs that the training integration tests compare."""

from __future__ import annotations

import pytest

from tests.integration.train.runs import Runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("train-runs"))
