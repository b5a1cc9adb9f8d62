# A runc container near its device (issue #43), before any other pin:
# its bundle's linux.devices lists the serial port qemu puts on NUMA node
# 1 (tests/vm/run's NEAR), as a device plugin's would. It is pinned on node
# 1 though node 0 has room first, and describe names the device. Runs
# with the hierarchy's runc driver (cri_drivers).
if ! near_port; then
    fail near-device "no PCI device with a tty on NUMA node 1 (tests/vm/run's NEAR)"
else
    _tty=$TTY _num=$DEVNUM
    NODE1=$(cat /sys/devices/system/node/node1/cpulist)
    # The shipped file reserves CPU 0; nothing else is pinned yet.
    _free0=$(cl minus "$(cat /sys/devices/system/node/node0/cpulist)" 0)
    [ -n "$_free0" ] || fail near-room "node 0 has no free CPU: the check below would prove nothing"
    drv=$(cri_drivers | cut -d' ' -f1)
    OCI_DEVICE="/dev/$_tty ${_num%:*} ${_num#*:}" oci runc "$drv" 19 1
    if [ -n "$OCI_PID" ]; then
        pin near-pinned "$OCI_CG" 1; C=$GOT
        check near-node1 "runc $drv container with /dev/$_tty (${PORT##*/}) on CPU $C, node 1 is $NODE1; node 0 had $_free0 free" \
            eval '[ -n "$C" ] && [ -z "$(cl minus "$C" "$NODE1")" ]'
        expect near-process "$C" allowed "$OCI_PID"
        _dev() { pinctl describe "$OCI_CG" 2>&1 | grep "^Devices: *char:$_num (bundle's linux.devices): PCI ${PORT##*/}, NUMA node 1"; }
        check near-describe "describe names the device and its node" _dev
        oci_delete runc "$drv" "$OCI_ID"
    else
        fail near-started "no pid from runc state $OCI_ID"
    fi
fi
