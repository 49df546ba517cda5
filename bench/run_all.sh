#!/usr/bin/env bash
# Run every benchmark in bench/ and rewrite docs/performance.md.
#
#   bench/run_all.sh                      # the full run (about 8 minutes on 2 cores)
#   bench/run_all.sh --quick              # arguments go to bench_broker.py (smoke test)
#   TIMER_OPS=100000 bench/run_all.sh     # fewer operations for bench_timer.py (default 1M)
#   BENCH_REV=HEAD bench/run_all.sh       # benchmark a commit's src/, not the working tree
#   FAILOVER_ARGS="--partitions 1000 --no-profile" bench/run_all.sh   # bench_failover.py's
#                                         # arguments (default: --zookeeper; the full run adds
#                                         # about 20 minutes)
#
# docs/performance.md is regenerated from the benchmarks' markdown, except the hand-written part
# between the "notes:begin" and "notes:end" markers, which is carried over from the current file.
# bench_failover.py's section goes last, between "failover:begin" and "failover:end" (its own
# hand-written "failover-notes" block is carried over too). The replication, Spark, client and
# log cleaner and security sections are then spliced in by their scripts' --update-doc.
# Progress goes to stderr; a failing benchmark stops the script and leaves the file untouched.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=docs/performance.md
TIMER_OPS=${TIMER_OPS:-1000000}
FAILOVER_ARGS=${FAILOVER_ARGS:---zookeeper}
PY=${PYTHON:-python}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/odradek-run-all-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

# BENCH_REV=<commit>: benchmark that commit's src/ (exported to the temp dir and put first on
# PYTHONPATH, which the broker subprocesses inherit) instead of the working tree.
if [ -n "${BENCH_REV:-}" ]; then
    rev=$(git rev-parse --short "$BENCH_REV")
    mkdir "$tmp/rev"
    git archive "$rev" src | tar -x -C "$tmp/rev"
    export PYTHONPATH="$tmp/rev/src${PYTHONPATH:+:$PYTHONPATH}"
    export ODRADEK_BENCH_REV="$rev"
    echo "[run_all] benchmarking src/ of commit $rev" >&2
fi

echo "[run_all] 1/9 bench/bench_broker.py $*" >&2
timeout 3600 "$PY" bench/bench_broker.py --output "$tmp/broker.md" "$@"

echo "[run_all] 2/9 bench/bench_timer.py --ops $TIMER_OPS" >&2
timeout 1800 "$PY" bench/bench_timer.py --ops "$TIMER_OPS" >"$tmp/timer.md"

echo "[run_all] 3/9 bench/bench_failover.py $FAILOVER_ARGS" >&2
# shellcheck disable=SC2086  # FAILOVER_ARGS is a list of arguments
timeout 5400 "$PY" bench/bench_failover.py --output "$tmp/failover.md" $FAILOVER_ARGS

elapsed=$(( $(date +%s) - start ))
mkdir -p "$(dirname "$OUT")"
"$PY" - "$OUT" "$tmp/broker.md" "$tmp/timer.md" "$elapsed" "$TIMER_OPS" "$*" <<'PYEOF'
import re
import sys
from pathlib import Path

out, broker_md, timer_md, elapsed, timer_ops, args = sys.argv[1:7]
broker = Path(broker_md).read_text().strip()
timer = Path(timer_md).read_text().strip()
old = Path(out).read_text() if Path(out).exists() else ""

m = re.search(r"<!-- notes:begin -->.*?<!-- notes:end -->", old, re.S)
notes = m.group(0) if m else (
    "<!-- notes:begin -->\n## Reading the numbers\n\n_Hand-written commentary goes here; "
    "bench/run_all.sh keeps this block when it regenerates the file._\n<!-- notes:end -->")

summary, sep, rest = broker.partition("\n## Machine")
if not sep:
    summary, rest = "", broker
else:
    rest = "## Machine" + rest

