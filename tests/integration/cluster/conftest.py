"""The core tests again, with the store on a 3-node Valkey cluster.

Every stack made in this package (the shared one and those tests make for
themselves) stores into a cluster of its own, with a plain Valkey server as
the Celery broker, since Celery cannot use a cluster as its broker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.stack
from tests.stack import Stack, served_stack


@pytest.fixture(scope="package", autouse=True)
def cluster_store() -> Iterator[None]:
    """make_stack starts a cluster while this package's tests run."""
    previous, tests.stack.STORE = tests.stack.STORE, "cluster"
    try:
        yield
    finally:
        tests.stack.STORE = previous


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory, cluster_store: None) -> Iterator[Stack]:
    """Cluster store, broker, API and one inbox worker (with beat) for the package."""
    with served_stack(tmp_path_factory.mktemp("cluster-stack")) as s:
        yield s
