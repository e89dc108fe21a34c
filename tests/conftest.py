import copy
import os

import pytest
from hypothesis import settings

import e2e_jobs

# Every verl run of the tests starts a Ray instance of its own. Without an address Ray joins the machine's running
# cluster if it finds one (an in-process test's, running beside a job, or the two-node job's), so runs could meet; a
# run that means to join a cluster names it in RAY_ADDRESS of its own.
os.environ["RAY_ADDRESS"] = "local"

# The in-process tests share the CPU with end-to-end jobs (e2e_jobs.py): a per-example wall-clock deadline would
# make the property tests flaky. Their sizes (max_examples) keep them short.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def pytest_collection_modifyitems(config, items):
    """Wall-clock tests first (before any end-to-end job starts), the tests that read end-to-end jobs last."""
    job_modules = {j.module for j in e2e_jobs.REGISTRY.values()}

    def place(item) -> int:
        if item.get_closest_marker("wall_clock"):
            return 0
        return 2 if getattr(item.module, "__name__", None) in job_modules else 1

    items.sort(key=place)  # stable: within each part, the order tests are written in


@pytest.fixture(scope="session")
def e2e(request, tmp_path_factory):
    """The session's end-to-end jobs: those of the selected tests' modules, and the jobs they need."""
    modules = {getattr(item.module, "__name__", None) for item in request.session.items}
    jobs = e2e_jobs.Jobs({j.name for j in e2e_jobs.REGISTRY.values() if j.module in modules}, tmp_path_factory.mktemp)
    request.config.stash[SUMMARY] = jobs.summary
    yield jobs
    import trainer_runs  # not at the top: it takes its copy of the environment after RAY_ADDRESS is set here

    trainer_runs.kill_started()


SUMMARY = pytest.StashKey()


JOBS_EARLY = os.environ.get("REINFORCE_ADA_E2E_JOBS", "early") == "early"


@pytest.fixture(autouse=True)
def _e2e_jobs_share_the_cpu(request, e2e):
    if JOBS_EARLY and request.node.get_closest_marker("wall_clock") is None:
        e2e.start()


def pytest_terminal_summary(terminalreporter, config):
    summary = config.stash.get(SUMMARY, None)
    lines = summary() if summary else []
    if lines:
        terminalreporter.section("end-to-end jobs (in the background; a test's duration is its wait)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
def restore_verl_registries():
    """Snapshots verl's advantage-estimator registry and puts it back after the test."""
    from verl.trainer.ppo import core_algos

    saved = copy.copy(core_algos.ADV_ESTIMATOR_REGISTRY)
    yield core_algos.ADV_ESTIMATOR_REGISTRY
    core_algos.ADV_ESTIMATOR_REGISTRY.clear()
    core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)
