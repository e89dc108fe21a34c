import copy

import pytest


@pytest.fixture
def restore_verl_registries():
    """Snapshots verl's advantage-estimator registry and puts it back after the test."""
    from verl.trainer.ppo import core_algos

    saved = copy.copy(core_algos.ADV_ESTIMATOR_REGISTRY)
    yield core_algos.ADV_ESTIMATOR_REGISTRY
    core_algos.ADV_ESTIMATOR_REGISTRY.clear()
    core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)
