"""Long-run fuzzing entry point: mutate, run, and report anything but an XGraphError.

    python fuzz/run.py --target from_onnx --seconds 600
    python fuzz/run.py --target all --seconds 300 --seed 1000
    python fuzz/run.py --target deserialize --engine atheris --seconds 600

The built-in engine walks seeds `--seed`, `--seed + 1`, ... (each seed is one reproducible
case), in a worker process so that a crash in native code (protobuf, onnx shape inference)
is recorded as a finding and the run goes on. Findings are saved under `--out` as
`<target>/<seed>.bin` (the input) and `.txt` (what broke); reproduce one with
`--target T --seed S --cases 1`. The atheris engine (coverage-guided, `pip install atheris`)
drives the byte-level targets with the same structure-aware mutators.

Prints cases run, accepted, refused and findings per target; exit status 1 if anything
was found.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fuzz.targets import TARGETS, Deserialize, Finding, Target, run_case  # noqa: E402

BYTE_TARGETS = ("from_onnx", "deserialize")


def finding_key(finding: Finding) -> str:
    """The finding with names and numbers blanked, so repeats of one bug group together."""
    return f"{finding.kind}: " + re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", finding.message)[:160]


def save_finding(out: Path, target: Target, seed: int, finding: Finding | str, case: object) -> None:
    """Write the input and the description of a finding."""
    folder = out / target.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{seed}.bin").write_bytes(target.describe(case))
    text = str(finding) if isinstance(finding, str) else f"{finding}\n\n{finding.detail}"
    (folder / f"{seed}.txt").write_text(f"target {target.name} seed {seed}\n{text}\n")


def work(name: str, start: int, deadline: float, max_cases: int | None, out: Path, state: Path | None) -> dict:
    """Run seeds from `start` until the deadline; returns counts and findings (kind -> seeds)."""
    target = TARGETS[name]()
    counts: Counter = Counter()
    kinds: dict[str, list[int]] = {}
    slow: list[tuple[int, float]] = []
    seed = start
    fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if state else None

    def flush(final: bool = False) -> None:
        if fd is not None:
            blob = json.dumps({"seed": seed, "counts": counts, "kinds": kinds, "slow": slow, "final": final})
            os.ftruncate(fd, 0)
            os.pwrite(fd, blob.encode(), 0)

    while time.time() < deadline and (max_cases is None or counts["cases"] < max_cases):
        flush()
        t0 = time.perf_counter()
        outcome, finding = run_case(target, seed)
        took = time.perf_counter() - t0
        if took > 5:
            slow.append((seed, round(took, 1)))
        counts["cases"] += 1
        counts[outcome] += 1
        if finding is not None:
            kinds.setdefault(finding_key(finding), []).append(seed)
            save_finding(out, target, seed, finding, target.case(seed))
        seed += 1
    flush(final=True)
    return {"seed": seed, "counts": counts, "kinds": kinds, "slow": slow}


def supervise(name: str, start: int, seconds: float, max_cases: int | None, out: Path) -> dict:
    """Run `work` in worker processes, restarting after a native crash (recorded as a finding)."""
    deadline = time.time() + seconds
    total: Counter = Counter()
    kinds: dict[str, list[int]] = {}
    slow: list = []
    seed = start
    fd, state_name = tempfile.mkstemp(prefix=f"xgraph-fuzz-{name}-", suffix=".json")
    os.close(fd)
    state = Path(state_name)
    while time.time() < deadline and (max_cases is None or total["cases"] < max_cases):
        left = None if max_cases is None else max_cases - total["cases"]
        cmd = [sys.executable, __file__, "--worker", "--target", name, "--seed", str(seed),
               "--deadline", str(deadline), "--out", str(out), "--state", str(state)]
        if left is not None:
            cmd += ["--cases", str(left)]
        state.write_text("")  # a worker that dies before its first report must not reuse the last one
        proc = subprocess.run(cmd, cwd=ROOT)
        try:
            report = json.loads(state.read_text())
        except (OSError, ValueError):
            report = {"seed": seed, "counts": {}, "kinds": {}, "slow": []}
        total.update(report["counts"])
        slow += report["slow"]
        for k, seeds in report["kinds"].items():
            kinds.setdefault(k, []).extend(seeds)
        seed = report["seed"]
        if proc.returncode != 0 and not report.get("final"):
            # the worker died inside case `seed`: a native crash, hang killer, or OOM
            total["cases"] += 1
            total["finding"] += 1
            kind = f"worker died (exit {proc.returncode}) while running the case"
            kinds.setdefault(kind, []).append(seed)
            target = TARGETS[name]()
            try:
                save_finding(out, target, seed, kind, target.case(seed))
            except Exception as e:  # the case itself cannot be built: a harness bug, say so
                save_finding(out, target, seed, f"{kind}; building the case failed: {e!r}", b"")
            seed += 1
    state.unlink(missing_ok=True)
    return {"seed": seed, "counts": total, "kinds": kinds, "slow": slow}


def run_atheris(name: str, seconds: float, out: Path) -> None:
    """Coverage-guided fuzzing of a byte-level target with atheris (libFuzzer), same mutators."""
    import random

    import atheris

    from fuzz.mutators import mutate_bytes, mutate_model
    from fuzz.targets import onnx_corpus, xmodel_corpus

    # libFuzzer stops at the first finding: leave consumers of loaded graphs (report) to the built-in engine
    target = Deserialize(check_report=False) if name == "deserialize" else TARGETS[name]()
    (out / name).mkdir(parents=True, exist_ok=True)
    corpus = list(onnx_corpus() if name == "from_onnx" else xmodel_corpus())
    seeds_dir = out / f"{name}-corpus"
    seeds_dir.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(corpus):
        (seeds_dir / f"seed{i}").write_bytes(data)
    counts: Counter = Counter()

    def one_input(data: bytes) -> None:
        counts["cases"] += 1
        try:
            outcome = target.run(data)
        except Finding as f:
            save_finding(out, target, counts["cases"], f, data)
            raise
        counts[outcome] += 1

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        import onnx
        rng = random.Random(seed)
        if rng.random() < 0.5:
            try:
                return mutate_model(onnx.ModelProto.FromString(data), rng).SerializeToString()[:max_size]
            except Exception:  # not parseable any more: fall back to bytes
                pass
        return mutate_bytes(data, rng, corpus)[:max_size]

    args = [sys.argv[0], f"-max_total_time={int(seconds)}", "-print_final_stats=1", "-rss_limit_mb=4096",
            "-timeout=30", f"-artifact_prefix={out / name}{os.sep}", str(seeds_dir)]
    atheris.instrument_all()  # xgraph is already imported (by fuzz.targets): instrument what is loaded
    atheris.Setup(args, one_input, custom_mutator=mutator)
    atheris.Fuzz()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, fuzz each target for its share of the time, print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="all", choices=[*TARGETS, "all"])
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget (split across targets for 'all')")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases per target")
    parser.add_argument("--engine", choices=("builtin", "atheris"), default="builtin")
    parser.add_argument("--out", type=Path, default=ROOT / "fuzz" / "findings")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        work(args.target, args.seed, args.deadline, args.cases, args.out, args.state)
        return 0
    names = list(TARGETS) if args.target == "all" else [args.target]
    if args.engine == "atheris":
        if len(names) != 1 or names[0] not in BYTE_TARGETS:
            parser.error(f"--engine atheris drives one byte-level target: {', '.join(BYTE_TARGETS)}")
        run_atheris(names[0], args.seconds, args.out)
        return 0
    found = 0
    for name in names:
        report = supervise(name, args.seed, args.seconds / len(names), args.cases, args.out)
        c = report["counts"]
        print(f"{name}: {c['cases']} cases ({c['accepted']} accepted, {c['refused']} refused), "
              f"{c['finding']} findings, seeds {args.seed}..{report['seed'] - 1}")
        for kind, seeds in sorted(report["kinds"].items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(seeds)} x {kind}  (seeds {seeds[:5]}{' ...' if len(seeds) > 5 else ''})")
        for seed, took in report["slow"][:5]:
            print(f"  slow: seed {seed} took {took} s")
        found += c["finding"]
    if found:
        print(f"findings saved under {args.out}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
