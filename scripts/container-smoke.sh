#!/usr/bin/env bash
# Container smoke test without a container engine: what `docker run` of container/Dockerfile
# does, built from Linux namespaces by hand.
#
#   1. a Debian root filesystem (debootstrap --variant=minbase), cached between runs;
#   2. the release binaries copied into a fresh copy of it (git installed), the image's user
#      `agent` and its /run/hookvisor made as the Dockerfile makes them, and
#      examples/sample-workspace as /workspace: a git repository another uid owns (a volume
#      from the host), which agent may write through its group;
#   3. hookvisor-init started as PID 1 in new PID, mount, UTS and IPC namespaces, chrooted,
#      with /proc of its own, running the image's ENTRYPOINT and CMD (`hookvisor serve` on the
#      socket /run/hookvisor/serve.sock) as pod.yaml extends them:
#      HOOKVISOR_INSTALL=claude,git-fsmonitor and an agent command, here a script that uses git
#      and `hookvisor eval` in the workspace;
#   4. checks: the session hooks ran and were recorded (status.json, logs, the uid inside), the
#      agent's git and eval worked in the other uid's workspace, Claude Code's adapter was
#      installed in agent's settings and git-fsmonitor in its git config, the supervisor runs
#      as `agent` and answers on the socket, and SIGTERM shuts everything down cleanly.
#
# Needs root, debootstrap, util-linux (unshare, mount), curl (optional: the HTTP check) and the
# Debian mirror of /etc/apt/sources.list*. Environment:
#   HOOKVISOR_ROOTFS_CACHE  cache dir (default /var/cache/hookvisor-rootfs)
#   HOOKVISOR_SMOKE_MIRROR, HOOKVISOR_SMOKE_SUITE  override what apt's sources say
#   CARGO_TARGET_DIR        where the release binaries are built (as cargo does)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

