#!/usr/bin/env bash
# Run a command in a private network namespace that has only loopback, so that nothing it
# starts (Beam's job server, the worker pool, Flink, the local S3 server) can be reached
# from outside this machine. As root: `unshare --net`; otherwise a rootless user namespace
# (`unshare -rn`) where the kernel allows it. Without either it stops and says so.
#   infra/flink/netns.sh CMD [ARGS...]
set -euo pipefail
[ "$#" -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
inner='ip link set lo up 2>/dev/null || { echo "netns: cannot bring up loopback (is iproute2 installed?)" >&2; exit 1; }; exec "$@"'
if [ "$(id -u)" = 0 ]; then
  exec unshare --net -- bash -c "$inner" netns "$@"
fi
if unshare -rn true 2>/dev/null; then
  exec unshare -rn -- bash -c "$inner" netns "$@"
fi
echo "netns: this kernel allows neither root's nor a rootless network namespace here." >&2
echo "netns: the stack would listen on every interface; run it as root, or set RAGBEAM_FLINK_EXPOSED=1" >&2
echo "netns: and run the command without netns.sh if this machine's network is trusted." >&2
exit 1
