# Containers from real runtimes under systemd: runc and crun with the
# systemd cgroup driver (cgroupsPath "<pod slice>:cri-containerd:<id>", so
# systemd makes the scope over D-Bus) and with the cgroupfs driver, each
# bundle where containerd keeps them (a default of bundle_dirs) and asking
# by annotation (oci, in the guest). Only the kernel's view counts: the
# container's own process.
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

