"""run_plugin_chain: run partition plugins in order, each one all-or-nothing.

Per plugin: ``get_plugin()`` -> ``get_plugin_name()``, ``get_device()``, ``get_runner()``
(checked before the graph is touched) -> ``partition(graph)`` -> checks on what it returned
and on what it changed -> ``compile(sg)`` once per returned subgraph, in the order of their
first op in ``graph.toposort()`` (deterministic) -> a check that compile only touched its
own subgraphs -> ``estimate(sg)`` per kept subgraph (attr "estimated_seconds") -> "device" and
"runner" attrs set (and "plugin_preference" when the plugin's ``claims`` is "prefer"). The
plugin's ``claims`` and ``get_device_spec()`` are read with its device (`xgraph.plugins.costs`).

Plugins are user code. Whatever goes wrong in one (an exception, a bad return value, a
change outside what it may touch) raises `PluginError` naming the plugin and the problem,
chained to the original exception, and the graph is restored to exactly what it was before
that plugin started (`GraphSnapshot`, over `Graph.snapshot()` / `Graph.restore()`). Plugins
that finished earlier keep their subgraphs.
Every name is resolved and imported before the first plugin runs, so a misspelt name
changes nothing at all.

What a plugin may change:

* ``partition``: merge unassigned depth-1 children (`merge_subgraph`), and set attrs on the
  subgraphs it returns. Not: attrs of the graph, ops, tensors or other subgraphs, the ops
  and tensors themselves (names included), the model-level facts (``opset_imports``,
  ``ir_version``, ``model_info``, ``functions``), or subgraphs assigned by earlier plugins.
  Weights are read-only arrays: writing into one raises.
* ``compile(sg)``: attrs of the returned subgraphs and anything below them (a device
  compiler may create deeper children), and attrs of their ops and those ops' output
  tensors. Checked once after all compile calls, so a violation names the plugin, not the
  subgraph.

``compile(sg)`` may raise `xgraph.plugins.Decline`: that subgraph goes back, split into the
children the plugin merged (`Subgraph.unmerge_child`), for the built-in placement to place,
and the record lists it under "declined" (subgraph, ops, reason); the plugin's other
subgraphs stand. With ``strict`` (the ``strict_plugins`` compile option) a decline is a
PluginError naming the plugin, the subgraph and the reason, and the graph is restored.

Before ``compile`` runs, each returned subgraph gets the attr "template_matches": one
``{"template": name, "roles": {template op: graph op name}}`` per template match (found
during this plugin's ``partition``) that lies wholly inside it.

Runner names are recorded, not resolved: the runtime looks them up in its registry.

Plugin options (``{"plugin_options": {"a": {...}}}``) reach a plugin through its factory:
``get_plugin(options)`` (or ``get_plugin(options=None)``) is called with a dict, empty when the
user gave none; a ``get_plugin()`` without such a parameter given options is a PluginError. A
module that declares its options (``get_options()``, `xgraph.plugins.settings`) gets them
checked and completed with defaults first; the record's "options" are the values used. Each
record also says how long the plugin took ("seconds") and which templates it matched with
("templates": name, calls, matches).
"""
from __future__ import annotations

import inspect
import time
from itertools import repeat
from operator import attrgetter, is_, methodcaller
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Callable

from xgraph.errors import PartitionError, PluginError
from xgraph.devices import get_devices
from xgraph.ir import Graph, Subgraph
from xgraph.ir.template import record_matches
from xgraph.plugins.base import RUNNER_MODES, Decline, Plugin
from xgraph.plugins.costs import PREFERENCE_ATTR, claim_mode, device_spec, record_estimates, spec_document
from xgraph.plugins.loader import LoadedPlugin, load_plugin
from xgraph.plugins.location import DEBUG_HINT, at, code_location, defined_at
from xgraph.plugins.settings import apply_options, declared_options
from xgraph.plugins.snapshot import GraphSnapshot
from xgraph.plugins.roles import set_template_matches
from xgraph.plugins.template_types import op_types_of, templates_held, unknown_type_warnings

if TYPE_CHECKING:
    from xgraph.ir import Op

