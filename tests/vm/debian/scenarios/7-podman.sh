# podman outside Kubernetes: `podman run --rootfs DIR --annotation
# pinctl.io/cpus=1` as root, with podman's systemd cgroup manager, makes the
# container's cgroup machine.slice/libpod-<id>.scope and its bundle in
# podman's storage (a default of bundle_dirs). With machine.slice added to
# managed by a reload, the annotation pins it; `podman rm -f` gives the CPUs
# back. No registry is reachable: the root filesystem of scenario runtimes
# is the image; its storage driver is vfs (tests/vm/debian/image).
PODMAN="podman --events-backend file --cgroup-manager systemd"
sed -i 's|^managed = \[\(.*\)\]$|managed = [\1, "machine.slice"]|' "$CONFIG"
_managed() { grep -q '^managed = .*"machine.slice"' "$CONFIG" || { grep '^managed' "$CONFIG"; return 1; }; }
check managed-machine-slice "machine.slice added to managed" _managed
check reload "systemctl reload with machine.slice managed" _reload
_podman_run() {
    # --rootfs is a switch: the first argument after the options is the
    # root filesystem, and everything after it the command.
    $PODMAN run -d --network none --annotation pinctl.io/cpus=1 --name pinned1 \
        --rootfs "$ROOTFS" /bin/busybox sleep 1000 >/run/podman.id 2>/run/podman.err ||
        { tail -n 3 /run/podman.err; return 1; }
}
check run "podman run --rootfs --annotation pinctl.io/cpus=1" _podman_run
P_ID=$(cat /run/podman.id 2>/dev/null)
P_PID=$($PODMAN inspect -f '{{.State.Pid}}' pinned1 2>/dev/null)
P_CG=machine.slice/libpod-$P_ID.scope
# crun on v2 puts the process in a sub-cgroup of the scope (`container`).
_in_scope() { grep -qE "/$P_CG(/[^/]+)?\$" "/proc/$P_PID/cgroup" || { cat "/proc/$P_PID/cgroup"; return 1; }; }
check scope "its process is in $P_CG or below it" _in_scope
note "machine.slice's cgroup.subtree_control: '$(cat "$CGROOT/machine.slice/cgroup.subtree_control" 2>/dev/null)'"
pin pinned "$P_CG" 1; P=$GOT
expect process "$P" allowed "$P_PID"
# shellcheck disable=SC2086
shared_ok shared "$(cl union "$EXCL" "$P")" burstable=$B_PID $SYSTEM
_podman_rm() { $PODMAN rm -f pinned1 >/dev/null 2>&1 || { echo "podman rm -f pinned1 failed"; return 1; }; }
check rm "podman rm -f" _podman_rm
shared_ok released "$EXCL" burstable=$B_PID
