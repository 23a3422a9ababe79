#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side (tools/test calls it).

Most of the suite waits on real servers (redis-server, PostgreSQL, etcd members) and on
wall-clock pauses, one binary after another, while the CPU idles; this runs several binaries
at once, each exactly as `cargo test` would (the same executable, its package's directory,
cargo's runtime variables), the longest first. Beside them, on the idle CPU, run the
CPU-bound ones (`CPU_BOUND`) and the doctests, two at a time, at the lowest priority (nice
19), so no suite that times a real server waits on a starved CPU. The suites that time
thousands of leases in one process (`ALONE`) run first, with nothing beside them.

    tools/run_tests.py [--jobs N] [--no-doc] [--again NAME --again-env VAR=VALUE ...]
                       [CARGO_ARGS...] [-- FILTER...]

CARGO_ARGS select what to build (`--workspace --all-features`, `--test redis_store`, ...);
FILTER goes to every test binary, as `cargo test`'s trailing arguments do. Each binary named
by `--again` runs a second time, in the same pool, with the `--again-env` variables set (the
Redis suites on Valkey, say), reported as NAME@again.

LEADER_TEST_BESIDE names a shell command (CI's other checks) to run once the tests are
built, beside them at the lowest priority like the CPU-bound ones, reported as `beside`.

Each binary's output goes to target/test-logs/<binary>.log and is printed whole as it ends;
at the end a table of durations and one line `N passed, N failed`. Exit status 1 if any test
failed or any binary did not finish, with the names of the failed ones.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "target" / "test-logs"
# The slowest binaries, started first so they do not finish last alone (seconds measured on
# the two-core CI machine; the others take a few seconds each).
SLOW_FIRST = [
    "scenarios",
    "partitions_liveness",
    "etcd_store",
    "postgres_store",
    "etcd_faults",
    "cli",
    "redis_cluster",
    "postgres_tls",
    "postgres_hostile",
]
# The binaries that keep the CPU busy (a compiler: trybuild's UI tests; the simulation's
# seeds), run beside the others with the doctests (rustdoc compiles them), at nice 19: at
# the same priority, the suites that time real servers and leases starved beside them
# (partitions_liveness missed its bounds on Redis and etcd while the UI tests compiled).
CPU_BOUND = ["ui", "seeds"]
LOWEST_PRIORITY = 19
# Suites that time thousands of leases in one busy process, run first and alone: nice 19
# does not shield them (partitions_liveness missed its etcd bound in 1 of 2 runs beside the
# seeds at nice 19), and other suites at the same priority would compete with them as
# much. The niced work started only after them before, so running them alone adds only
# their own length to the timed suites, not to the run's tail.
ALONE = ["partitions_liveness"]
SYSROOT_LIB = subprocess.run(["rustc", "--print", "target-libdir"], stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed")


def build(cargo_args):
    """Builds every test binary; returns (name, executable, package directory, package)."""
    command = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    output = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, check=True, text=True).stdout
    binaries = []
    for line in output.splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        target = message["target"]
        package_dir = str(Path(message["manifest_path"]).parent)
        package = message["package_id"]
        name = target["name"]
        binaries.append((name, message["executable"], package_dir, package))
    return binaries


def lowest_priority():
    """In a child before it runs: yield the CPU to every other process."""
    os.nice(LOWEST_PRIORITY)


def run_one(name, executable, package_dir, filter_args, extra_env=None, niced=False):
    """Runs one binary as cargo test would, with `extra_env` set (`niced`: at the lowest
    priority); returns (name, seconds, passed, failed, ok, log)."""
    log = LOGS / f"{name}-{Path(executable).name}.log"
    env = dict(os.environ)
    env.update(extra_env or {})
    env["CARGO_MANIFEST_DIR"] = package_dir
    env.setdefault("CARGO", "cargo")
    # As cargo does: a proc-macro crate's tests link the toolchain's libstd dynamically.
    libraries = [SYSROOT_LIB, str(ROOT / "target" / "debug" / "deps"), str(ROOT / "target" / "debug")]
    if env.get("LD_LIBRARY_PATH"):
        libraries.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(libraries)
    began = time.monotonic()
    with open(log, "w") as out:
        status = subprocess.run(
            [executable, *filter_args],
            cwd=package_dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lowest_priority if niced else None,
        ).returncode
    seconds = time.monotonic() - began
    passed = failed = 0
    text = log.read_text(errors="replace")
    for line in text.splitlines():
        match = RESULT.match(line)
        if match:
            passed += int(match.group(1))
            failed += int(match.group(2))
    return name, seconds, passed, failed, status == 0, text


def run_doctests(cargo_args, filter_args):
    """The doctests, through cargo (rustdoc compiles them), at the lowest priority."""
    log = LOGS / "doctests.log"
    began = time.monotonic()
    command = ["cargo", "test", "--doc", *cargo_args, "--", *filter_args]
    with open(log, "w") as out:
        status = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lowest_priority).returncode
    text = log.read_text(errors="replace")
    passed = sum(int(m.group(1)) for m in map(RESULT.match, text.splitlines()) if m)
    failed = sum(int(m.group(2)) for m in map(RESULT.match, text.splitlines()) if m)
    return "doctests", time.monotonic() - began, passed, failed, status == 0, text


def run_beside(command):
    """`command`, a shell command, at the lowest priority."""
    log = LOGS / "beside.log"
    began = time.monotonic()
    with open(log, "w") as out:
        status = subprocess.run(command, shell=True, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lowest_priority).returncode
    text = log.read_text(errors="replace")
    return "beside", time.monotonic() - began, 0, 0, status == 0, text


def main():
    argv = sys.argv[1:]
    filter_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("LEADER_TEST_JOBS", "3")))
    parser.add_argument("--no-doc", action="store_true", help="leave the doctests out")
    parser.add_argument("--again", action="append", default=[], metavar="NAME", help="run this binary a second time, with --again-env")
    parser.add_argument("--again-env", action="append", default=[], metavar="VAR=VALUE", help="a variable of the second runs")
    args, cargo_args = parser.parse_known_args(argv)
    args.cargo_args = cargo_args
    args.filter = filter_args
    LOGS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    malformed = [pair for pair in args.again_env if "=" not in pair]
    if malformed:
        print(f"--again-env takes VAR=VALUE, not {', '.join(malformed)}", file=sys.stderr)
        return 2
    again_env = dict(pair.split("=", 1) for pair in args.again_env)
    binaries = [(name, exe, directory, None) for name, exe, directory, _ in build(args.cargo_args)]
    missing = set(args.again) - {b[0] for b in binaries}
    if missing:
        print(f"--again names binaries the build did not make: {', '.join(sorted(missing))}", file=sys.stderr)
        return 2
    # The second runs after the first ones of the slow binaries, before the rest.
    binaries += [(f"{name}@again", exe, directory, again_env) for name, exe, directory, _ in binaries if name in args.again]
    rank = {name: index for index, name in enumerate(SLOW_FIRST)}
    binaries.sort(key=lambda b: rank.get(b[0], len(SLOW_FIRST) if b[3] is not None else len(SLOW_FIRST) + 1))
    print(f"running {len(binaries)} test binaries and the doctests, {args.jobs} at a time", flush=True)
    results = []

    def show(result):
        name, seconds, passed, failed, ok, text = result
        print(f"==== {name} ({seconds:.1f} s){'' if ok else ' FAILED'}", flush=True)
        print(text, end="" if text.endswith("\n") else "\n", flush=True)
        results.append((name, seconds, passed, failed, ok))

    def report(futures):
        for future in as_completed(futures):
            show(future.result())

    alone = [b for b in binaries if b[0] in ALONE]
    timed = [b for b in binaries if b[0] not in CPU_BOUND and b[0] not in ALONE]
    busy = [b for b in binaries if b[0] in CPU_BOUND]
    for name, exe, directory, env in alone:
        show(run_one(name, exe, directory, args.filter, env))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool, ThreadPoolExecutor(max_workers=2) as niced:
        futures = [pool.submit(run_one, name, exe, directory, args.filter, env) for name, exe, directory, env in timed]
        beside = os.environ.get("LEADER_TEST_BESIDE")
        if beside:
            futures.append(niced.submit(run_beside, beside))
        futures += [niced.submit(run_one, name, exe, directory, args.filter, env, True) for name, exe, directory, env in busy]
        if not args.no_doc:
            futures.append(niced.submit(run_doctests, args.cargo_args, args.filter))
        report(futures)
    print(f"==== durations (wall clock {time.monotonic() - began:.0f} s, {args.jobs} at a time)")
    for name, seconds, passed, failed, ok in sorted(results, key=lambda r: -r[1]):
        if seconds >= 1:
            print(f"{seconds:8.1f} s  {name}{'' if ok else '  FAILED'}")
    broken = [name for name, _, _, failed, ok in results if failed or not ok]
    if broken:
        print(f"failed: {', '.join(broken)}")
    print(f"{sum(r[2] for r in results)} passed, {sum(r[3] for r in results)} failed")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