_GRAPH = attrgetter("graph")
_METHODS = ("get_plugin_name", "get_device", "get_runner", "partition", "compile")
_OPTIONAL = ("get_memory", "get_device_spec", "estimate", "claims")


def run_plugin_chain(graph: Graph, names: "list[str] | str", plugin_path: list[str] | None = None,
                     plugin_options: "Mapping[str, Mapping[str, Any]] | None" = None, *,
                     strict: bool = False) -> list[dict[str, Any]]:
    """Run the named plugins in order on `graph`; one record per plugin: name, device, runner, subgraphs, source,
    options, seconds, templates, declined, warnings. `strict`: a declined subgraph is an error."""
    if not isinstance(graph, Graph):
        raise PluginError(f"run_plugin_chain needs an xgraph.Graph, got {type(graph).__name__}")
    names = _plugin_names(names)
    root = graph.get_root_subgraph()
    if graph.get_op_num() and root.is_leaf:
        raise PartitionError(f"graph {graph.name!r}: the root subgraph has no children yet; call "
                             "graph.get_root_subgraph().create_child_subgraph() before running plugins")
    options = dict(plugin_options or {})
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise PluginError(f"plugin options given for {', '.join(map(repr, unknown))}, which "
                          f"{'is' if len(unknown) == 1 else 'are'} not in the plugins {names}; list the plugin "
                          'in "plugins" or drop its "plugin_options" entry')
    loaded = [load_plugin(name, plugin_path) for name in names]
    return [_run_one(graph, plugin, dict(options.get(plugin.name) or {}), strict) for plugin in loaded]


def _plugin_names(names: "list[str] | str") -> list[str]:
    if isinstance(names, str):
        names = names.split(",")
    if not isinstance(names, Iterable):
        raise PluginError(f"plugin names must be a list of str (or 'a,b'), got {type(names).__name__}")
    result: list[str] = []
    for n in names:
        if not isinstance(n, str) or not n.strip():
            raise PluginError(f"plugin names must be non-empty str, got {n!r} in {names!r}")
        if n.strip() in result:
            raise PluginError(f"plugin {n.strip()!r} is listed twice; list each plugin once")
        result.append(n.strip())
    return result


class _Call:
    """Calls into one plugin, turning its exceptions into PluginErrors that name it."""

    def __init__(self, loaded: LoadedPlugin):
        self.label = f"plugin {loaded.name!r}"
        self.requested = loaded.name
        self.source = loaded.source
        self.roots = loaded.code_roots()
        self.factory = loaded.get_plugin
        self.plugin: Any = None  # the plugin object, once made: problems point at its methods

    def named(self, plugin_name: str) -> None:
        """Add the name the plugin gives itself to messages, when it differs from the requested one."""
        if plugin_name != self.requested:
            self.label = f"plugin {self.requested!r} ({plugin_name!r})"

    def __call__(self, what: str, func: Callable[..., Any], *args: Any, declinable: bool = False) -> Any:
        """func(*args), with any exception re-raised as a PluginError naming the plugin (`Decline` passes when
        `declinable`)."""
        try:
            return func(*args)
        except Decline as e:
            if declinable:
                raise
            raise PluginError(f"{self.label}: {what} raised Decline({e.reason!r}){at(code_location(e, self.roots))}; "
                              "only compile(subgraph) may decline") from e
        except Exception as e:
            where = code_location(e, self.roots)
            origin = "" if where else f" (plugin loaded from {self.source})"
            raise PluginError(f"{self.label}: {what} raised {type(e).__name__}: {e}{at(where)}{origin} "
                              f"{DEBUG_HINT}; fix the plugin or leave it out of \"plugins\"") from e

    def error(self, problem: str) -> PluginError:
        """A PluginError about this plugin, at the definition of the method the problem starts with (e.g.
        "partition() returned ...") when the plugin has it, else at its get_plugin."""
        method = problem.split("(", 1)[0]
        target = getattr(self.plugin, method, None) if method in _METHODS + _OPTIONAL else None
        where = defined_at(target) if target is not None else None
        return PluginError(f"{self.label}: {problem}{at(where or defined_at(self.factory))}")


