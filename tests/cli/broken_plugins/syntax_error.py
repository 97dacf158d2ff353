from xgraph.plugins import Plugin

def get_plugin(:
    return Plugin()
