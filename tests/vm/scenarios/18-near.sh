# Scenario 18 (issue #43): near the devices, on a real kernel. qemu puts a
# PCI serial port on NUMA node 1 (a pxb expander bus with numa_node=1:
# tests/vm/run's NEAR): the guest's sysfs shows it there, and its tty, a
# character device, leads to it. A Guaranteed container whose bundle lists
# that tty in linux.devices gets its CPUs on node 1 while node 0 has room
# first, and describe says so; `pinctl run --near` the port's PCI address
# runs there with its memory bound there; with --device-alignment require
# and too few CPUs free on node 1, a run waits, and runs on node 1 once
# the container's CPUs are free.
N1=/sys/devices/system/node/node1
if [ ! -d "$N1" ]; then
    note "one NUMA node: skipped"
    return 0
fi
if ! near_port; then
    fail near-device "no PCI device with a tty on NUMA node 1 (tests/vm/run's pxb expander bus)"
    return 0
fi
ADDR=${PORT##*/}
NODE1=$(cat "$N1/cpulist")
pass near-device "$ADDR on NUMA node 1 ($NODE1); its $TTY is char $DEVNUM"
_on_node1() { [ -n "$1" ] && [ -z "$(cl minus "$1" "$NODE1")" ] || { echo "$1 is not within $NODE1"; return 1; }; echo "$1"; }

RUN="pinctl run --socket /run/pinctl/run.sock"
write_config 1h "$(printf 'watchdog_interval = "1s"\n[run]\nenabled = true\nsocket = "/run/pinctl/run.sock"')"
daemon_start || return

# The container's bundle, as containerd writes it before the cgroup: the
# tty and /dev/null (which every container has, and is left out).
_id=$(cid 3)
mkdir -p "/run/bundles/$_id"
printf '{"ociVersion":"1.1.0","linux":{"devices":[{"path":"/dev/null","type":"c","major":1,"minor":3},{"path":"/dev/%s","type":"c","major":%s,"minor":%s}]},"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-uid":"near","io.kubernetes.cri.container-name":"app"}}\n' \
    "$TTY" "${DEVNUM%:*}" "${DEVNUM#*:}" >"/run/bundles/$_id/config.json"
container systemd guaranteed 1 2
NEAR=$APP
pin near-bundle-pinned "$NEAR" 2
check near-bundle-node1 "its CPUs on the port's node, though node 0 had room first" _on_node1 "$GOT"
expect near-bundle-process "$GOT" allowed "$APP_PID"
_described() {
    pinctl describe "$NEAR" >/run/near.describe 2>&1 || { tail -n 5 /run/near.describe; return 1; }
    grep -q "^Devices: *char:$DEVNUM (bundle's linux.devices): PCI $ADDR, NUMA node 1" /run/near.describe &&
        grep -q "^Near: *its CPUs on its devices' NUMA node 1" /run/near.describe &&
        ! grep -q "char:1:3" /run/near.describe || { grep -E '^(Devices|Near|  )' /run/near.describe; return 1; }
    grep -E '^(Devices|Near):' /run/near.describe | tr -s ' ' | tr '\n' ';'
}
check near-describe "describe names the device, how it was found, its node, and the CPUs near it" _described

_run_near() {
    $RUN -n 1 --near "$ADDR" --mem bind -- sh -c \
        'grep Cpus_allowed_list /proc/self/status | cut -f2; grep -m1 -o "bind:[0-9,-]*" /proc/self/numa_maps' \
        >/run/near-run.out 2>&1 || { cat /run/near-run.out; return 1; }
    _got=$(sed -n 1p /run/near-run.out)
    [ "$(cl count "$_got")" = 1 ] && _on_node1 "$_got" >/dev/null && [ "$(sed -n 2p /run/near-run.out)" = bind:1 ] ||
        { cat /run/near-run.out; return 1; }
    echo "CPU $_got, memory bind:1"
}
check near-run "pinctl run --near $ADDR --mem bind: a CPU of node 1, memory bound there" _run_near

# require: one more CPU than node 1 has free besides the container's.
ASK=$(( $(cl count "$NODE1") - 1 ))
rm -f /run/near-wait.out
$RUN -n "$ASK" --near "$ADDR" --device-alignment require --wait 120s -- \
    sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2' >/run/near-wait.out 2>/run/near-wait.err &
W_PID=$!
_queued() { grep -q "waiting for CPUs" /run/near-wait.err; }
if wait_for 30 _queued; then
    pass near-require-waits "$ASK CPUs near $ADDR with require wait: $(head -n 1 /run/near-wait.err)"
else
    fail near-require-waits "no wait: $(cat /run/near-wait.err /run/near-wait.out 2>/dev/null | head -n 5)"
fi
rmcg "$NEAR"
_ran() { [ -s /run/near-wait.out ]; }
if wait_for 60 _ran; then
    check near-require-placed "placed on node 1 once the container's CPUs were free" _on_node1 "$(cat /run/near-wait.out)"
else
    fail near-require-placed "did not run: $(cat /run/near-wait.err | tail -n 3)"
fi
wait "$W_PID" 2>/dev/null
