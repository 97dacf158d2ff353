import xgraph
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin


class NeedsDevice(xgraph.Runner):
    def __init__(self, subgraph, mode):
        raise RuntimeError("no /dev/npu0: is the driver loaded?")

    def execute(self, inputs):
        return []


xgraph.register_runner("npu_needs_device", NeedsDevice)


class P(Plugin):
    def get_runner(self):
        return {"run": "npu_needs_device"}

    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, "Concat"))


def get_plugin():
    return P()
