"""Find and import partition plugins by name.

A name in ``{"plugins": "a,b"}`` resolves, first hit wins, to:

1. an installed entry point called ``a`` in group ``xgraph.plugins`` (its value is a module
   with ``get_plugin``, or the ``get_plugin`` callable itself, e.g. ``a = acme.ip:get_plugin``);
2. ``a.py`` or a package ``a/`` in a plugin directory: the ``plugin_path`` list first
   (``--plugin-path``), then ``XGRAPH_PLUGIN_PATH`` (``os.pathsep``-separated, like
   LD_LIBRARY_PATH; empty entries are ignored rather than meaning the current directory).
   An entry may also be a plugin file itself (``my_plugins/smfc.py`` provides ``smfc``);
3. an importable module ``a`` (dotted names allowed).

A plugin file or package is ordinary Python. Its directory is appended to `sys.path` (at
the end, so it never shadows an installed module), so the plugin can import its sibling
modules (``from mynpu import kernels`` next to ``mynpu_plugin.py``), and it is imported under
its own name (``a``), so a package plugin can import itself (``from a.runner import R``) as
well as relatively. When that name is already taken by another module (two directories
holding a ``softmax.py`` each, or an installed ``softmax``), the later file is imported under a
private name derived from its real path instead, so the two do not collide in `sys.modules`.
A file already imported under another name (e.g. by pytest) is reused rather than run twice
(a plugin that registers a runner at import must run once). Each file is imported at most
once per process; edit-and-reload needs a new process.

Listing plugins (`discover_plugins`) imports nothing: a plugin-path file counts as a plugin
when its source, parsed with `ast`, defines ``get_plugin`` at top level, so helper scripts
lying beside plugins are never run. A name that resolves nowhere gets a "did you mean" from
those listed.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from xgraph.errors import PluginError
from xgraph.plugins.base import PLUGIN_NAME_ATTR
from xgraph.plugins.location import DEBUG_HINT, at, code_location, innermost_location, module_roots

ENTRY_POINT_GROUP = "xgraph.plugins"
PATH_ENV = "XGRAPH_PLUGIN_PATH"

_PATH_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_lock = threading.RLock()
_by_file: dict[str, ModuleType] = {}


@dataclass(frozen=True)
class LoadedPlugin:
    """A resolved plugin: the name asked for, where it came from, and its `get_plugin` factory."""

    name: str
    source: str
    get_plugin: Callable[..., Any] = field(repr=False)
    module: ModuleType | None = field(default=None, repr=False)

    def code_roots(self) -> list[str]:
        """The plugin's own files (its module file, or its package folder): where its errors are located."""
        return module_roots(self.module)


def plugin_search_path(plugin_path: list[str] | None = None) -> list[str]:
    """The plugin directories in search order: `plugin_path`, then XGRAPH_PLUGIN_PATH entries."""
    if isinstance(plugin_path, (str, os.PathLike)):
        plugin_path = [plugin_path]
    dirs = [os.fspath(d) for d in (plugin_path or []) if os.fspath(d)]
    dirs += [d for d in os.environ.get(PATH_ENV, "").split(os.pathsep) if d]
    return dirs