def takes_options(factory: Callable[..., Any]) -> bool:
    """True when `factory` (a plugin's get_plugin) takes the plugin's options: its first parameter is
    positional and either required or named "options" (so `get_plugin(x=default)` closures are left alone)."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return False
    if not parameters or parameters[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                    inspect.Parameter.POSITIONAL_OR_KEYWORD):
        return False
    first = parameters[0]
    return first.default is inspect.Parameter.empty or first.name == "options"


def make_plugin(call: "_Call", loaded: LoadedPlugin, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(the plugin object, the options used): get_plugin(options) when it takes them, else get_plugin() (options
    must be empty); options checked and completed first when the module declares them (`get_options()`)."""
    schema = declared_options(loaded.name, loaded.module, call)
    if schema is not None:
        options = apply_options(loaded.name, schema, options)
        if schema and not takes_options(loaded.get_plugin):
            raise call.error("declares options (get_options()) but its get_plugin() takes no argument; define "
                             "get_plugin(options) to receive them")
    return _made(call, loaded, options), options


def _made(call: "_Call", loaded: LoadedPlugin, options: dict[str, Any]) -> Any:
    if takes_options(loaded.get_plugin):
        return call("get_plugin(options)", loaded.get_plugin, options)
    if options:
        raise call.error(f"was given plugin_options {sorted(options)} but its get_plugin() takes no argument; "
                         "define get_plugin(options) to receive them, or drop the plugin's \"plugin_options\"")
    return call("get_plugin()", loaded.get_plugin)


def _run_one(graph: Graph, loaded: LoadedPlugin, options: dict[str, Any] | None = None,
             strict: bool = False) -> dict[str, Any]:
    call = _Call(loaded)
    started = time.perf_counter()
    plugin, options = make_plugin(call, loaded, dict(options or {}))
    if isinstance(plugin, type):
        raise call.error(f"get_plugin() returned the class {plugin.__name__}; return an instance: {plugin.__name__}()")
    call.plugin = plugin
    missing = [m for m in _METHODS if not callable(getattr(plugin, m, None))]
    if missing:
        raise call.error(f"get_plugin() returned a {type(plugin).__name__} without {', '.join(missing)}; "
                         "return an instance of a subclass of xgraph.plugins.Plugin")
    name = call("get_plugin_name()", plugin.get_plugin_name)
    if not isinstance(name, str) or not name:
        raise call.error(f"get_plugin_name() returned {name!r}; return a non-empty str")
    call.named(name)
    device = call("get_device()", plugin.get_device)
    if not isinstance(device, str) or not device.strip():
        raise call.error(f"get_device() returned {device!r}; return a non-empty str such as 'SMFC'")
    runner = _check_runner(call, call("get_runner()", plugin.get_runner))
    memory = call("get_memory()", plugin.get_memory) if hasattr(plugin, "get_memory") else None
    if memory is None:  # as its device says: a plugin on "CPU" works in host memory
        spec = get_devices().get(device)
        memory = spec.memory if spec is not None else "device"
    if memory not in ("device", "host"):
        raise call.error(f"get_memory() returned {memory!r}; return 'device' (buffers shared with AI Core/AI CPU/DVPP) "
                         "or 'host' (every tensor in or out is copied)")

    claims = claim_mode(call, plugin)
    spec = device_spec(call, plugin, device, memory)
    held = op_types_of(templates_held(loaded.module, plugin))
    before = GraphSnapshot(graph)
    try:
        with record_matches(label=name) as matching:
            returned = call("partition(graph)", plugin.partition, graph)
        subgraphs = _check_partition(call, graph, returned)
        changed = before.changes(merges_allowed=True, free_subgraphs=subgraphs)
        if changed:
            raise call.error(f"partition() changed {'; '.join(changed)}; a partition may only merge unassigned "
                             "subgraphs (merge_subgraph) and return them; attach data in compile()")
        set_template_matches(subgraphs, matching.matches)
        declined: list[tuple[Subgraph, str]] = []
        if subgraphs and not _compile_does_nothing(plugin):
            # nothing runs between the check above and this one unless compile does: with no compile
            # call, or the base class's empty one, this check could only repeat what the first found
            children = graph.get_root_subgraph().get_children()
            for sg in subgraphs:
                try:
                    call(f"compile({sg.name!r})", plugin.compile, sg, declinable=True)
                except Decline as e:
                    declined.append((sg, e.reason))
                    if strict:
                        raise PluginError(f"{call.label}: declined subgraph {sg.name!r} ({sg.get_op_num()} op(s)): "
                                          f"{e.reason}{at(code_location(e, call.roots))}; \"strict_plugins\" makes a "
                                          "decline an error (drop it to let placement take the ops)") from e
            gone = {sg for sg, _ in declined}
            subgraphs = [sg for sg in subgraphs if sg not in gone]
            own_ops: set[Op] = set().union(*(sg.get_ops() for sg in subgraphs))
            changed = before.changes(children=children, free_subgraphs=subgraphs + list(gone), free_ops=own_ops)
            if changed:
                raise call.error(f"compile() changed {'; '.join(changed)}; compile may only set attrs of the "
                                 "subgraph it is given (and of that subgraph's ops and children), and a subgraph "
                                 "it declines must keep its ops as they were")
            _return_declined(call, graph, before, gone)
        record_estimates(call, plugin, subgraphs)
        graph.get_root_subgraph().set_children_attrs(
            subgraphs, {"device": device, "runner": dict(runner), "memory": memory, "plugin": name,
                        **({PREFERENCE_ATTR: True} if claims == "prefer" else {})})
    except BaseException:
        before.restore()
        raise
    templates = [{"name": t, "calls": c["calls"], "matches": c["matches"], "types": c["types"]}
                 for t, c in matching.templates.items()]
    held.update({t: c["op_types"] for t, c in matching.templates.items() if "op_types" in c})
    position = graph.topo_positions() if declined else {}
    return {"name": name, "device": device, "runner": dict(runner), "memory": memory, "claims": claims,
            "device_spec": spec_document(spec) if spec is not None else None,
            "subgraphs": [sg.name for sg in subgraphs], "source": loaded.source, "options": options,
            "ops": sum(sg.get_op_num() for sg in subgraphs), "seconds": round(time.perf_counter() - started, 6),
            "templates": templates, "warnings": unknown_type_warnings(name, held) if held else [],
            "declined": [{"subgraph": sg.name, "reason": reason,
                          "ops": [op.name for op in sorted(sg.get_ops(), key=position.__getitem__)]}
                         for sg, reason in declined]}


