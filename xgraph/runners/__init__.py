"""The runtime: a Runner per device subgraph (VART-like) and the GraphRunner that pipelines them."""
from xgraph.runners.graph_runner import GraphRunner, create_graph_runner
from xgraph.runners.runner import Runner, register_runner

__all__ = ["GraphRunner", "Runner", "create_graph_runner", "register_runner"]
