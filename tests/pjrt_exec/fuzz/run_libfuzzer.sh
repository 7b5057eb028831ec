#!/bin/sh
# Coverage-guided fuzzing of the program reader and interpreter (plugin_c/prog*.c).
#
#   tests/pjrt_exec/fuzz/run_libfuzzer.sh [SECONDS] [WORK_DIR]
#
# Builds prog_libfuzzer.c with clang -fsanitize=fuzzer,address,undefined (Debian:
# apt-get install clang libfuzzer-14-dev) into WORK_DIR (default /tmp/prog-libfuzzer), then
# fuzzes for SECONDS (default 1800), seeded from tests/pjrt_exec/corpus (the regression
# inputs and the seed artifacts).  New coverage goes to WORK_DIR/queue, never into the
# committed corpus; a crash is written to WORK_DIR/crash-* (reproduce it with
# `WORK_DIR/prog_libfuzzer WORK_DIR/crash-...`, and once fixed, add it to the corpus).
# Forked mode keeps fuzzing after a crash, so one run reports all it finds.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
seconds=${1:-1800}
work=${2:-/tmp/prog-libfuzzer}
mkdir -p "$work/queue"
clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/plugin_c" -o "$work/prog_libfuzzer" "$here/prog_libfuzzer.c" "$root"/plugin_c/prog*.c -lm
cd "$work"
# allocator_may_return_null: a program may ask for a huge intermediate; the interpreter must
# then fail with RESOURCE_EXHAUSTED, which is what this checks, instead of ASan aborting.
ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
exec ./prog_libfuzzer -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 \
  -malloc_limit_mb=3072 -max_len=65536 -fork=1 -ignore_crashes=1 -ignore_timeouts=1 \
  -ignore_ooms=1 -artifact_prefix="$work/" -print_final_stats=1 \
  "$work/queue" "$root/tests/pjrt_exec/corpus"
