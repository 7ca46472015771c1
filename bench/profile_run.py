"""Where the run path's client CPU goes: ``make bench``'s episode of this runtime (bench/peers.py
``Ours``: scripted model, the tool over HTTP to a sandbox on its own daphne process), N
episodes one at a time, then the figures.

Run (PostgreSQL, a database of its own; it is migrated and a small shop generated)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_profile \\
    DJANGO_SETTINGS_MODULE=config.settings.local \\
    nice -n 10 .venv/bin/python -m bench.profile_run --runs 100

(without ``REDIS_URL``, as ``make bench`` runs). It prints:

1. client CPU per step: this process's CPU time (every thread, ``time.process_time``) over
   ``5 x runs`` steps, with nothing profiling or counting (the figure ``make bench`` reports
   as "client CPU ms/step", one run at a time), ``--repeats`` times: median and minimum
   (the machine is shared: the minimum is the least disturbed);
2. queries per run: every statement on every thread's connection (a
   ``connection.execute_wrapper`` installed on each connection as it opens), and the most
   frequent ones, by their first characters;
3. the top functions by cumulative and by own time, over the same episodes again, profiled
   with ``cProfile`` on every thread (the run's database work runs on the
   ``sync_to_async`` thread: each thread gets its own
   ``cProfile.Profile`` timed by ``time.thread_time``, its CPU time, so waiting on the
   database, the tool or another thread counts nothing; the statistics are merged).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import io
import os
import pstats
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    import django

    django.setup()


class QueryCounter:
    """Counts the statements of every Django connection opened while it is installed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0
        self.shapes: collections.Counter[str] = collections.Counter()
        self.enabled = False

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if self.enabled:
            shape = re.sub(r"\s+", " ", str(sql))[:110]
            with self.lock:
                self.total += 1
                self.shapes[shape] += 1
        return execute(sql, params, many, context)

    def install(self) -> None:
        from django.db import connections
        from django.db.backends.signals import connection_created

        def attach(sender: Any, connection: Any, **_: Any) -> None:
            if self not in connection.execute_wrappers:
                connection.execute_wrappers.append(self)

        connection_created.connect(attach, weak=False, dispatch_uid=f"profile_run.{id(self)}")
        for conn in connections.all(initialized_only=True):
            if self not in conn.execute_wrappers:
                conn.execute_wrappers.append(self)

    def uninstall(self) -> None:
        """Stop attaching to new connections and leave this thread's (others' close)."""
        from django.db import connections
        from django.db.backends.signals import connection_created

        connection_created.disconnect(dispatch_uid=f"profile_run.{id(self)}")
        for conn in connections.all(initialized_only=True):
            if self in conn.execute_wrappers:
                conn.execute_wrappers.remove(self)


