from xgraph.plugins import Plugin


class P(Plugin):
    pass


def get_plugin():
    return P
