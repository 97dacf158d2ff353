"""A short, seeded run of every fuzz target (fuzz/run.py runs them for as long as you like).

Each case is reproducible from its seed: `python fuzz/run.py --target T --seed S --cases 1`.
The invariant: only XGraphError escapes, a failure leaves the graph and the disk as they
were, and what is accepted is consistent. Each chunk also checks that the mutators still
produce both accepted and refused inputs, so a broken harness cannot pass silently.
"""
from __future__ import annotations

from collections import Counter

import pytest

from fuzz.targets import Deserialize, TARGETS, run_case

#: (target, first seed, cases): about 50 s in total on one core, split so xdist can spread it.
BUDGET = [
    ("from_onnx", 0, 700), ("from_onnx", 700, 700),
    ("from_onnx_file", 0, 500),
    ("deserialize", 0, 1500),
    ("compile", 0, 1200),
    ("compile_model", 0, 800),
    ("plugin_chain", 0, 150), ("plugin_chain", 150, 150),
    ("cli", 0, 120),
    ("runner_api", 0, 300),
    ("xmodel_attrs", 0, 300),
    ("side_file", 0, 150),
    ("gears_meta", 0, 150),
    ("input_dir", 0, 80),
    ("calibration", 0, 60),
]


def make(name: str):
    # xgraph.report of hostile files is left to the long run (fuzz/run.py), which checks it too
    return Deserialize(check_report=False) if name == "deserialize" else TARGETS[name]()


@pytest.mark.parametrize("name, start, cases", BUDGET, ids=[f"{n}-{s}" for n, s, _ in BUDGET])
def test_only_xgraph_errors_escape_and_failures_change_nothing(name, start, cases):
    target = make(name)
    outcomes: Counter = Counter()
    findings = []
    for seed in range(start, start + cases):
        outcome, finding = run_case(target, seed)
        outcomes[outcome] += 1
        if finding is not None:
            findings.append(f"seed {seed}: {finding}\n{finding.detail}")
    print(f"{name} seeds {start}..{start + cases - 1}: {dict(outcomes)}")
    assert not findings, f"{len(findings)} of {cases} cases broke the invariant:\n" + "\n".join(findings[:3])
    assert outcomes["accepted"] >= cases // 20 and outcomes["refused"] >= cases // 20, outcomes