def _return_declined(call: _Call, graph: Graph, before: GraphSnapshot, declined: "set[Subgraph]") -> None:
    """Give each declined subgraph's ops back to placement: the children the plugin merged, as they were."""
    root = graph.get_root_subgraph()
    for sg in sorted(declined, key=attrgetter("name")):
        parts = before.children_before(sg.get_ops())
        if parts != [sg]:
            root.unmerge_child(sg, parts)
            continue
        if not sg.is_leaf:  # a child returned unmerged: only its attrs and what compile built below it to undo
            raise call.error(f"compile({sg.name!r}) created children under the subgraph, then declined it; "
                             "decline before building anything")
        state = before.state  # the captured attrs of `sg`, read from the columns
        was = state.subgraph_columns.attrs[state.subgraph_index[sg]]
        for key in list(sg.get_attrs()):
            if key not in was:
                sg.del_attr(key)
        for key, value in was.items():
            sg.set_attr(key, value)


def _compile_does_nothing(plugin: Any) -> bool:
    """True when `plugin.compile` is `Plugin.compile` itself (which returns None and touches nothing),
    reached the plain way: not overridden by its class or the instance, no custom attribute lookup."""
    cls = type(plugin)
    return (getattr(cls, "compile", None) is Plugin.compile and cls.__getattribute__ is object.__getattribute__
            and "compile" not in getattr(plugin, "__dict__", {}))


def _check_runner(call: _Call, runner: Any) -> dict[str, str]:
    if not isinstance(runner, dict):
        raise call.error(f"get_runner() returned a {type(runner).__name__}; return a dict of mode -> runner "
                         'name such as {"run": "cpu", "sim": "cpu", "ref": "cpu"}')
    bad = [(k, v) for k, v in runner.items() if not isinstance(k, str) or not isinstance(v, str) or not v]
    if bad:
        raise call.error(f"get_runner() entries {bad} are not str -> non-empty str; name registered runners")
    unknown = sorted(set(runner) - set(RUNNER_MODES))
    if unknown:
        raise call.error(f"get_runner() has unknown mode(s) {unknown}; valid modes are {list(RUNNER_MODES)}")
    # No "run" entry is allowed: a compile-only plugin (an IP being brought up) shows what it
    # would take; the report warns, and creating a runner for its subgraphs fails naming it.
    return dict(runner)


