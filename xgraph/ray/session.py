"""Joining Ray, and what xgraph asks of the cluster: worker environments, nodes, resource demands.

Ray is an optional extra (`pip install 'xgraph[ray]'`); `require_ray` is the one place that
imports it, so a missing Ray is one clear error instead of an ImportError deep in a stack.

A device's resource demand is a plain dict of Ray resource amounts, `{"AICORE": 1}` or
`{"CPU": 2, "DVPP": 1}`: "CPU", "GPU" and "memory" become Ray's num_cpus/num_gpus/memory,
every other key a custom resource (a node offers it with `ray start --resources`).
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Mapping

from xgraph.errors import RunnerError

#: Resource names Ray takes as actor options of their own rather than as custom resources.
_BUILTIN_RESOURCES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}


def require_ray():
    """The `ray` module; RunnerError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError as e:
        raise RunnerError(f"xgraph.ray needs Ray, which is not installed ({e}); install the extra: "
                          f"pip install 'xgraph[ray]'") from None
    return ray


def joining_env(runtime_env: Mapping[str, Any] | None = None) -> dict:
    """The job's runtime_env when joining a running cluster: the caller's, plus this process's PYTHONPATH.

    Workers of a Ray started elsewhere (`ray start`) do not inherit this process's environment;
    passing PYTHONPATH on makes them import the same xgraph as the driver when it comes from a
    source checkout on a shared file system (an installed xgraph needs nothing). A Ray started
    here needs none of this: its workers inherit the environment, and a runtime_env would cost
    seconds per actor (no prestarted worker can be reused for it).
    """
    env = dict(runtime_env or {})
    if os.environ.get("PYTHONPATH"):
        variables = dict(env.get("env_vars") or {})
        variables.setdefault("PYTHONPATH", os.environ["PYTHONPATH"])
        env["env_vars"] = variables
    return env


def connect(address: str | None = None, **init_options: Any) -> None:
    """Use the Ray this program already joined, else join `address` (or RAY_ADDRESS), else start one here.

    `address="auto"` joins the cluster `ray start` started on this host. A Ray started here
    keeps its dashboard and usage reporting off and logs warnings only; `init_options` go to
    `ray.init` unchanged.
    """
    ray = require_ray()
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    options: dict[str, Any] = {"logging_level": logging.WARNING}
    if address or os.environ.get("RAY_ADDRESS"):
        options["runtime_env"] = joining_env(init_options.pop("runtime_env", None))
    else:  # Ray would otherwise join whatever cluster last ran on this host; "auto" asks for that
        address = "local"
        options["include_dashboard"] = False
    options.update(init_options)
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = address or os.environ.get("RAY_ADDRESS") or "a new local Ray"
        raise RunnerError(f"cannot start or join Ray at {where}: {e}") from e


def actor_options(demand: Mapping[str, float]) -> dict[str, Any]:
    """Ray actor options for a resource demand ({"CPU": 1, "AICORE": 1} -> num_cpus=1, resources=...)."""
    options: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for name, amount in demand.items():
        if name in _BUILTIN_RESOURCES:
            options[_BUILTIN_RESOURCES[name]] = amount
        else:
            custom[name] = amount
    if custom:
        options["resources"] = custom
    return options


def check_demand(demand: Any, who: str) -> dict[str, float]:
    """`demand` as {resource name: amount >= 0}; RunnerError naming `who` for anything else."""
    if not isinstance(demand, Mapping):
        raise RunnerError(f"{who}: resources must be a dict of Ray resource amounts such as {{'AICORE': 1}}, "
                          f"got {demand!r}")
    checked = {}
    for name, amount in demand.items():
        if not isinstance(name, str) or isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                or amount < 0:
            raise RunnerError(f"{who}: resource {name!r} needs a non-negative number, got {amount!r}")
        checked[name] = float(amount)
    return checked


def alive_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes as Ray reports them (NodeID, NodeManagerAddress, Resources: totals)."""
    ray = require_ray()
    return [n for n in ray.nodes() if n.get("Alive")]


def nodes_offering(demand: Mapping[str, float], nodes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Live nodes whose total resources cover `demand` (what Ray could ever place there)."""
    nodes = alive_nodes() if nodes is None else nodes
    return [n for n in nodes if all(n.get("Resources", {}).get(name, 0.0) >= amount
                                    for name, amount in demand.items() if amount > 0)]


def unmet(demand: Mapping[str, float], key: str) -> str:
    """'' when some live node can host `demand`, else a sentence saying what is missing and what to do.

    `key` is what the demand is configured under (a device or subgraph name), for the hint.
    """
    nodes = alive_nodes()
    if nodes_offering(demand, nodes):
        return ""
    offered = sorted({name for n in nodes for name in n.get("Resources", {}) if not name.startswith("node:")})
    wanted = ", ".join(f"{k}={v:g}" for k, v in demand.items())
    custom = {k: v for k, v in demand.items() if k not in _BUILTIN_RESOURCES}
    start = "ray start --resources='" + json.dumps({k: int(v) if v == int(v) else v for k, v in custom.items()}) \
        + "'" if custom else "ray start --num-cpus=N"
    return (f"no live node offers Ray resources {{{wanted}}} (the {len(nodes)} live node(s) offer: "
            f"{', '.join(offered) or 'nothing'}); start a node with them ({start}) or give {key} other "
            f"resources (resources={{{key!r}: {{...}}}}; {{}} runs on any node)")


def describe_node(node_id: str, address: str) -> str:
    """'node 10.0.0.5 (3f2a1b9c)': how errors name a Ray node."""
    return f"node {address} ({node_id[:8]})"
