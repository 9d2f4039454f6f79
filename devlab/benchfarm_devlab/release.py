"""The helm release the one-node cluster runs (`make demo-cluster`): its names, and whether its
operator is up. Apart from democluster.py, which installs it, because the lab asks before it
starts its own operator (one operator per lab) and democluster.py itself starts the lab.
"""

from __future__ import annotations

from benchfarm_devlab.env import kubectl

NAMESPACE = "benchfarm-system"
RELEASE = "benchfarm"
DEPLOYMENT = RELEASE      # the chart's fullname: a release named after the chart keeps its name


def ready_replicas() -> int:
    res = kubectl("get", "deployment", "-n", NAMESPACE, DEPLOYMENT, "-o",
                  "jsonpath={.status.readyReplicas}", check=False, capture=True)
    return int(res.stdout or 0) if res.returncode == 0 else 0