def load_plugin(name: str, plugin_path: list[str] | None = None, *, importable: bool = True) -> LoadedPlugin:
    """Resolve `name` (entry point, then plugin path, then importable module) and import it.

    `importable=False` skips the last step: a name read from a model file must only find
    plugins the user installed or put on the plugin path, never an arbitrary module.
    """
    if not isinstance(name, str) or not name.strip():
        raise PluginError(f"a plugin name must be a non-empty str, got {name!r}; "
                          'list plugins as {"plugins": "a,b"}')
    name = name.strip()
    with _lock:
        looked: list[str] = []
        found = _from_entry_point(name, looked)
        if found is None:
            found = _from_plugin_path(name, plugin_search_path(plugin_path), looked)
        if found is None and importable:
            found = _from_module(name, looked)
        if found is None:
            known = [n for n, _ in discover_plugins(plugin_path)]
            close = difflib.get_close_matches(name, known, 1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PluginError(f"no plugin named {name!r}{hint}: looked for " + "; ".join(looked) +
                              ". Check the spelling, add the plugin's directory with --plugin-path DIR "
                              f"or {PATH_ENV}, or install it (entry point group {ENTRY_POINT_GROUP!r})")
        return found


def discover_plugins(plugin_path: list[str] | None = None,
                     skipped: "list[str] | None" = None) -> list[tuple[str, str]]:
    """(name, source) of every plugin findable without importing it: entry points, then plugin-path files whose
    source defines a top-level ``get_plugin``. `skipped` (when given) receives the other .py files' paths."""
    result: list[tuple[str, str]] = []
    seen: set[str] = set()
    for ep in _entry_points():
        if ep.name not in seen:
            seen.add(ep.name)
            result.append((ep.name, f"entry point {ep.name} = {ep.value}"))
    for stem, path in _plugin_path_files(plugin_search_path(plugin_path)):
        if stem in seen:
            continue
        if not defines_get_plugin(path):
            if skipped is not None:
                skipped.append(os.path.abspath(path))
            continue
        seen.add(stem)
        result.append((stem, os.path.abspath(path)))
    return result


def _plugin_path_files(entries: list[str]) -> list[tuple[str, str]]:
    """(name, file) of each candidate in the plugin path: a .py entry itself, else the .py files and packages of a
    directory entry (not private or test_ ones)."""
    found = []
    for d in entries:
        if os.path.isfile(d):
            stem = os.path.basename(d)[:-3]
            if d.endswith(".py") and _PATH_NAME.fullmatch(stem):
                found.append((stem, d))
            continue
        if not os.path.isdir(d):
            continue
        for entry in sorted(os.listdir(d)):
            path = os.path.join(d, entry)
            if entry.endswith(".py") and os.path.isfile(path):
                stem = entry[:-3]
            elif os.path.isfile(os.path.join(path, "__init__.py")):
                stem, path = entry, os.path.join(path, "__init__.py")
            else:
                continue
            if _PATH_NAME.fullmatch(stem) and not stem.startswith(("_", "test_")):
                found.append((stem, path))
    return found


def defines_get_plugin(path: str) -> bool:
    """True when the Python file at `path` defines or imports ``get_plugin`` at top level (read with ast, never run).

    A file that does not parse counts as a plugin: importing it is what names its syntax error.

        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        ...     _ = f.write("import os\nprint('a script')\n")
        >>> defines_get_plugin(f.name)
        False
    """
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (SyntaxError, ValueError):
        return True
    except OSError:
        return False
    statements = list(tree.body)
    for node in statements:
        if isinstance(node, (ast.If, ast.Try)):  # `try: ... except ImportError:` around a definition
            statements += node.body + node.orelse + [n for h in getattr(node, "handlers", []) for n in h.body]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == "get_plugin":
            return True
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (alias.asname or alias.name) == "get_plugin" for alias in node.names):
            return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "get_plugin" for t in targets):
                return True
    return False


# -- 1. entry points -----------------------------------------------------------------------------
def _entry_points() -> list:
    # Looked up through the module attribute on every call, so tests can monkeypatch it.
    try:
        return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as e:  # a broken installed distribution must say so, not hide every plugin
        raise PluginError(f"reading installed entry points of group {ENTRY_POINT_GROUP!r} failed: {e}") from e


def _from_entry_point(name: str, looked: list[str]) -> LoadedPlugin | None:
    eps = _entry_points()
    matches = {ep.value: ep for ep in eps if ep.name == name}
    if not matches:
        installed = ", ".join(sorted({ep.name for ep in eps})) or "none installed"
        looked.append(f"an entry point {name!r} in group {ENTRY_POINT_GROUP!r} ({installed})")
        return None
    if len(matches) > 1:
        raise PluginError(f"plugin {name!r} is ambiguous: installed entry points in group {ENTRY_POINT_GROUP!r} "
                          f"point to {sorted(matches)}; uninstall one of the distributions")
    ep = next(iter(matches.values()))
    source = f"entry point {ep.name} = {ep.value}"
    try:
        obj = ep.load()
    except Exception as e:
        raise PluginError(f"plugin {name!r}: importing {source} failed: {type(e).__name__}: {e}"
                          f"{at(innermost_location(e))} {DEBUG_HINT}; "
                          "fix or reinstall the distribution that provides it") from e
    if isinstance(obj, ModuleType):
        _tag(obj, name)
        return LoadedPlugin(name, source, _factory(obj, name, source), obj)
    if callable(obj):
        return LoadedPlugin(name, source, obj, sys.modules.get(getattr(obj, "__module__", "") or ""))
    raise PluginError(f"plugin {name!r}: {source} is a {type(obj).__name__}, not a module or get_plugin "
                      "callable; point the entry point at the module or at its get_plugin function")


# -- 2. plugin directories -----------------------------------------------------------------------
def _from_plugin_path(name: str, dirs: list[str], looked: list[str]) -> LoadedPlugin | None:
    if not _PATH_NAME.fullmatch(name):
        looked.append(f"no plugin directory ({name!r} is not a plain file name)")
        return None
    shown = []
    for d in dirs:
        if os.path.isfile(d):  # a plugin file given itself
            stem = os.path.basename(d)[:-3] if d.endswith(".py") else ""
            if stem == name:
                candidate = os.path.abspath(d)
                module = _import_file(name, candidate, False)
                return LoadedPlugin(name, candidate, _factory(module, name, candidate), module)
            shown.append(f"{os.path.abspath(d)} (a file, providing {stem!r})" if stem else
                         f"{os.path.abspath(d)} (not a .py file)")
            continue
        directory = os.path.abspath(d)
        package = os.path.join(directory, name, "__init__.py")
        single = os.path.join(directory, name + ".py")
        for candidate, is_package in ((package, True), (single, False)):
            if os.path.isfile(candidate):
                module = _import_file(name, candidate, is_package)
                return LoadedPlugin(name, candidate, _factory(module, name, candidate), module)
        shown.append(directory if os.path.isdir(directory) else f"{directory} (does not exist)")
    where = ", ".join(shown) if shown else f"none given (--plugin-path, {PATH_ENV} unset)"
    looked.append(f"{name}.py or {name}/__init__.py in the plugin path [{where}]")
    return None


