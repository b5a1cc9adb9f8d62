# The VM test bed's CRI helpers for the Debian scenarios (sourced by
# 85-cri.sh, 85-nri.sh and 88-resize.sh): containerd's configuration for runc's
# systemd or cgroupfs driver, the image import, and pods run over CRI by
# cri.py, each pod's output kept in /run/cri-TAG. DRV names the driver of
# the pods that run_pod starts.
CRI="python3 /vm/debian/cri/cri.py"
IMAGE=docker.io/library/busybox:pinctl
CTD_CONF=/etc/containerd/config.toml
BUNDLES=/run/containerd/io.containerd.runtime.v2.task/k8s.io

# ctd_config DRIVER: containerd's configuration for runc's DRIVER.
ctd_config() {
    [ "$1" = systemd ] && _sc=true || _sc=false
    cat > "$CTD_CONF" <<EOF
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$IMAGE"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        pod_annotations = ["pinctl.io/*"]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = $_sc
EOF
}
_cri_up() { $CRI version >/run/cri.version 2>&1; }
_ctd_restart() {
    systemctl restart containerd.service 2>&1 || { journalctl -b -u containerd.service --no-pager -n 5; return 1; }
    wait_for 60 _cri_up || { tail -n 3 /run/cri.version; return 1; }
    cat /run/cri.version
}

# cg_of PID: the process's cgroup in the cpuset hierarchy, relative to $CS.
cg_of() {
    if [ "$HIER" = v1 ]; then
        sed -n 's/^[0-9]*:[^:]*cpuset[^:]*:\///p' "/proc/$1/cgroup"
    else
        sed -n 's/^0::\///p' "/proc/$1/cgroup"
    fi
}

# run_pod TAG ARGS...: cri.py run-pod ARGS; its lines in /run/cri-TAG.
# ran TAG: the pod runs (its checks are skipped otherwise, with a note).
run_pod() {
    _t=$1; shift
    rm -f "/run/cri-$_t.ok"
    $CRI run-pod --driver "$DRV" "$@" >"/run/cri-$_t" 2>"/run/cri-$_t.err" ||
        { tail -n 2 "/run/cri-$_t.err" | tr '\n' ' '; return 1; }
    touch "/run/cri-$_t.ok"
    tr '\n' ';' <"/run/cri-$_t"
}
ran() { [ -e "/run/cri-$1.ok" ] || { note "pod $1 did not run: its checks are skipped"; false; }; }
# pod_pid TAG NAME / pod_id TAG NAME: of container NAME ("sandbox": the pause).
pod_pid() { awk -v n="$2" '($1 == "sandbox" && n == "sandbox") { print $3 } ($1 == "container" && $2 == n) { print $4 }' "/run/cri-$1"; }
pod_id() { awk -v n="$2" '($1 == "sandbox" && n == "sandbox") { print $2 } ($1 == "container" && $2 == n) { print $3 }' "/run/cri-$1"; }

_import() {
    $CRI image /run/busybox-oci.tar "$IMAGE" >/dev/null 2>/run/cri-image.err || { tail -n 2 /run/cri-image.err; return 1; }
    # (command: lib.sh's ctr names a container's cgroup.)
    command ctr -n k8s.io images import --snapshotter native /run/busybox-oci.tar >/run/ctr-import.out 2>&1 ||
        { tail -n 2 /run/ctr-import.out; return 1; }
    command ctr -n k8s.io images ls -q | grep -x "$IMAGE" || { echo "$IMAGE not in ctr images ls"; return 1; }
}
