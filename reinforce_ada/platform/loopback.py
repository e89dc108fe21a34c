"""A run on one machine serves nothing to the network.

verl's vLLM HTTP servers and TransferQueue's sockets have no authentication of their own and
listen on the address Ray gives the node, which is the machine's network address even for a
local ``ray.init()``. torch's TCPStore (the rendezvous of every process group) listens on all
interfaces whatever its master address. So a training run on a laptop or a shared box would
answer anyone who can reach it.

When Ray is about to start a new local instance (``trainer.nnodes=1``, no Ray address given or
found), :func:`bind_to_loopback` runs on the driver before Ray starts:

* Ray's node address becomes 127.0.0.1 (``ray_kwargs.ray_init._node_ip_address``; Ray would
  turn a loopback address back into the network one unless told it is not forming a cluster),
  so every server that asks Ray for the node's address binds loopback; Ray's own ports follow;
* ``GLOO_SOCKET_IFNAME=lo``, ``NCCL_SOCKET_IFNAME=lo`` and ``VLLM_HOST_IP=127.0.0.1`` for gloo,
  NCCL and vLLM (unless already set);
* ``REINFORCE_ADA_LOOPBACK=1``, which makes :func:`activate` (called by the package's verl
  plug-in in every process) create the process groups' TCPStore on a socket bound to loopback.

Ray's token authentication is left as Ray sets it (on). A cluster run (``trainer.nnodes > 1``
or an existing Ray cluster) is left unchanged, and so is a run with ``reinforce_ada.loopback=off`` (for
what needs the node's address: metrics scraped from another host, a remote dashboard, nodes attached later,
transfer backends that take their host from Ray's node address) or with a node address the user set.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from datetime import timedelta

from omegaconf import DictConfig, open_dict

from reinforce_ada.core.config import RunConfig
from reinforce_ada.core.messages import say

LOOPBACK = "127.0.0.1"
ENV_FLAG = "REINFORCE_ADA_LOOPBACK"
# gloo's and NCCL's bootstrap listeners pick an interface by name; vLLM's multi-node paths read its host IP
LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "VLLM_HOST_IP": LOOPBACK}


def enabled() -> bool:
    return os.environ.get(ENV_FLAG) == "1"


def starts_local_ray(config: DictConfig) -> bool:
    """True if verl's ``ray.init`` will start a new single-machine Ray instance."""
    if config.trainer.get("nnodes", 1) != 1:
        return False
    ray_init = (config.get("ray_kwargs") or {}).get("ray_init") or {}
    from ray._private import services

    try:  # Ray's own resolution: RAY_ADDRESS, then a cluster started with `ray start` on this machine
        return services.canonicalize_bootstrap_address(ray_init.get("address"), ray_init.get("_temp_dir")) is None
    except Exception:  # an unreachable address given: not ours to start
        return False


def mode(config: DictConfig) -> str:
    """``reinforce_ada.loopback``: ``auto`` (the default) or ``off``.

    Raises:
        ConfigError: On another value, naming the key.
    """
    return RunConfig.from_config(config).loopback


def bind_to_loopback(config: DictConfig) -> bool:
    """On a single-machine run, makes Ray and the servers it hosts listen on 127.0.0.1 only, unless
    ``reinforce_ada.loopback=off`` or the user set Ray's node address to another address (then the run is left as
    verl sets it, with one printed line).

    Returns:
        True if the run was switched to loopback.
    """
    if mode(config) == "off" or not starts_local_ray(config):
        return False
    ray_init = (config.get("ray_kwargs") or {}).get("ray_init") or {}
    chosen = ray_init.get("_node_ip_address")
    if chosen not in (None, LOOPBACK):
        say(f"ray_kwargs.ray_init._node_ip_address={chosen} is yours: the run keeps it and listens "
            "where verl puts it (reinforce_ada.loopback switches to 127.0.0.1 only when no address is set)")
        return False
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # else Ray resolves 127.0.0.1 to the network address
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    with open_dict(config):
        config.ray_kwargs.ray_init._node_ip_address = LOOPBACK
    # the raylet and every worker inherit the driver's environment
    for name, value in LOOPBACK_ENV.items():
        os.environ.setdefault(name, value)
    os.environ[ENV_FLAG] = "1"
    activate()
    say("single-machine run: Ray, vLLM and TransferQueue listen on 127.0.0.1 only")
    return True


def activate() -> None:
    """Makes verl's process groups rendezvous on a TCPStore bound to loopback (idempotent)."""
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_reinforce_ada_loopback", False):
        return

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        import torch.distributed

        address = os.environ.get("MASTER_ADDR", "")
        if torch.distributed.is_initialized() or os.environ.get("DIST_INIT_METHOD") or address != LOOPBACK:
            return original(timeout_second=timeout_second, backend=backend)
        from verl.utils.device import get_device_name, get_nccl_backend

        rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        timeout = timedelta(seconds=timeout_second) if timeout_second is not None else None
        port = int(os.environ["MASTER_PORT"])
        store = _loopback_store(address, port, rank, world_size, timeout or timedelta(minutes=30))
        torch.distributed.init_process_group(
            backend=backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}",  # verl's default
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=timeout,
        )

    initialize_global_process_group_ray._reinforce_ada_loopback = True
    replace_process_group_init(initialize_global_process_group_ray)


def _loopback_store(address: str, port: int, rank: int, world_size: int, timeout: timedelta):
    """torch's TCPStore; on rank 0, listening on a socket bound to ``address`` (torch binds ``::``)."""
    from torch.distributed import TCPStore

    if rank != 0:
        return TCPStore(address, port, world_size, is_master=False, timeout=timeout)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen()
    fd = listener.detach()
    try:
        # without libuv, as verl's own create_tcp_store: libuv takes a listening socket only from torch 2.8 on
        return TCPStore(address, port, world_size, is_master=True, timeout=timeout, master_listen_fd=fd,
                        use_libuv=False)
    except Exception:
        socket.close(fd)
        raise


def replace_process_group_init(function) -> None:
    """Puts ``function`` in place of verl's ``initialize_global_process_group_ray``, where verl calls it."""
    import verl.utils.distributed as distributed

    distributed.initialize_global_process_group_ray = function
    for name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):  # bound by name at import
        module = sys.modules.get(name)
        if module is not None:
            module.initialize_global_process_group_ray = function