say() { echo "container-smoke: $*"; }
die() { echo "container-smoke: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot and namespaces need it)"
for tool in debootstrap unshare chroot mount flock; do
  command -v "$tool" >/dev/null || die "$tool is missing; apt-get install debootstrap util-linux"
done

# The mirror and suite apt uses here: deb822 .sources files first, then one-line lists.
detect_mirror() {
  local uri dist
  uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  dist=$(awk '/^Suites:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  if [ -z "$uri" ]; then
    read -r uri dist < <(awk '$1 == "deb" && $2 !~ /security/ {
        i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        print $i, $(i + 1); exit }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null) || true
  fi
  mirror=${HOOKVISOR_SMOKE_MIRROR:-${uri:-http://deb.debian.org/debian}}
  suite=${HOOKVISOR_SMOKE_SUITE:-${dist:-bookworm}}
}
detect_mirror

# 1. The root filesystem, built once and kept: only a complete one is ever renamed into place.
cache=${HOOKVISOR_ROOTFS_CACHE:-/var/cache/hookvisor-rootfs}
base="$cache/$suite-minbase-git"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -e "$base/.hookvisor-complete" ]; then
  say "building the $suite root filesystem from $mirror (once; cached in $base)"
  rm -rf "$base.partial"
  debootstrap --variant=minbase --include=passwd,git "$suite" "$base.partial" "$mirror" \
    >"$cache/debootstrap.log" 2>&1 || die "debootstrap failed; see $cache/debootstrap.log"
  touch "$base.partial/.hookvisor-complete"
  rm -rf "$base"
  mv "$base.partial" "$base"
fi
flock -u 9

# 2. Release binaries, as the Dockerfile's builder stage makes them.
say "building release binaries"
scripts/build-release.sh
target="${CARGO_TARGET_DIR:-$repo/target}/release"

# A fresh root for this run: an overlay on the cached one (a copy where overlays cannot go).
work=$(mktemp -d /tmp/hookvisor-smoke.XXXXXX)
root="$work/root"
mkdir -p "$work/upper" "$work/overlay-work" "$root"
runner_pid=
cleanup() {
  if [ -n "$runner_pid" ] && kill -0 "$runner_pid" 2>/dev/null; then
    kill -KILL "$runner_pid" 2>/dev/null || true # --kill-child takes the namespace with it
    wait "$runner_pid" 2>/dev/null || true
  fi
  mountpoint -q "$root" && umount "$root"
  rm -rf "$work"
}
trap cleanup EXIT
if ! mount -t overlay overlay \
  -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/overlay-work" "$root" 2>/dev/null; then
  cp -a "$base/." "$root/"
fi

install -m 0755 "$target/hookvisor" "$target/hookvisor-init" "$root/usr/local/bin/"
cp -a examples/sample-workspace "$root/workspace"
chroot "$root" git -C /workspace init -q
chroot "$root" git -C /workspace -c user.name=host -c user.email=host@example.com add -A
chroot "$root" git -C /workspace -c user.name=host -c user.email=host@example.com commit -qm sample
# One more session hook, as root and in the background: the uid and PID 1 seen from inside.
cat >"$root/workspace/.discobot/hooks/90-smoke-root.sh" <<'EOF'
#!/bin/sh
#---
# name: Smoke root probe
# type: session
# run_as: root
#---
echo "uid=$(id -u)"
echo "pid1=$(tr '\0' ' ' < /proc/1/cmdline)"
EOF
chmod 0755 "$root/workspace/.discobot/hooks/90-smoke-root.sh"
chroot "$root" /bin/sh -c 'id agent >/dev/null 2>&1 || useradd --create-home --uid 1000 --shell /bin/bash agent'
chroot "$root" install -d -o agent -g agent -m 0700 /run/hookvisor
agent_uid=$(chroot "$root" id -u agent)
# The workspace belongs to uid 4242 (the host's user); agent writes it through its group.
chroot "$root" /bin/sh -c 'chown -R 4242:agent /workspace && chmod -R g+rwX /workspace'
# The agent of pod.yaml's CMD, as a script: what it prints is checked below.
cat >"$root/usr/local/bin/smoke-agent" <<'AGENT'
#!/bin/sh
cd /workspace || exit 1
git status --porcelain >/dev/null && echo "agent: git status ok"
printf 'clean line\n' >> README.md
hookvisor eval --trigger user && echo "agent: eval ok"
grep -q "hookvisor adapter claude --workspace /workspace" "$HOME/.claude/settings.json" &&
  echo "agent: claude adapter installed"
git config --global --get core.fsmonitor | grep -q ' git-fsmonitor$' &&
  git status --porcelain >/dev/null && echo "agent: git fsmonitor installed"
echo "agent: done"
trap 'exit 0' TERM
while :; do sleep 1 & wait $!; done
AGENT
chmod 0755 "$root/usr/local/bin/smoke-agent"
[ -c "$root/dev/null" ] || { rm -f "$root/dev/null"; mknod -m 0666 "$root/dev/null" c 1 3; }

# 3. PID 1 in fresh namespaces: ENTRYPOINT ["hookvisor-init", "--user", "agent", "--"] with
#    the image's CMD plus pod.yaml's --install and agent, a clean environment as an image gives.
say "starting hookvisor-init as PID 1"
unshare --pid --fork --mount --uts --ipc --mount-proc="$root/proc" --kill-child \
  chroot "$root" /usr/bin/env -i \
  PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
  DISCOBOT_WORKSPACE=/workspace DISCOBOT_SESSION_ID=smoke HOOKVISOR_GRACE=5 \
  HOOKVISOR_INSTALL=claude,git-fsmonitor \
  /usr/local/bin/hookvisor-init --user agent -- \
  hookvisor serve --socket /run/hookvisor/serve.sock -- smoke-agent \
  >"$work/output" 2>&1 &
runner_pid=$!

# Polls a condition (a shell command) for up to $1 seconds.
wait_for() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    kill -0 "$runner_pid" 2>/dev/null || return 1
    sleep 0.1
  done
}

state="$root/home/agent/.discobot/smoke/hooks"
# The lastResult of one hook in status.json (pretty-printed, one field per line).
result_of() {
  awk -v id="\"$1\": {" 'index($0, id) { f = 1 } f && /"lastResult"/ { gsub(/[",]/, "", $2); print $2; exit }' \
    "$state/status.json" 2>/dev/null
}
hooks_done() { [ "$(result_of 00-welcome)" = success ] && [ "$(result_of 90-smoke-root)" = success ]; }
init_pid() { pgrep -P "$runner_pid" | head -n1; }
show_output() { echo "--- output of the container:" >&2; cat "$work/output" >&2; }

wait_for 60 hooks_done || { show_output; die "session hooks not recorded as success in $state/status.json"; }
say "session hooks recorded in status.json"

# 4. Checks.
grep -qx "session smoke starting in /workspace as agent" "$state/output/00-welcome.log" ||
  die "00-welcome did not run as agent: $(cat "$state/output/00-welcome.log")"
grep -qx "uid=0" "$state/output/90-smoke-root.log" ||
  die "the run_as: root hook did not run as root: $(cat "$state/output/90-smoke-root.log")"
grep -q "^pid1=/usr/local/bin/hookvisor-init --user agent" "$state/output/90-smoke-root.log" ||
  die "PID 1 inside is not hookvisor-init: $(cat "$state/output/90-smoke-root.log")"
[ "$(stat -c %u "$state" "$state/status.json" | sort -u)" = "$agent_uid" ] ||
  die "the state dir does not belong to agent: $(ls -ln "$state")"
say "hooks ran as agent and as root; PID 1 is hookvisor-init; the state dir belongs to agent"

pid=$(init_pid)
[ -n "$pid" ] || die "no hookvisor-init under unshare"
serve_running() {
  local child
  for child in $(pgrep -P "$pid"); do
    [ "$(tr '\0' ' ' <"/proc/$child/cmdline" 2>/dev/null)" = "hookvisor serve --socket /run/hookvisor/serve.sock -- smoke-agent " ] &&
      [ "$(awk '/^Uid:/ {print $2}' "/proc/$child/status")" = "$agent_uid" ] && return 0
  done
  return 1
}
wait_for 30 serve_running || { show_output; die "hookvisor serve is not running as agent under the init"; }
if command -v curl >/dev/null; then
  healthy() { curl -fsS --unix-socket "$root/run/hookvisor/serve.sock" http://hookvisor/healthz >/dev/null 2>&1; }
  wait_for 30 healthy || { show_output; die "hookvisor serve does not answer /healthz"; }
  say "hookvisor serve runs as agent and answers /healthz"
else
  say "hookvisor serve runs as agent (no curl: HTTP check skipped)"
fi

agent_done() { grep -qx "agent: done" "$work/output"; }
wait_for 30 agent_done || { show_output; die "the agent did not finish its checks"; }
for line in "agent: git status ok" "agent: eval ok" "agent: claude adapter installed" \
  "agent: git fsmonitor installed"; do
  grep -qx "$line" "$work/output" || { show_output; die "missing: $line"; }
done
say "agent's git and eval work in uid 4242's workspace; the claude adapter is installed"

say "sending SIGTERM to PID 1"
kill -TERM "$pid"
deadline=$((SECONDS + 30))
while kill -0 "$runner_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
kill -0 "$runner_pid" 2>/dev/null && { show_output; die "still running 30 s after SIGTERM"; }
status=0
wait "$runner_pid" || status=$?
runner_pid=
[ "$status" = 0 ] || { show_output; die "exit status $status after SIGTERM, expected 0"; }
left=$(for p in /proc/[0-9]*; do
  [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
done || true)
[ -z "$left" ] || die "processes left in the container root: $left"
grep -q "^\[Welcome\] session smoke starting" "$work/output" ||
  { show_output; die "hook output missing from the init's stderr"; }
say "clean shutdown: exit status 0, nothing left running, output complete"
sed 's/^/  | /' "$work/output"
say "OK"