class ThreadProfiles:
    """``cProfile`` on this thread and on every thread started after ``start``."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    def _thread_hook(self, *_: Any) -> None:
        profile = cProfile.Profile(time.thread_time)
        self.profiles.append(profile)
        profile.enable()  # replaces this hook on that thread

    def start(self) -> None:
        from asgiref.sync import SyncToAsync

        threading.setprofile(self._thread_hook)
        main = cProfile.Profile(time.thread_time)
        self.profiles.append(main)
        main.enable()
        # The thread already running: asgiref's sync_to_async thread, where the run's
        # database work goes (this loop is not bound to traces.db_threads' pool).
        SyncToAsync.single_thread_executor.submit(self._thread_hook).result()

    def stop(self) -> pstats.Stats:
        from asgiref.sync import SyncToAsync

        threading.setprofile(None)
        self.profiles[0].disable()
        SyncToAsync.single_thread_executor.submit(_profile_off).result()
        stats = pstats.Stats(self.profiles[0])
        for profile in self.profiles[1:]:
            stats.add(profile)
        return stats


# The run path's parts, as (file, function): their CPU per run (cumulative, every thread).
PARTS = (
    ("agents/services.py", "run_start"),
    ("agents/services.py", "_load_run"),
    ("traces/services.py", "trace_mark_running"),
    ("agents/services.py", "tool_snapshots"),
    ("policies/selectors.py", "runtime_policy_for_trace"),
    ("traces/classifier.py", "error_rules_load"),
    ("traces/recorder.py", "write_step"),
    ("traces/recorder.py", "_insert_batch"),
    ("traces/rollups.py", "rollups_record"),
    ("agents/sink.py", "cache_store"),
    ("agents/tools/ssrf.py", "ssrf_safe_request"),
    ("traces/services.py", "trace_finish"),
    ("policies/services.py", "run_ended"),
    ("policies/services.py", "_outcomes_record"),
    ("policies/tasks.py", "reflexion_queue"),
)


def parts_per_run(stats: pstats.Stats, runs: int) -> list[tuple[str, float, float]]:
    """(part, calls per run, CPU ms per run) for each of ``PARTS`` the profile saw."""
    found: list[tuple[str, float, float]] = []
    table = stats.stats  # type: ignore[attr-defined]
    for path, name in PARTS:
        calls, cumulative = 0, 0.0
        for (filename, _, function), (_, ncalls, _, ct, _) in table.items():
            if function == name and filename.endswith(path):
                calls += ncalls
                cumulative += ct
        if calls:
            found.append((f"{path}:{name}", calls / runs, cumulative / runs * 1000))
    return found


def _profile_off() -> None:
    sys.setprofile(None)


async def _episodes(ours: Any, runs: int) -> None:
    await ours.run(runs, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="episodes per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="CPU measurements (median)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--top", type=int, default=35, help="functions listed")
    parser.add_argument("--queries", type=int, default=25, help="statement shapes listed")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile pass")
    parser.add_argument("--dump", help="also write the merged profile to this file (pstats)")
    args = parser.parse_args(argv)
    _setup()

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from bench.peers import EPISODE_STEPS, TOOL, Context, Ours, sandbox_served
    from bench.runtime import bench_setup, conninfo_for_default, run_path_connections

    if connection.vendor != "postgresql":
        raise SystemExit("needs PostgreSQL: set DATABASE_URL")
    call_command("migrate", interactive=False, verbosity=0)
    sku = bench_setup()
    from agents.models import Tool

    counter = QueryCounter()
    counter.install()
    with sandbox_served(database_url=os.environ["DATABASE_URL"], probe_sku=sku) as (url, _):
        settings.SANDBOX_BASE_URL = url
        ctx = Context(sandbox_url=url, sku=sku, conninfo=conninfo_for_default())
        Tool.objects.filter(name=TOOL).update(timeout_seconds=ctx.tool_timeout_s)
        ours = Ours(ctx)
        with run_path_connections("agentops-bench-ours"), asyncio.Runner() as runner:
            runner.run(_episodes(ours, args.warmup))
            ours.clear()

            steps = args.runs * EPISODE_STEPS
            cpus: list[float] = []
            for _ in range(args.repeats):
                cpu = time.process_time()
                wall = time.perf_counter()
                runner.run(_episodes(ours, args.runs))
                wall = time.perf_counter() - wall
                cpus.append(time.process_time() - cpu)
                if ours.records() != steps:
                    raise SystemExit(f"{ours.records()} steps recorded, {steps} expected")
                ours.clear()

            counter.enabled = True
            runner.run(_episodes(ours, args.runs))
            counter.enabled = False
            ours.clear()

            stats = None
            if not args.no_profile:
                profiles = ThreadProfiles()
                profiles.start()
                runner.run(_episodes(ours, args.runs))
                stats = profiles.stop()
                ours.clear()
            runner.run(ours.teardown())

    out = sys.stdout
    out.write(f"episodes: {args.runs} one at a time ({steps} steps), last wall {wall:.2f} s\n")
    per_step = sorted(cpu / steps * 1000 for cpu in cpus)
    out.write(
        f"client CPU per step: median {statistics.median(per_step):.2f} ms, "
        f"min {per_step[0]:.2f} ms (of {args.repeats}: "
        + ", ".join(f"{value:.2f}" for value in per_step)
        + ")\n"
    )
    out.write(f"queries per run: {counter.total / args.runs:.1f}\n")
    for shape, count in counter.shapes.most_common(args.queries):
        out.write(f"  {count / args.runs:5.1f}  {shape}\n")
    if stats is not None and args.dump:
        stats.dump_stats(args.dump)
    if stats is not None:
        total = sum(s[2] for s in stats.stats.values())  # type: ignore[attr-defined]
        out.write("\nprofiled CPU per run (every thread, under cProfile): ")
        out.write(f"{total / args.runs * 1000:.1f} ms\n")
        for part, calls, ms in parts_per_run(stats, args.runs):
            out.write(f"  {ms:7.2f} ms  {calls:4.1f} calls  {part}\n")
        for key in ("cumulative", "tottime"):
            buffer = io.StringIO()
            stats.stream = buffer  # type: ignore[attr-defined]
            stats.sort_stats(key).print_stats(args.top)
            out.write(f"\n--- top {args.top} by {key} (every thread) ---\n")
            out.write(buffer.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
