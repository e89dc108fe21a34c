"""Single-machine runs listen on loopback only; cluster runs are left alone (the end-to-end check of a
running job's sockets is in tests/e2e/test_v1_lifecycle_on_cpu.py)."""

import os
import socket
from datetime import timedelta

import psutil
import pytest
from hydra import compose, initialize_config_module

from reinforce_ada.platform import loopback


def load(*overrides):
    with initialize_config_module(config_module="reinforce_ada.configs", version_base=None):
        return compose(config_name="reinforce_ada", overrides=list(overrides))


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    from ray._private import ray_constants

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no `ray start` cluster of this machine's is seen
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", ray_constants.ENABLE_RAY_CLUSTER)
    for name in (loopback.ENV_FLAG, ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, *loopback.LOOPBACK_ENV):
        monkeypatch.delenv(name, raising=False)
    return ray_constants


def test_a_local_run_is_switched_to_loopback(clean_env):
    config = load()
    assert loopback.bind_to_loopback(config)
    assert config.ray_kwargs.ray_init._node_ip_address == "127.0.0.1"
    assert clean_env.ENABLE_RAY_CLUSTER is False
    assert os.environ[loopback.ENV_FLAG] == "1" and os.environ["GLOO_SOCKET_IFNAME"] == "lo"


@pytest.mark.parametrize(
    "overrides, env",
    [
        (["trainer.nnodes=2"], {}),
        (["+ray_kwargs.ray_init.address=head-node.invalid:6379"], {}),
        ([], {"RAY_ADDRESS": "head-node.invalid:6379"}),
    ],
)
def test_a_cluster_run_is_left_alone(clean_env, monkeypatch, overrides, env):
    """The address is only parsed, never contacted."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = load(*overrides)
    assert not loopback.bind_to_loopback(config)
    assert "_node_ip_address" not in config.ray_kwargs.ray_init
    assert loopback.ENV_FLAG not in os.environ and clean_env.ENABLE_RAY_CLUSTER is True


def test_the_process_group_store_listens_on_loopback_not_on_every_interface():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = loopback._loopback_store("127.0.0.1", port, rank=0, world_size=1, timeout=timedelta(seconds=30))
    store.set("key", "value")
    assert store.get("key") == b"value"
    mine = [c for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert [c.laddr.ip for c in mine if c.laddr.port == port] == ["127.0.0.1"]
    del store


def test_a_ray_start_cluster_on_this_machine_is_left_alone(clean_env, tmp_path):
    """Ray finds a cluster started with `ray start` through its address file; the address is never contacted."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("head-node.invalid:6379")
    config = load()
    assert not loopback.bind_to_loopback(config)
    assert "_node_ip_address" not in config.ray_kwargs.ray_init


def test_loopback_off_leaves_ray_and_the_servers_as_verl_sets_them(clean_env):
    config = load("reinforce_ada.loopback=off")
    assert not loopback.bind_to_loopback(config)
    assert "_node_ip_address" not in config.ray_kwargs.ray_init
    assert loopback.ENV_FLAG not in os.environ and "GLOO_SOCKET_IFNAME" not in os.environ
    assert clean_env.ENABLE_RAY_CLUSTER is True


def test_a_node_address_the_user_set_is_kept(clean_env, capsys):
    config = load("+ray_kwargs.ray_init._node_ip_address=10.1.2.3")
    assert not loopback.bind_to_loopback(config)
    assert config.ray_kwargs.ray_init._node_ip_address == "10.1.2.3"
    assert loopback.ENV_FLAG not in os.environ and "is yours" in capsys.readouterr().err
    chosen = load("+ray_kwargs.ray_init._node_ip_address=127.0.0.1")  # loopback asked for: the whole switch
    assert loopback.bind_to_loopback(chosen) and os.environ[loopback.ENV_FLAG] == "1"


def test_an_unknown_loopback_mode_names_the_key(clean_env):
    from reinforce_ada.core.config import ConfigError

    with pytest.raises(ConfigError, match="reinforce_ada.loopback: must be one of 'auto', 'off', got 'on'"):
        loopback.bind_to_loopback(load("reinforce_ada.loopback=on"))
    from reinforce_ada.integration.verl_config import prepare_config

    prepare_config(load("reinforce_ada.loopback=off"))  # not a sampler setting: the sampler accepts the section


def test_the_store_is_created_without_libuv_as_verl_creates_it(monkeypatch):
    """libuv takes a listening socket only from torch 2.8 on; verl's own store passes use_libuv=False."""
    import torch.distributed

    seen = {}

    class Recorder:
        def __init__(self, *args, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(torch.distributed, "TCPStore", Recorder)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    loopback._loopback_store("127.0.0.1", port, rank=0, world_size=1, timeout=timedelta(seconds=1))
    assert seen["use_libuv"] is False and "master_listen_fd" in seen