def _check_partition(call: _Call, graph: Graph, returned: Any) -> list[Subgraph]:
    """The returned subgraphs, checked, in graph order of their first op; PluginError on anything else."""
    if isinstance(returned, Subgraph):
        raise call.error(f"partition() returned a single Subgraph {returned.name!r}; return a set, e.g. {{sg}}")
    if returned is None or isinstance(returned, (str, bytes, dict)) or not isinstance(returned, Iterable):
        hint = " (did partition() forget to return?)" if returned is None else ""
        raise call.error(f"partition() returned {type(returned).__name__}{hint}; return a set of Subgraphs "
                         "(empty when it takes nothing)")
    items = call("iterating what partition() returned", list, returned)
    root = graph.get_root_subgraph()
    if not _plainly_fine(graph, root, items):
        _name_first_problem(call, graph, root, items)
    if len(items) < 2:
        return items
    ops_of = [sg.get_ops() for sg in items]
    _check_disjoint(call, items, ops_of)
    position = graph.topo_positions()
    first = [min(map(position.__getitem__, ops)) for ops in ops_of]
    return [items[i] for i in sorted(range(len(items)), key=first.__getitem__)]


def _plainly_fine(graph: Graph, root: Subgraph, items: list[Any]) -> bool:
    """True when `items` are distinct, unassigned children of the root of `graph` (checked in bulk, in C)."""
    return (all(map(isinstance, items, repeat(Subgraph))) and all(map(is_, map(_GRAPH, items), repeat(graph)))
            and len(set(items)) == len(items) and root.are_children(items)
            and not any(map(methodcaller("has_attr", "device"), items)))


def _name_first_problem(call: _Call, graph: Graph, root: Subgraph, items: list[Any]) -> None:
    """Raise the PluginError naming the first of `items` that is not a distinct unassigned child of the root."""
    seen: set[Subgraph] = set()
    for sg in items:
        if not isinstance(sg, Subgraph):
            raise call.error(f"partition() returned a {type(sg).__name__} ({sg!r:.60}) among its subgraphs; "
                             "return Subgraphs from filter_by_*/merge_subgraph")
        where = f"partition() returned subgraph {sg.name!r}"
        if sg.graph is not graph:
            raise call.error(f"{where} of another graph ({sg.graph.name!r}); return subgraphs of the graph "
                             "passed to partition()")
        if not root.is_child(sg):
            raise call.error(f"{where}, which is {_tree_position(sg, root)}; return depth-1 children of the root")
        if sg in seen:
            raise call.error(f"{where} twice; return each subgraph once")
        if sg.has_attr("device"):
            raise call.error(f"{where}, which is already assigned to device {sg.get_attr('device')!r}; "
                             "select only unassigned subgraphs (the filter_by_* helpers do)")
        seen.add(sg)


def _tree_position(sg: Subgraph, root: Subgraph) -> str:
    """Why `sg` is not a child of the root, in words."""
    if sg is root:
        return "the root itself"
    node = sg
    while node.get_parent() is not None:
        if not node.get_parent().is_child(node):
            return "no longer in the tree (merged away? return what merge_subgraph returned)"
        node = node.get_parent()
    return f"at depth {sg.depth} (a child of {sg.get_parent().name!r})"


def _check_disjoint(call: _Call, subgraphs: list[Subgraph], ops_of: "list[set[Op]]") -> None:
    """Siblings never share ops; this guards the invariant the checks above rely on."""
    if len(set().union(*ops_of)) == sum(map(len, ops_of)):
        return
    owner: dict[Op, Subgraph] = {}
    for sg, ops in zip(subgraphs, ops_of):
        for op in ops:
            other = owner.setdefault(op, sg)
            if other is not sg:
                raise call.error(f"partition() returned subgraphs {other.name!r} and {sg.name!r} that both hold "
                                 f"op {op.name!r}; return non-overlapping subgraphs")
