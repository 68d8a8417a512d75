# Sourced by the multi-host benchmarks: two "hosts", network namespaces on a bridge
# (198.18.0.0/24, a test range), made by netns_hosts_up and removed by netns_hosts_down
# (with every background job of the script); needs root and iproute2.
#   ns[i], addr[i], dev[i]: host i's namespace, address and interface (i = 0, 1)
netns_tag="nh$$"
ns=("$netns_tag-0" "$netns_tag-1") addr=(198.18.0.1 198.18.0.2) dev=("${netns_tag}v0" "${netns_tag}v1")

netns_hosts_down() {
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for i in 0 1; do ip netns del "${ns[$i]}" 2>/dev/null || true; ip link del "${dev[$i]}p" 2>/dev/null || true; done
  ip link del "${netns_tag}br" 2>/dev/null || true
}

netns_hosts_up() {
  [ "$(id -u)" = 0 ] || { echo "$(basename "$0"): making network namespaces needs root" >&2; exit 2; }
  trap netns_hosts_down EXIT
  ip link add "${netns_tag}br" type bridge && ip link set "${netns_tag}br" up
  for i in 0 1; do
    ip netns add "${ns[$i]}"
    ip link add "${dev[$i]}" type veth peer name "${dev[$i]}p"
    ip link set "${dev[$i]}p" master "${netns_tag}br" && ip link set "${dev[$i]}p" up
    ip link set "${dev[$i]}" netns "${ns[$i]}"
    ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "${dev[$i]}"
    ip -n "${ns[$i]}" link set "${dev[$i]}" up && ip -n "${ns[$i]}" link set lo up
  done
}
