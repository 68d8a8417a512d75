"""Hosts for multi-host tests: network namespaces on this machine, each with its own
address on a bridge the test makes (198.18.0.0/24, a range reserved for testing), set up
by the test and torn down at its end. Traffic goes only to the addresses made here.

    with Hosts(2) as hosts:                   # hosts[0].addr == "198.18.0.1", ...
        p = hosts[1].popen([BIN, ...], env=env)

Needs root (or CAP_NET_ADMIN) and iproute2's `ip`; `available()` says why not. Not a test
module itself.
"""
import os
import shutil
import subprocess

NET = "198.18.0"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def available():
    """None when namespaces can be made here (one is made and removed to find out), else
    why not."""
    if not shutil.which("ip"):
        return "iproute2's `ip` is not installed (apt install iproute2)"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_NET_ADMIN)"
    probe = "rlhost-probe-%x" % os.getpid()
    r = _ip("netns", "add", probe, check=False)
    _ip("netns", "del", probe, check=False)
    if r.returncode != 0:
        return "`ip netns add` failed here: %s (a container needs CAP_NET_ADMIN and CAP_SYS_ADMIN)" % r.stderr.strip()
    return None


class Host:
    def __init__(self, ns, addr, dev):
        self.ns, self.addr, self.dev = ns, addr, dev

    def argv(self, argv):
        """argv run inside this host's namespace."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def popen(self, argv, **kw):
        return subprocess.Popen(self.argv(argv), **kw)

    def run(self, argv, **kw):
        return subprocess.run(self.argv(argv), **kw)


class Hosts:
    """n namespaces on one bridge; a context manager that always tears them down."""

    def __init__(self, n):
        tag = "%x" % (os.getpid() & 0xFFFFF)
        self.bridge = "rlbr" + tag
        self.hosts = [Host("rlhost-%s-%d" % (tag, i), "%s.%d" % (NET, i + 1), "rlv%s%d" % (tag, i)) for i in range(n)]

    def __enter__(self):
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for h in self.hosts:
                _ip("netns", "add", h.ns)
                peer = h.dev + "p"
                _ip("link", "add", h.dev, "type", "veth", "peer", "name", peer)
                _ip("link", "set", peer, "master", self.bridge)
                _ip("link", "set", peer, "up")
                _ip("link", "set", h.dev, "netns", h.ns)
                _ip("-n", h.ns, "addr", "add", h.addr + "/24", "dev", h.dev)
                _ip("-n", h.ns, "link", "set", h.dev, "up")
                _ip("-n", h.ns, "link", "set", "lo", "up")
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self.hosts

    def __exit__(self, *exc):
        for h in self.hosts:
            _ip("netns", "del", h.ns, check=False)   # its veth end goes with it, and so the peer
            _ip("link", "del", h.dev + "p", check=False)
        _ip("link", "del", self.bridge, check=False)
        return False

    def __getitem__(self, i):
        return self.hosts[i]
