"""`xgraph run --input-dir DIR [--ray [ADDRESS]]`: one run per file of a folder, and runs on Ray.

Each image, .npy or .npz file of DIR is one run (read as `--input` reads a file); with
--output-dir OUT its outputs go to OUT/<file stem>/<output>.npy. Without --ray the local
graph runner takes the files a few at a time; with --ray, `--concurrency` replicas of the
model run over them as a Ray Dataset on the cluster at ADDRESS (or RAY_ADDRESS, or a Ray
started here), and the driver writes the outputs as they arrive. `--ray` with `--input`
instead runs the one input through the Ray graph runner, a Ray actor per device.

Ray is imported only here and only when --ray is given.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from xgraph.errors import XGraphError

if TYPE_CHECKING:
    from xgraph.ir import Graph


def add_arguments(p: argparse.ArgumentParser) -> None:
    """--input-dir, --ray [ADDRESS], --concurrency, --batch-size."""
    p.add_argument("--input-dir", metavar="DIR", help="run once per image/.npy/.npz file of DIR (outputs to "
                   "--output-dir OUT/<file stem>/<output>.npy)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray (needs xgraph[ray]): at ADDRESS, else RAY_ADDRESS, else a Ray started here; "
                   "with --input-dir, replicas of the model over the files; with --input, a Ray actor per device")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="with --ray --input-dir: replicas of the model, each on one CPU (default 1)")
    p.add_argument("--batch-size", type=int, default=16, metavar="N",
                   help="with --ray --input-dir: files per batch handed to a replica (default 16)")


def ray_graph_runner(args: argparse.Namespace, graph: "Graph"):
    """The Ray graph runner for `xgraph run --ray --input ...`."""
    import xgraph.ray
    return xgraph.ray.create_graph_runner(graph, args.mode, args.kernels, address=args.ray or None)


def _output_dirs(files: list[Path], out: Path | None) -> dict[str, Path | None]:
    """Per file name, the folder its outputs go to: OUT/<file stem>, the stem made a safe, distinct folder name.

    No folder can leave OUT (no separators, no name starting with a dot, checked on the resolved
    path too) and no two files share one (a second `a` becomes `a-2`, case-insensitively).
    """
    from xgraph.cli.outputs import distinct_file_names
    if out is None:
        return {f.name: None for f in files}
    root = out.resolve()
    folders = {}
    for f, stem in zip(files, distinct_file_names([f.stem for f in files])):
        folder = out / stem
        if folder.resolve().parent != root:
            raise XGraphError(f"--input-dir: the outputs of {f.name} would go to {folder.resolve()}, outside "
                              f"--output-dir {out}; remove the link {folder} or choose another --output-dir")
        folders[f.name] = folder
    return folders


def _local_results(args: argparse.Namespace, graph: "Graph", files: list[Path]) -> Iterator[tuple[str, Any, str]]:
    """(path, outputs or None, error) per file, run a few at a time through the local graph runner."""
    import xgraph
    from xgraph.runners.input_files import input_specs, read_file
    specs = input_specs(graph.get_input_tensors())
    with xgraph.create_graph_runner(graph, args.mode, args.kernels) as runner:
        pending: list[tuple[str, Any]] = []
        for f in files:
            try:
                feeds = read_file(f, specs)
                pending.append((str(f), runner.execute_async(feeds)))
            except XGraphError as e:
                pending.append((str(f), e))
            while len(pending) > runner.max_jobs_in_flight - 1:
                yield _collect(runner, *pending.pop(0))
        for path, job in pending:
            yield _collect(runner, path, job)


def _collect(runner, path: str, job) -> tuple[str, Any, str]:
    if isinstance(job, XGraphError):
        return path, None, str(job)
    if runner.wait(job) != 0:
        return path, None, str(runner.get_error(job))
    return path, runner.get_outputs(job), ""


def _ray_results(args: argparse.Namespace, graph: "Graph", files: list[Path]) -> Iterator[tuple[str, Any, str]]:
    """(path, outputs or None, error) per file, from replicas over a Ray Dataset of the files."""
    import logging

    import xgraph.ray
    xgraph.ray.connect(args.ray or None)
    dataset = xgraph.ray.read_files(args.input_dir, graph.get_input_tensors())
    if not sys.stderr.isatty():  # Ray Data logs its progress at INFO when it cannot draw bars
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    with warnings.catch_warnings():  # read_files' tasks take no CPU, so replicas may take every CPU
        warnings.simplefilter("ignore", RuntimeWarning)
        out = xgraph.ray.map_batches(dataset, graph, batch_size=args.batch_size, concurrency=args.concurrency,
                                     mode=args.mode, kernels=args.kernels, on_error="record",
                                     progress=sys.stderr.isatty())
    names = [t.name for t in graph.get_output_tensors()]
    for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
        for i, path in enumerate(batch["path"]):
            error = str(batch["error"][i])
            yield str(path), None if error else [batch[name][i] for name in names], error


def run_directory(args: argparse.Namespace, graph: "Graph") -> int:
    """Run every file of --input-dir; print one line per file; exit 1 when some file failed."""
    from xgraph.cli.outputs import save_outputs, summarize
    from xgraph.runners.input_files import list_files
    if args.input:
        raise XGraphError("--input-dir and --input are exclusive: each file of the folder is one run")
    if args.concurrency < 1 or args.batch_size < 1:
        raise XGraphError(f"--concurrency and --batch-size must be >= 1, got {args.concurrency} and {args.batch_size}")
    files = list_files(args.input_dir)
    folders = _output_dirs(files, Path(args.output_dir) if args.output_dir else None)
    where = f"on Ray ({args.concurrency} replica{'s' if args.concurrency > 1 else ''})" \
        if args.ray is not None else "locally"
    print(f"{args.model}: {len(files)} files from {args.input_dir}, mode {args.mode}, kernels {args.kernels}, {where}")
    results = _ray_results(args, graph, files) if args.ray is not None else _local_results(args, graph, files)
    outputs = graph.get_output_tensors()
    failed, start = [], time.perf_counter()
    for path, values, error in results:
        name = Path(path).name
        if error:
            failed.append(name)
            print(f"  {name}: error: {error}")
            continue
        folder = folders.get(name)
        moved = f" (outputs in {folder.name}/)" if folder is not None and folder.name != Path(name).stem else ""
        print(f"  {name}: " + "; ".join(f"{t.name} {summarize(v)}" for t, v in zip(outputs, values)) + moved)
        if folder is not None:
            save_outputs(folder, {t.name: value for t, value in zip(outputs, values)})
    seconds = time.perf_counter() - start
    done = len(files) - len(failed)
    saved = f", outputs in {args.output_dir}/<file>/" if args.output_dir else ""
    print(f"{done} of {len(files)} files ran in {seconds:.2f} s{saved}"
          + (f"; {len(failed)} failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
