from xgraph.plugins import Plugin


class P(Plugin):
    def partition(self, graph):
        per_op = len(graph.get_ops()) // 7
        return per_op / 0


def get_plugin():
    return P()
