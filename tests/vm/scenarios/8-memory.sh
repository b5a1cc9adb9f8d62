# Scenario 8 (machines with more than one NUMA node): with align_memory = true
# an exclusive workload's memory is bound to the NUMA nodes of its CPUs
# (cpuset.mems, and so Mems_allowed_list of its process); shared processes
# keep every node.
ALL_NODES=$(cat /sys/devices/system/node/online)
if [ "$(cl count "$ALL_NODES")" -lt 2 ]; then
    note "one NUMA node: nothing to align"
    return
fi
write_config 1h "align_memory = true"
daemon_start || return
container systemd burstable 1; B_PID=$APP_PID
container cgroupfs guaranteed 2 4; G=$APP; G_PID=$APP_PID
pin one-node-pinned "$G" 4; XG=$GOT
NG=$(cl norm "$(nodes_of "$XG")")
expect one-node-mems "$NG" mems "$G"
expect one-node-process "$NG" mems_allowed "$G_PID"

# More CPUs than one node has: two nodes' memory.
NODE_CPUS=$(cl count "$(cat /sys/devices/system/node/node1/cpulist)")
container systemd guaranteed 3 $((NODE_CPUS + 2)); W=$APP; W_PID=$APP_PID
pin two-node-pinned "$W" $((NODE_CPUS + 2)); XW=$GOT
NW=$(cl norm "$(nodes_of "$XW")")
check two-node-spans "the workload spans 2 NUMA nodes" sh -c "[ $(cl count "$NW") -eq 2 ] && echo 'nodes $NW' || { echo 'nodes $NW'; exit 1; }"
expect two-node-mems "$NW" mems "$W"
expect two-node-process "$NW" mems_allowed "$W_PID"

expect shared-mems "$ALL_NODES" mems_allowed "$B_PID"
expect system-mems "$ALL_NODES" mems_allowed "$SYS_PID"
expect structure-mems "$ALL_NODES" mems kubepods
shared_ok shared "$(cl union "$XG" "$XW")" burstable=$B_PID system=$SYS_PID

# align_memory turned off by a reload: every node back, CPUs unchanged.
write_config 1h
kill -HUP "$DPID"
expect unaligned-mems "$ALL_NODES" mems_allowed "$G_PID"
expect unaligned-two-node "$ALL_NODES" mems_allowed "$W_PID"
expect_stays unaligned-cpus-stay "$XG" allowed "$G_PID" 1
