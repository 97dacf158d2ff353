"""The registries of a session as one object: plugin manager, devices, runners and kernels.

    >>> registries = Registries()                       # hook specs, the built-ins, entry points
    >>> registries.devices["AICORE"].cost_rank          # doctest: +SKIP
    >>> graph = xgraph.compile(model, registries=registries)             # doctest: +SKIP
    >>> runner = xgraph.create_graph_runner(graph, registries=registries)  # doctest: +SKIP

Everything that needs a device, a runner or a kernel takes ``registries=`` (compile,
placement, `Runner.create_runner`, `create_graph_runner`, `xgraph.backend`, the CLI) and
passes it down; None means the default instance (`default_registries()`), which
`xgraph.register_runner`, `register_extension` and `xgraph.devices.register_device` change.

The tables are built from the pluggy hooks (`xgraph.hookspecs`) when first read, and built
again after the plugin manager changes (`register_extension`), so an extension registered
after a compile takes effect on the next compile or run. Explicit registrations
(`register_runner`, `register_device`) are kept beside the hook results and survive that.

The built-ins are registered through the same hooks as installed packages, named by module
(`BUILTIN_EXTENSIONS`, as pytest lists its default plugins) and imported by name, so this
module does not import the runners it lists.
"""
from __future__ import annotations

import importlib
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Mapping

import pluggy

import xgraph.devices as _devices
import xgraph.hookspecs as hookspecs
from xgraph.devices import DeviceSpec
from xgraph.errors import PluginError
from xgraph.kernels.registry import KernelRegistry

#: The pluggy project name; installed packages register under the entry point group of that name.
PROJECT = "xgraph"

#: The built-in extensions, registered in this order before installed packages' entry points:
#: the built-in devices (their op-info TOML files), the device runners, the numpy kernels.
BUILTIN_EXTENSIONS = (
    "xgraph.plugins.builtin",
    "xgraph.runners.device_runners.hooks",
    "xgraph.kernels.hooks",
)


