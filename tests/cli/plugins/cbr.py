"""A sample plugin for the CLI tests: its only template is Conv -> BatchNormalization -> Relu|Clip."""
from xgraph import GraphTemplate
from xgraph.partition import filter_by_template, merge_subgraph
from xgraph.plugins import Plugin


def template():
    t = GraphTemplate("conv_bn_relu")
    conv = t.add_op("conv", {"Conv"})
    bn = t.add_op("bn", {"BatchNormalization"}, inputs=[conv])
    t.add_op("act", {"Relu", "Clip"}, inputs=[bn])
    return t


class ConvBnRelu(Plugin):
    def partition(self, graph):
        return merge_subgraph(filter_by_template(graph, template()))


def get_plugin():
    return ConvBnRelu()
