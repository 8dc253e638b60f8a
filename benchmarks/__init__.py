"""rensei-routing benchmarks: throughput beside baselines measured in the same run.

Run ``python -m benchmarks [--quick] [--large] [--only NAME ...] [--out FILE]`` (or
``tox -e bench``). Each benchmark module in :data:`benchmarks.runner.BENCHMARKS` exposes
``NAME``, ``TITLE`` and ``run(config) -> BenchResult``; adding one (the snapshot compile and
verify benchmarks, when snapshots exist) is a new module and one line in that tuple.
"""
