import copy
import os

import pytest

# The end-to-end modules, longest first. scripts/test.sh runs two pytest-xdist workers with --dist loadscope: a module
# runs whole on one worker (its module-scoped verl runs start once), and starting the longest first keeps the two
# workers' shares even (verl's start-up keeps one core busy most of the time, so two runs share two cores well).
# Every verl run of the tests starts a Ray instance of its own. Without an address Ray joins the machine's running
# cluster if it finds one (a concurrent test's, such as the two-node cluster), so two workers' runs could meet; a test
# that means to join a cluster names it in RAY_ADDRESS of its own run.
os.environ["RAY_ADDRESS"] = "local"

E2E_LONGEST_FIRST = [
    "tests/e2e/test_v1_lifecycle_on_cpu.py",
    "tests/e2e/test_demo_run_on_cpu.py",
    "tests/e2e/test_learning_run_on_cpu.py",
    "tests/e2e/test_v1_async_on_cpu.py",
]


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process: the order tests are written in
        return
    rank = {path: i for i, path in enumerate(E2E_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture
def restore_verl_registries():
    """Snapshots verl's advantage-estimator registry and puts it back after the test."""
    from verl.trainer.ppo import core_algos

    saved = copy.copy(core_algos.ADV_ESTIMATOR_REGISTRY)
    yield core_algos.ADV_ESTIMATOR_REGISTRY
    core_algos.ADV_ESTIMATOR_REGISTRY.clear()
    core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)
