"""The library leaves the cyclic garbage collector as its caller set it; only the command lines tune it."""
import subprocess
import sys
import textwrap

LIBRARY_USER = textwrap.dedent('''
    import gc, os, sys, tempfile
    import numpy as np
    import xgraph
    from xgraph import Graph

    def state():
        return gc.isenabled(), gc.get_threshold()

    def still_frozen(objs):
        young = {id(o) for generation in range(3) for o in gc.get_objects(generation=generation)}
        return not any(id(o) in young for o in objs)

    class Node:
        pass

    kept = [Node() for _ in range(100)]
    gc.set_threshold(1234, 5, 6)
    if sys.argv[1] == "enabled":
        gc.freeze()  # the caller's freeze stays the caller's: nothing unfreezes it
    else:
        gc.disable()  # nothing frozen: nothing may be frozen afterwards either
    frozen = gc.get_freeze_count()
    before = state()
    g = Graph("g")
    x = g.create_input("x", [2, 8], np.float32)
    for i in range(40):
        x = g.create_op(f"r{i}", "Relu" if i % 2 else "Sigmoid", inputs=[x]).get_output_tensor()
    g.set_outputs([x])
    compiled = xgraph.compile(g)
    path = os.path.join(tempfile.mkdtemp(), "m.xmodel")
    compiled.serialize(path)
    loaded = Graph.deserialize(path)
    with xgraph.create_graph_runner(loaded) as runner:
        out = runner.run({"x": np.ones((2, 8), np.float32)})
    assert out[0].shape == (2, 8), out
    assert state() == before, (state(), before)
    assert gc.get_freeze_count() <= frozen, (gc.get_freeze_count(), frozen)  # frozen objects may die, none are added
    assert still_frozen(kept) if frozen else not still_frozen(kept)
    print("ok", state())
''')


def _run(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_compile_serialize_load_and_run_leave_an_enabled_collector_as_it_was():
    assert "ok (True, (1234, 5, 6))" in _run(LIBRARY_USER, "enabled")


def test_compile_serialize_load_and_run_leave_a_disabled_collector_as_it_was():
    assert "ok (False, (1234, 5, 6))" in _run(LIBRARY_USER, "disabled")


def test_the_command_lines_raise_the_young_threshold_once():
    code = textwrap.dedent('''
        import gc, sys
        from xgraph.cli import main, xcompile
        from xgraph.cli.common import COLLECTOR_THRESHOLD
        gc.set_threshold(700, 10, 10)
        for entry in (main.main, xcompile.main):
            try:
                entry(["--version"])
            except SystemExit:
                pass
            assert gc.get_threshold() == COLLECTOR_THRESHOLD, gc.get_threshold()
            gc.set_threshold(700, 10, 10)
        print("ok")
    ''')
    assert "ok" in _run(code)
