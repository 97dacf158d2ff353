"""Registries as one object: built from the hooks, passed down, changed by registration, never frozen."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph import Graph, Runner
from xgraph.devices import DeviceSpec, get_devices
from xgraph.errors import PluginError
from xgraph.hookspecs import hookimpl
from xgraph.registries import BUILTIN_EXTENSIONS, Registries, default_registries

#: An installed-package-like extension: one kernel through the xgraph_kernels hook.
EXTENSION = textwrap.dedent('''
    import numpy as np
    from xgraph.hookspecs import hookimpl
    from xgraph.kernels import kernel

    @hookimpl
    def xgraph_kernels(registry):
        kernel("Triple", domain="test.hooked", devices=("CPU",), registry=registry)(lambda x: x * np.float32(3))
''')


def triple_model():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Triple", ["r"], ["y"], name="triple", domain="test.hooked")]
    g = helper.make_graph(nodes, "hooked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.hooked", 1)])


@pytest.fixture
def extension_dir(tmp_path):
    (tmp_path / "hooked_ext.py").write_text(EXTENSION)
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("hooked_ext", None)


def test_a_hook_kernel_runs_in_ref_mode_in_a_fresh_process(extension_dir):
    """The process that runs the .xmodel touches nothing before `ref`: the hook-filled table must be used."""
    import importlib
    registries = Registries()
    registries.register_extension(importlib.import_module("hooked_ext"), name="hooked")
    compiled = xgraph.compile(triple_model(), registries=registries)
    assert compiled.get_op("triple").get_attr("kernel") == "plugin"
    path = extension_dir / "hooked.xmodel"
    compiled.serialize(str(path))
    script = textwrap.dedent(f'''
        import json, sys
        import numpy as np
        sys.path.insert(0, {str(extension_dir)!r})
        import xgraph, hooked_ext
        from xgraph.plugins.manager import register_extension
        register_extension(hooked_ext, name="hooked")
        graph = xgraph.load({str(path)!r})
        x = np.array([-1.0, 0.5, 2.0], np.float32)
        out = {{}}
        for mode in sys.argv[1:]:
            with xgraph.create_graph_runner(graph, mode=mode, kernels="numpy") as runner:
                out[mode] = runner.run({{"x": x}})[0].tolist()
        print(json.dumps(out))
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(xgraph.__file__).parents[1]),
                                                         os.environ.get("PYTHONPATH", "")]))
    for modes in (["ref"], ["run", "ref"]):
        done = subprocess.run([sys.executable, "-c", script, *modes], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout.strip().splitlines()[-1])
        for mode in modes:
            np.testing.assert_allclose(results[mode], [0.0, 1.5, 6.0])


def test_an_extension_registered_after_a_compile_counts_on_the_next_compile(extension_dir):
    import importlib
    registries = Registries()
    before = xgraph.compile(triple_model(), registries=registries)
    assert before.get_op("triple").get_attr("kernel") == "none"  # nothing knows Triple yet
    assert "CPU: Triple (domain 'test.hooked') has no numpy kernel" in before.get_op("triple").get_attr(
        "placement_reason")
    registries.register_extension(importlib.import_module("hooked_ext"), name="hooked")
    after = xgraph.compile(triple_model(), registries=registries)
    assert after.get_op("triple").get_attr("kernel") == "plugin"
    # the host's check read these registries: the CPU accepted the op (only the cheaper devices refused)
    assert after.get_op("triple").get_attr("device") == "CPU"
    assert "CPU:" not in after.get_op("triple").get_attr("placement_reason")
    with xgraph.create_graph_runner(after, kernels="numpy", registries=registries) as runner:
        np.testing.assert_allclose(runner.run({"x": np.array([-1, 1, 2], np.float32)})[0], [0, 3, 6])
    (triple_runner,) = [r for r in runner.runners.values() if "triple" in r.kernel_sources]
    assert triple_runner.plan.kernels["triple"].source == "plugin"
    assert triple_runner.kernel_sources["triple"] == "plugin:CPU"


def test_the_default_registries_follow_register_extension():
    class Extra:
        @hookimpl
        def xgraph_devices(self):
            return [DeviceSpec("TEST_LATE", cost_rank=40, memory="device", runner={"run": "null"})]

    extra = Extra()
    registries = default_registries()
    assert "TEST_LATE" not in get_devices()
    xgraph.compile(triple_model())  # the tables are built now ...
    registries.register_extension(extra, name="test_late")
    try:
        assert "TEST_LATE" in get_devices()  # ... and built again after the registration
        assert registries.devices["TEST_LATE"].runner == {"run": "null"}
    finally:
        registries.unregister_extension(extra)
    assert "TEST_LATE" not in get_devices()


def test_registries_are_independent_objects():
    mine, other = Registries(), Registries()
    spec = mine.register_device(DeviceSpec("TEST_MINE", memory="device", runner={"run": "cpu"}))
    assert mine.devices["TEST_MINE"] is spec
    assert "TEST_MINE" not in other.devices and "TEST_MINE" not in get_devices()
    with pytest.raises(PluginError, match="registered twice"):
        mine.register_device(DeviceSpec("AICORE"))
    assert mine.devices["AICORE"].source.endswith("aicore.toml")  # the failed registration changed nothing

    class Mine(Runner):
        def execute(self, inputs):
            return list(inputs)

    xgraph.register_runner("test_registries_mine", Mine, registries=mine)
    assert mine.runners["test_registries_mine"] is Mine
    assert "test_registries_mine" not in other.runners and "test_registries_mine" not in default_registries().runners


def test_the_builtins_are_registered_through_the_hooks_by_module_name():
    pm = Registries().plugin_manager
    assert [name for name in BUILTIN_EXTENSIONS if pm.get_plugin(name) is not None] == list(BUILTIN_EXTENSIONS)
    implementers = {hook: sorted(impl.plugin_name for impl in getattr(pm.hook, hook).get_hookimpls())
                    for hook in ("xgraph_devices", "xgraph_runners", "xgraph_kernels")}
    assert implementers == {"xgraph_devices": ["xgraph.plugins.builtin"],
                            "xgraph_runners": ["xgraph.runners.device_runners.hooks"],
                            "xgraph_kernels": ["xgraph.kernels.hooks"]}


def test_a_runner_gets_the_registries_it_was_created_with():
    registries = Registries()
    graph = Graph.from_onnx(triple_model())
    root = graph.get_root_subgraph()
    root.create_child_subgraph()
    sg = root.merge_children(root.get_children())
    sg.set_attr("device", "CPU")
    sg.set_attr("runner", {"run": "cpu"})
    from xgraph.errors import KernelError
    with pytest.raises(KernelError, match=r"'triple' \(Triple\).*no kernel on CPU"):
        Runner.create_runner(sg, kernels="numpy", registries=registries)
    registries.kernels.add(next(iter(_triple_kernels())))
    with Runner.create_runner(sg, kernels="numpy", registries=registries) as runner:
        np.testing.assert_allclose(runner.run([np.array([1, -1, 2], np.float32)])[0], [3, 0, 6])


def _triple_kernels():
    from xgraph.kernels import KernelRegistry, kernel
    table = KernelRegistry()
    kernel("Triple", domain="test.hooked", devices=("CPU",), registry=table)(lambda x: x * np.float32(3))
    return table