def make_plugin_manager(extensions: "tuple[str, ...] | list[str]" = BUILTIN_EXTENSIONS,
                        entry_points: bool = True) -> pluggy.PluginManager:
    """A plugin manager with xgraph's hook specs, the `extensions` modules and (if asked) the entry points."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in extensions:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise PluginError(f"built-in xgraph extension {name!r} cannot be imported: {e}") from e
        pm.register(module, name=name)
    if entry_points:
        try:
            pm.load_setuptools_entrypoints(PROJECT)
        except Exception as e:  # a broken third-party package must not hide which one it was
            raise PluginError(f"loading an installed '{PROJECT}' entry point failed: {e}") from e
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise PluginError(f"an installed xgraph extension implements an unknown hook: {e}") from e
    return pm


def _is_runner_class(value: Any) -> bool:
    """Duck-typed: a class with `execute` (`xgraph.runners` checks it subclasses Runner when it resolves it)."""
    return isinstance(value, type) and callable(getattr(value, "execute", None))


class Registries:
    """Plugin manager, device table, runner table and kernel table of one session.

    `plugin_manager` defaults to a new one (`make_plugin_manager`). The three tables are
    read-only views rebuilt from the hooks whenever the manager changed; change them with
    `register_extension`, `register_runner` and `register_device`.
    """

    def __init__(self, plugin_manager: pluggy.PluginManager | None = None) -> None:
        self._lock = threading.RLock()
        self._pm = plugin_manager
        self._explicit_devices: dict[str, DeviceSpec] = {}
        self._explicit_runners: dict[str, type] = {}
        self._hook_devices: dict[str, DeviceSpec] | None = None
        self._hook_runners: dict[str, type] | None = None
        self._kernels: KernelRegistry | None = None

    def __repr__(self) -> str:
        return f"Registries({len(self.devices)} devices, {len(self.runners)} runners)"

    # -- the plugin manager ---------------------------------------------------------------------
    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The pluggy manager the tables are built from (created on first use)."""
        with self._lock:
            if self._pm is None:
                self._pm = make_plugin_manager()
            return self._pm

    def register_extension(self, module_or_object: Any, name: str | None = None) -> None:
        """Register an object with @hookimpl functions (as an installed package would); the tables follow."""
        pm = self.plugin_manager
        with self._lock:
            try:
                pm.register(module_or_object, name=name)
                pm.check_pending()
            except (ValueError, pluggy.PluginValidationError) as e:
                if pm.is_registered(module_or_object) and not isinstance(e, ValueError):
                    pm.unregister(module_or_object)  # a failed registration changes nothing
                raise PluginError(f"cannot register xgraph extension {name or module_or_object!r}: {e}") from e
            self._invalidate()

    def unregister_extension(self, module_or_object: Any) -> None:
        """Undo `register_extension` (tests, notebooks); the tables follow."""
        with self._lock:
            if self.plugin_manager.is_registered(module_or_object):
                self.plugin_manager.unregister(module_or_object)
            self._invalidate()

    def _invalidate(self) -> None:
        self._hook_devices = self._hook_runners = self._kernels = None

    # -- devices --------------------------------------------------------------------------------
    @property
    def devices(self) -> dict[str, DeviceSpec]:
        """name -> DeviceSpec for every known device, cheapest (lowest cost_rank) first (a copy)."""
        with self._lock:
            if self._hook_devices is None:
                hook = self.plugin_manager.hook.xgraph_devices
                self._hook_devices = _devices.collect_devices(
                    (f"xgraph_devices hook of {impl.plugin_name}", impl.function()) for impl in hook.get_hookimpls())
            table = dict(self._hook_devices)
            for spec in self._explicit_devices.values():
                _devices.add_device(table, spec)
            return _devices.by_cost(table)

    def register_device(self, spec: "DeviceSpec | Mapping | str | Path") -> DeviceSpec:
        """Add a device (e.g. a plugin's free-text device); a name clash is a PluginError and changes nothing."""
        spec = _devices.as_device_spec(spec, "register_device")
        with self._lock:
            _devices.add_device(dict(self.devices), spec)  # raises on a clash, before anything changes
            self._explicit_devices[spec.name] = spec
        return spec

    def unregister_device(self, name: str) -> None:
        """Remove a device added with `register_device`."""
        with self._lock:
            self._explicit_devices.pop(name, None)

    # -- runners --------------------------------------------------------------------------------
    @property
    def runners(self) -> dict[str, type]:
        """Runner name -> class: the `xgraph_runners` hook's, then `register_runner`'s (which win)."""
        with self._lock:
            if self._hook_runners is None:
                found: dict[str, type] = {}
                for impl in self.plugin_manager.hook.xgraph_runners.get_hookimpls():
                    contribution = impl.function() or {}
                    if not isinstance(contribution, Mapping):
                        raise PluginError(f"the xgraph_runners hook of {impl.plugin_name} returned "
                                          f"{type(contribution).__name__}; return {{runner name: Runner subclass}}")
                    for name, cls in contribution.items():
                        if not _is_runner_class(cls):
                            raise PluginError(f"the xgraph_runners hook of {impl.plugin_name} returned {cls!r} for "
                                              f"runner {name!r}, which is not a subclass of xgraph.Runner")
                        found.setdefault(name, cls)
                self._hook_runners = found
            return {**self._hook_runners, **self._explicit_runners}

    def register_runner(self, name: str, runner_class: type) -> None:
        """Make `runner_class` available under `name` (`xgraph.register_runner` checks it is a Runner)."""
        if not isinstance(name, str) or not name:
            raise PluginError(f"register_runner needs a non-empty str name, got {name!r}")
        if not _is_runner_class(runner_class):
            raise PluginError(f"register_runner({name!r}, ...): {runner_class!r} is not a subclass of xgraph.Runner")
        with self._lock:
            self._explicit_runners[name] = runner_class

    # -- kernels --------------------------------------------------------------------------------
    @property
    def kernels(self) -> KernelRegistry:
        """The kernel table the `xgraph_kernels` hook filled (built-ins and installed packages)."""
        with self._lock:
            if self._kernels is None:
                table = KernelRegistry()
                self.plugin_manager.hook.xgraph_kernels(registry=table)
                self._kernels = table
            return self._kernels


_default_lock = threading.Lock()
_default: Registries | None = None


def default_registries() -> Registries:
    """The registries used wherever none is passed (one per process, never frozen: see the module docstring)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registries()
        return _default


#: The registries a stage running now was given (see `active`); read by `resolve(None)`.
_active: ContextVar[Registries | None] = ContextVar("xgraph_active_registries", default=None)


@contextmanager
def active(registries: Registries) -> Iterator[Registries]:
    """Within the block, `resolve(None)` means `registries` (in this thread or task only).

    A stage that was given registries (compile) runs its helpers inside this, so code that
    cannot take the object as a parameter yet (the op-info tables' named checks, such as
    `host_runnable`) still reads the caller's tables, not the default ones.
    """
    token = _active.set(registries)
    try:
        yield registries
    finally:
        _active.reset(token)


def resolve(registries: Registries | None) -> Registries:
    """`registries`; when None, the active ones (`active`), else the default instance."""
    if registries is None:
        return _active.get() or default_registries()
    if not isinstance(registries, Registries):
        raise PluginError(f"registries= takes an xgraph.registries.Registries, got {type(registries).__name__}")
    return registries


_devices.set_default_registries(default_registries)

__all__ = ["BUILTIN_EXTENSIONS", "PROJECT", "Registries", "active", "default_registries", "make_plugin_manager",
           "resolve"]
