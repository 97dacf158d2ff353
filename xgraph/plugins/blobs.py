"""Checking a subgraph's compiled blob before its runner loads it (ONNX Runtime's EPContext idea).

A blob carries the compatibility string its plugin wrote (`Subgraph.set_blob`). When a runner
is created for the subgraph, the plugin recorded on it (the "plugin" attr the chain sets) is
found by name, through entry points and the plugin path only (a name read from a file never
imports an arbitrary module), and asked ``check_blob(compat)``:

- "ok": the runner loads the blob as it is;
- "recompile": the plugin's ``compile(subgraph)`` runs again on the graph's own subgraph, so
  the blob is rebuilt for the installed SDK (save the graph to keep it: the verdict says so);
- "unsupported": one `BlobError` naming the plugin, the subgraph and both compatibility strings.

A plugin without ``check_blob`` (duck typing) accepts every blob. The plugin is built with the
options the graph was compiled with (``plugin_options`` in the graph's "compile_options").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xgraph.devices.settings import recorded_options
from xgraph.errors import PluginError
from xgraph.plugins.loader import load_plugin

if TYPE_CHECKING:
    from xgraph.ir import Subgraph

VERDICTS = ("ok", "recompile", "unsupported")


class BlobError(PluginError):
    """A compiled blob its plugin cannot load and cannot rebuild."""


@dataclass(frozen=True)
class BlobCheck:
    """What happened to one subgraph's blob at load: the verdict, and the compat strings before and after."""

    subgraph: str
    plugin: str
    verdict: str
    compat: str
    now: str | None = None


def _plugin_options(subgraph: "Subgraph", plugin: str) -> dict[str, Any]:
    """The options `plugin` was compiled with (the graph's recorded compile options); GraphError when damaged."""
    options = recorded_options(subgraph.graph)
    found = (options.get("plugin_options") or {}).get(plugin)
    return dict(found) if isinstance(found, dict) else {}


def _make_plugin(subgraph: "Subgraph", name: str, plugin_path: "list[str] | None") -> tuple[Any, Any]:
    """(the plugin, its call wrapper: every call into the plugin raises a PluginError naming it)."""
    from xgraph.plugins.chain import _Call, make_plugin
    loaded = load_plugin(name, plugin_path, importable=False)
    call = _Call(loaded)
    plugin, _ = make_plugin(call, loaded, _plugin_options(subgraph, name))
    return plugin, call


def _current_compat(plugin: Any, call: Any) -> "str | None":
    blob_compat = getattr(plugin, "blob_compat", None)
    return call("blob_compat()", blob_compat) if callable(blob_compat) else None


def check_subgraph_blob(subgraph: "Subgraph", plugin_path: "list[str] | None" = None) -> "BlobCheck | None":
    """Ask the subgraph's plugin about its blob; recompile or refuse as it answers. None without a blob."""
    blob = subgraph.get_blob()
    if blob is None:
        return None
    name = subgraph.get_attr("plugin") if subgraph.has_attr("plugin") else None
    where = f"subgraph {subgraph.name!r}"
    if not isinstance(name, str) or not name:
        raise BlobError(f"{where} carries a compiled blob ({blob.compat!r}) but no 'plugin' attr naming who "
                        "compiled it, so it cannot be checked; compile the model again")
    plugin, call = _make_plugin(subgraph, name, plugin_path)
    check = getattr(plugin, "check_blob", None)
    if not callable(check):
        return BlobCheck(subgraph.name, name, "ok", blob.compat)
    verdict = call(f"check_blob({blob.compat!r})", check, blob.compat)
    if verdict not in VERDICTS:
        raise BlobError(f"plugin {name!r}: check_blob({blob.compat!r}) for {where} returned {verdict!r}; "
                        f"return one of {', '.join(VERDICTS)}")
    now = _current_compat(plugin, call)
    if verdict == "unsupported":
        raise BlobError(f"plugin {name!r} cannot load the compiled blob of {where}: it was built for "
                        f"{blob.compat!r} and this plugin builds {now or 'another version'!r}, which cannot "
                        "load it or rebuild it from the graph; install the SDK the blob was built with, or "
                        "compile the model again (xcompile) with the installed one")
    if verdict == "recompile":
        try:
            plugin.compile(subgraph)
        except PluginError:
            raise
        except Exception as e:
            raise BlobError(f"plugin {name!r}: recompiling the stale blob of {where} (built for {blob.compat!r}) "
                            f"failed: {type(e).__name__}: {e}; compile the model again") from e
        rebuilt = subgraph.get_blob()
        return BlobCheck(subgraph.name, name, "recompile", blob.compat, rebuilt.compat if rebuilt else now)
    return BlobCheck(subgraph.name, name, "ok", blob.compat, now)


__all__ = ["BlobCheck", "BlobError", "VERDICTS", "check_subgraph_blob"]