def _import_file(name: str, path: str, is_package: bool) -> ModuleType:
    """Import a plugin file once per real path: under its own name when free, else a private one."""
    real = os.path.realpath(path)
    module = _by_file.get(real) or _already_imported(real)
    if module is not None:
        _by_file[real] = module
        _tag(module, name)
        return module
    directory = os.path.dirname(os.path.dirname(real) if is_package else real)
    added = directory not in sys.path
    if added:
        sys.path.append(directory)  # siblings and the plugin's own package import by plain name
    module_name = name if _plain_name_is_ours(name, real) else \
        f"_xgraph_plugin_{name.replace('-', '_')}_{hashlib.sha1(real.encode()).hexdigest()[:12]}"
    locations = [os.path.dirname(real)] if is_package else None
    spec = importlib.util.spec_from_file_location(module_name, real, submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {name!r}: {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    setattr(module, PLUGIN_NAME_ATTR, name)
    before = set(sys.modules)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        for key in set(sys.modules) - before:  # the plugin and whatever it imported from its folder
            if _is_under(sys.modules[key], directory) or key == module_name:
                del sys.modules[key]
        if added and directory in sys.path:
            sys.path.remove(directory)
        if not isinstance(e, Exception):
            raise
        where = code_location(e, [os.path.dirname(real) if is_package else real]) or innermost_location(e)
        raise PluginError(f"plugin {name!r}: importing {path} failed: {type(e).__name__}: {e}{at(where)} "
                          f"{DEBUG_HINT}; fix the error in the plugin file") from e
    _by_file[real] = module
    return module


def _plain_name_is_ours(name: str, real: str) -> bool:
    """True when `name` is a free module name that resolves to the file `real` (so no other module is shadowed)."""
    if not _MODULE_NAME.fullmatch(name) or "." in name or name in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and isinstance(spec.origin, str) and os.path.realpath(spec.origin) == real


def _is_under(module: ModuleType | None, directory: str) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and os.path.realpath(file).startswith(os.path.realpath(directory) + os.sep)


def _already_imported(real: str) -> ModuleType | None:
    """A module already in sys.modules whose file is `real` (e.g. imported by pytest), else None."""
    base = os.path.basename(real)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.basename(file) == base and os.path.realpath(file) == real:
            return module
    return None


# -- 3. importable modules -----------------------------------------------------------------------
def _from_module(name: str, looked: list[str]) -> LoadedPlugin | None:
    if not _MODULE_NAME.fullmatch(name):
        looked.append(f"no importable module ({name!r} is not a module name)")
        return None
    if name not in sys.modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            looked.append(f"an importable module {name!r} (not found on sys.path)")
            return None
    try:
        module = importlib.import_module(name)
    except Exception as e:
        raise PluginError(f"plugin {name!r}: importing module {name!r} failed: {type(e).__name__}: {e}"
                          f"{at(innermost_location(e))} {DEBUG_HINT}; fix the error in the plugin module") from e
    _tag(module, name)
    source = f"module {name} ({getattr(module, '__file__', None) or 'built in'})"
    return LoadedPlugin(name, source, _factory(module, name, source), module)


# -- shared --------------------------------------------------------------------------------------
def _tag(module: ModuleType, name: str) -> None:
    """Remember the name a module was loaded by (Plugin.get_plugin_name's default), unless set."""
    if not getattr(module, PLUGIN_NAME_ATTR, None):
        setattr(module, PLUGIN_NAME_ATTR, name)


def _factory(module: ModuleType, name: str, source: str) -> Callable[[], Any]:
    factory = getattr(module, "get_plugin", None)
    if factory is None:
        where = f"{getattr(module, '__file__', None)}:1" if getattr(module, "__file__", None) else None
        raise PluginError(f"plugin {name!r} ({source}) has no get_plugin() function{at(where)}; add "
                          "`def get_plugin(): return MyPlugin()` returning an xgraph.plugins.Plugin")
    if not callable(factory):
        where = f"{getattr(module, '__file__', None)}:1" if getattr(module, "__file__", None) else None
        raise PluginError(f"plugin {name!r} ({source}): get_plugin is a {type(factory).__name__}, "
                          f"not a function{at(where)}; define `def get_plugin(): ...`")
    return factory

