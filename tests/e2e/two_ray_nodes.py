"""Two Ray nodes on this machine, one logical GPU each, as `ray start` makes them on two machines; held until
stdin closes. Prints the cluster's address on its first line.

Both listen on loopback (so a run sends nothing to any other address), which Ray allows only when told it is not
forming a multi-machine cluster; real nodes need none of that. Its environment is the nodes' (a job's actors get the
nodes' environment, not the launching shell's).

    python tests/e2e/two_ray_nodes.py
"""

import sys

from ray._private import ray_constants
from ray.cluster_utils import Cluster

ray_constants.ENABLE_RAY_CLUSTER = False
node = {"num_cpus": 8, "num_gpus": 1, "node_ip_address": "127.0.0.1"}
cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
try:
    cluster.add_node(**node)
    print(cluster.address, flush=True)
    sys.stdin.read()
finally:
    cluster.shutdown()
