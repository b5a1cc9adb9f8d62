# Containers from real runtimes under systemd: runc and crun with the
# systemd cgroup driver (cgroupsPath "<pod slice>:cri-containerd:<id>", so
# systemd makes the scope over D-Bus) and with the cgroupfs driver, each
# bundle where containerd keeps them (a default of bundle_dirs) and asking
# by annotation. Only the kernel's view counts: the container's own process.
BUNDLES=/run/containerd/io.containerd.runtime.v2.task/k8s.io
ROOTFS=/run/pinctl-rootfs
mkdir -p "$BUNDLES" "$ROOTFS/bin"
cp /bin/busybox "$ROOTFS/bin/busybox"

# oci RUNTIME DRIVER N CPUS [ALLOWED]: writes a bundle for container N (pod
# uid and container id from lib.sh's uid/cid) asking for CPUS, starts it with
# RUNTIME (runc | crun) and DRIVER (systemd | cgroupfs), and sets OCI_ID,
# OCI_PID and OCI_CG (its cgroup, relative to the cpuset root). ALLOWED is
# the spec's own cpuset (linux.resources.cpu.cpus), as a kubelet's static
# policy or `podman --cpuset-cpus` asks for one: runc's systemd driver makes
# it the scope's AllowedCPUs= on v2.
oci() {
    _rt=$1 _drv=$2 _n=$3 _cpus=$4 _allowed=${5:-}
    _uid=$(uid "$_drv" "$_n"); OCI_ID=$(cid "$_n")
    if [ "$_drv" = systemd ]; then
        _path="kubepods-burstable-pod$_uid.slice:cri-containerd:$OCI_ID"
        OCI_CG=kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$_uid.slice/cri-containerd-$OCI_ID.scope
        _flag=--systemd-cgroup
    else
        _path=/kubepods/burstable/pod$_uid/$OCI_ID
        OCI_CG=kubepods/burstable/pod$_uid/$OCI_ID
        _flag=""
    fi
    _b=$BUNDLES/$OCI_ID
    mkdir -p "$_b"
    runc spec --bundle "$_b"
    # The spec, as containerd would write it: our process, root, cgroup and
    # the pod's annotations.
    jq --arg path "$_path" --arg rootfs "$ROOTFS" --arg cpus "$_cpus" \
        --arg name "app$_n" --arg uid "$(uid cgroupfs "$_n")" --arg allowed "$_allowed" '
        .process.terminal = false
        | .process.args = ["/bin/busybox", "sleep", "1000"]
        | .root.path = $rootfs
        | .linux.cgroupsPath = $path
        | .annotations = {"pinctl.io/cpus": $cpus,
            "io.kubernetes.cri.container-name": $name,
            "io.kubernetes.cri.sandbox-uid": $uid}
        | if $allowed == "" then . else .linux.resources.cpu.cpus = $allowed end' \
        "$_b/config.json" >"$_b/config.json.new" && mv "$_b/config.json.new" "$_b/config.json" ||
        fail "$_rt-$_drv-spec" "jq could not write the spec of $OCI_ID"
    # shellcheck disable=SC2086
    $_rt $_flag run -d --bundle "$_b" "$OCI_ID" </dev/null >"$_b/run.log" 2>&1 ||
        fail "$_rt-$_drv-run" "$_rt $_flag run: $(tail -n 3 "$_b/run.log" | tr '\n' ' ')"
    OCI_PID=$($_rt $_flag state "$OCI_ID" 2>/dev/null | jq -r '.pid // empty')
}
# oci_delete RUNTIME DRIVER ID
oci_delete() {
    [ "$2" = systemd ] && _flag=--systemd-cgroup || _flag=""
    # shellcheck disable=SC2086
    $1 $_flag delete --force "$3" >/dev/null 2>&1 || fail "$1-$2-delete" "$1 delete --force $3"
}

EXCL=$(cl union "$X" "$R")
n=20
for rt in runc crun; do
    for drv in systemd cgroupfs; do
        n=$((n + 1))
        oci "$rt" "$drv" "$n" 1
        if [ -z "$OCI_PID" ]; then
            fail "$rt-$drv-started" "no pid from $rt state $OCI_ID"
            continue
        fi
        pin "$rt-$drv-pinned" "$OCI_CG" 1; C=$GOT
        expect "$rt-$drv-process" "$C" allowed "$OCI_PID"
        # shellcheck disable=SC2086
        shared_ok "$rt-$drv-shared" "$(cl union "$EXCL" "$C")" burstable=$B_PID $SYSTEM
        oci_delete "$rt" "$drv" "$OCI_ID"
        shared_ok "$rt-$drv-released" "$EXCL" burstable=$B_PID
    done
done
