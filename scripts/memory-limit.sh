#!/usr/bin/env bash
# Runs a command under a memory limit that counts the page cache too, so that a database
# larger than the limit is read from the disk, not from memory:
#   scripts/memory-limit.sh 512 target/release/strata-bench --num 20000000 ...
# Uses the cgroup v1 memory controller (root); the group is removed when the command ends.
set -euo pipefail
mib=${1:?usage: memory-limit.sh MIB COMMAND...}
shift
root=/sys/fs/cgroup/memory
if [ ! -w "$root" ]; then
  echo "memory-limit.sh: $root is not mounted or not writable (cgroup v1, as root)" >&2
  exit 1
fi
group="$root/strata-bench-$$"
mkdir "$group"
cleanup() {
  # Anything left in the group goes back to the parent before the group is removed.
  while read -r task; do echo "$task" > "$root/cgroup.procs" 2>/dev/null || true; done \
    < "$group/cgroup.procs"
  rmdir "$group"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
echo $((mib << 20)) > "$group/memory.limit_in_bytes"
# No swap to hide in: a limit on memory and swap together, where the kernel accounts swap.
[ -e "$group/memory.memsw.limit_in_bytes" ] &&
  echo $((mib << 20)) > "$group/memory.memsw.limit_in_bytes"
echo "memory-limit.sh: $* under $mib MiB (page cache included)" >&2
status=0
bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' limit "$group" "$@" || status=$?
echo "memory-limit.sh: peak $(( $(cat "$group/memory.max_usage_in_bytes") >> 20 )) MiB," \
  "limit hit $(cat "$group/memory.failcnt") times" >&2
exit $status
