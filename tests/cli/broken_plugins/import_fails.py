from xgraph.plugins import Plugin
import no_such_module_for_xgraph_checks

def get_plugin():
    return Plugin()