command = "bench/run_all.sh" + (f" {args}" if args else "")
intro = (
    "Single-broker figures for odradek on this project's machine kind, beside the published "
    "anchors (Kreps 2014, 100-byte records) and this machine's own physical limits. Everything "
    "outside the \"Reading the numbers\" section is generated: "
    f"`{command}` ran every benchmark in bench/ and rewrote this file in "
    f"{int(elapsed) // 60} min {int(elapsed) % 60} s. See bench/README.md for what each "
    "benchmark does and how to run one alone.")
doc = f"""# Performance

{intro}

{summary.strip()}

{notes}

{rest.strip()}

## Delayed operations: timing wheel vs asyncio timers (bench/bench_timer.py)

`python bench/bench_timer.py --ops {timer_ops}`: the purgatory's hierarchical timing wheel against
asyncio's heap of timer handles, for the broker's workload of delayed operations that mostly
complete early (see the script's docstring).

{timer}
"""
failover = re.search(r"<!-- failover:begin -->.*?<!-- failover:end -->", old, re.S)
if failover:  # carried over so that the splice below keeps its hand-written notes
    doc += "\n" + failover.group(0) + "\n"
replication = re.search(r"<!-- replication:begin -->.*?<!-- replication:end -->", old, re.S)
if replication:  # carried over for bench_replication.py --update-doc (keeps its notes)
    doc += "\n" + replication.group(0) + "\n"
security = re.search(r"<!-- security:begin -->.*?<!-- security:end -->", old, re.S)
if security:  # carried over for bench_security.py --update-doc (keeps its notes)
    doc += "\n" + security.group(0) + "\n"
scale = re.search(r"<!-- scale:begin -->.*?<!-- scale:end -->", old, re.S)
if scale:  # carried over for bench_scale.py --update-doc (keeps its notes)
    doc += "\n" + scale.group(0) + "\n"
hand = re.search(r"<!-- handwritten:begin -->.*?<!-- handwritten:end -->", old, re.S)
if hand:  # the sections no script writes whole (bench_sim.py splices its table in there)
    doc += "\n" + hand.group(0) + "\n"
Path(out).write_text(doc)
PYEOF
"$PY" bench/bench_failover.py splice "$tmp/failover.md" "$OUT"
echo "[run_all] 4/9 bench/bench_replication.py --update-doc $OUT" >&2
timeout 3600 "$PY" bench/bench_replication.py --no-timer --update-doc "$OUT"
echo "[run_all] 5/9 bench/bench_spark.py --update-doc $OUT" >&2 && timeout 1800 "$PY" bench/bench_spark.py --update-doc "$OUT"
echo "[run_all] 6/9 bench/bench_client.py --update-doc $OUT" >&2 && timeout 1800 "$PY" bench/bench_client.py --update-doc "$OUT"
echo "[run_all] 7/9 bench/bench_cleaner.py --profile --update-doc $OUT" >&2 && timeout 1800 "$PY" bench/bench_cleaner.py --profile --update-doc "$OUT"
echo "[run_all] 8/9 bench/bench_security.py --update-doc $OUT" >&2 && timeout 1800 "$PY" bench/bench_security.py --update-doc "$OUT"
echo "[run_all] 9/9 bench/bench_transactions.py --update-doc $OUT" >&2 && timeout 1800 "$PY" bench/bench_transactions.py --update-doc "$OUT"
echo "[run_all] 10/10 bench/bench_http.py --update-doc $OUT" >&2 && timeout 1800 "$PY" bench/bench_http.py --update-doc "$OUT"
echo "[run_all] 11/11 bench/bench_scale.py --update-doc $OUT" >&2 && timeout 2400 "$PY" bench/bench_scale.py --update-doc "$OUT"
echo "[run_all] 12/12 bench/bench_sim.py --update-doc $OUT" >&2 && timeout 1800 "$PY" bench/bench_sim.py --update-doc "$OUT"
echo "[run_all] wrote $OUT in ${elapsed} s (+ the replication, Spark, client, cleaner, security transactions, HTTP, scale and simulation sections)" >&2
