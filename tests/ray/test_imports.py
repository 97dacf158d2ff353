"""Ray stays optional: importing xgraph, xgraph.ray or the CLI never imports it (no Ray needed here)."""
from __future__ import annotations

import subprocess
import sys


def test_nothing_imports_ray_until_it_is_used():
    code = ("import sys, xgraph, xgraph.ray, xgraph.cli.main, xgraph.cli.run_dir, xgraph.ray.batch, "
            "xgraph.ray.graph_runner, xgraph.ray.worker\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'ray'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
