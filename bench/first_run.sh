#!/usr/bin/env bash
# A fresh machine to the first GRPO step, as a new user gets there: a bare Debian
# bookworm (debootstrap --variant=minbase: no compiler, no Python, no CMake) in a chroot
# on this machine, a clone of this repository at REV, then README's first command,
# `./scripts/run.sh`, with the main recipe for NUM_ROLLOUT steps. Prints when each phase
# ended (bootstrap: Debian packages and wheels; build; the default model; each step).
# Only the CPU, the network and the kernel are this machine's; the chroot has its own
# packages, Python, pip cache, ccache and ~/.cache (so nothing is reused from here).
#   sudo REV=HEAD NUM_ROLLOUT=2 bench/first_run.sh
# Needs root (chroot, mounts) and debootstrap (apt-get install debootstrap). The farm's
# TLS interception CA and pip settings are copied in where this machine has them
# (/usr/local/share/ca-certificates, /etc/pip.conf), as a new machine here has them.
# Output: bench/out/first_run-<UTC time>/ (run.log, build.log, phases.txt); the chroot
# is unmounted and removed at the end (KEEP=1 keeps it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rev="${REV:-HEAD}" steps="${NUM_ROLLOUT:-2}" mirror="${MIRROR:-http://deb.debian.org/debian}"
[ "$(id -u)" = 0 ] || { echo "first_run.sh: needs root (chroot and mounts): sudo $0" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "first_run.sh: needs debootstrap: apt-get install debootstrap" >&2; exit 2; }
out="${OUT_DIR:-$root/bench/out}/first_run-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
jail="$out/root"
cleanup() {
  for m in dev sys proc; do umount -R "$jail/$m" 2>/dev/null || true; done
  # --one-file-system: should an unmount have failed, never follow it into this machine's /dev or /sys
  [ "${KEEP:-0}" = 1 ] || rm -rf --one-file-system "$jail"
}
trap cleanup EXIT

echo "first_run: debootstrap bookworm (minbase) into $jail" >&2
debootstrap --variant=minbase bookworm "$jail" "$mirror" > "$out/debootstrap.log" 2>&1
cp /etc/resolv.conf "$jail/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
  mkdir -p "$jail/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/* "$jail/usr/local/share/ca-certificates/"
  mkdir -p "$jail/etc/ssl/certs" && cp /etc/ssl/certs/ca-certificates.crt "$jail/etc/ssl/certs/"
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$jail/etc/pip.conf"
mount -t proc proc "$jail/proc"
mount --rbind /sys "$jail/sys" && mount --make-rslave "$jail/sys"
mount --rbind /dev "$jail/dev" && mount --make-rslave "$jail/dev"
git clone -q "$root" "$jail/root/rlhost"
git -C "$jail/root/rlhost" checkout -q "$(git -C "$root" rev-parse "$rev")"

# Inside: README's command, each line stamped with the milliseconds since the start; the
# phases are read off the stamps (run.sh's own log lines mark where each one ends).
cat > "$jail/root/first_run.sh" <<EOF
#!/bin/bash
cd /root/rlhost
t0=\$(date +%s%N)
./scripts/run.sh --num-rollout $steps 2>&1 | while IFS= read -r l; do
  printf '[%7d ms] %s\n' "\$(( (\$(date +%s%N) - t0) / 1000000 ))" "\$l"
done
EOF
chmod +x "$jail/root/first_run.sh"
echo "first_run: ./scripts/run.sh --num-rollout $steps in the chroot (rlhost $(git -C "$root" rev-parse --short "$rev"))" >&2
env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb \
  PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  chroot "$jail" /root/first_run.sh > "$out/run.log" 2>&1 || true
cp "$jail/root/rlhost/build/.ninja_log" "$out/ninja_log" 2>/dev/null || true

# The phases, from the stamped log: CMake's first line (bootstrap ended), the recipe's
# first line (the build ended), the default model made, each rollout step.
awk -v out="$out" '
  function s(line) { match(line, /^\[ *[0-9]+ ms\]/); v = substr(line, 2, RLENGTH - 5); return v / 1000 }
  /^\[ *[0-9]+ ms\] -- / && !boot { boot = s($0) }   # CMake configures: bootstrap is over
  /Args parsed/ && !built { built = s($0) }
  /default math model:/ { model = s($0); sub(/.*default math model: /, ""); how = $0 }
  /rollout [0-9]+ \| reward/ { n++; step[n] = s($0); line[n] = $0 }
  END {
    printf "bootstrap (Debian packages, wheels)   done at %7.1f s\n", boot
    printf "build (the runtime target)            done at %7.1f s  (%.1f s)\n", built, built - boot
    printf "default model                         done at %7.1f s  (%.1f s: %s)\n", model, model - built, how
    for (k = 1; k <= n; k++) printf "rollout step %d                         done at %7.1f s\n", k - 1, step[k]
    if (n == 0) print "no rollout step finished: see " out "/run.log"
  }' "$out/run.log" | tee "$out/phases.txt"
