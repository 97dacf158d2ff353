from xgraph.plugins import Plugin


def get_plugin():
    raise RuntimeError("no licence for this IP")
