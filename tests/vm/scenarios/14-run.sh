# Scenario 14 (issue #33): `pinctl run` through the daemon's own cgroup
# (no systemd here, so pinctld makes pinctl.slice/run-<name>.scope itself). A command
# runs on the exclusive CPUs the kernel shows it (PINCTL_CPUS says which);
# two runs at once get disjoint ones; the shared pool loses them; a run
# whose client exited but whose child still runs keeps its CPUs (as an MPI
# launcher's ranks would), and gives them back once the last process ends;
# --numa-node takes the CPUs of that node alone and --mem sets the
# command's memory policy there; an over-ask is refused with the free
# count; a daemon restart keeps a running command where it is; steps back
# to back under a per-user cap are each served, and the last one's cgroup
# goes within the daemon's half-second look at held runs.
RUN="pinctl run --socket /run/pinctl/run.sock"
write_config 1h "$(printf 'watchdog_interval = "1s"\n[run]\nenabled = true\nsocket = "/run/pinctl/run.sock"')"
daemon_start || return
ALL=$(online)
_in() { grep -qx "$2" "$CS/pinctl.slice/run-$1.scope/cgroup.procs" 2>/dev/null; }

$RUN -n 2 --name a -- sleep 300 2>/run/run-a.err &
A_PID=$!
wait_for 20 _in a "$A_PID"
check run-a-joined "the client is in pinctl.slice/run-a.scope ($(cat /run/run-a.err))" _in a "$A_PID"
pin run-a-pinned pinctl.slice/run-a.scope 2; A=$GOT
OTHERS=""
check run-a-aligned "2 CPUs" aligned "$A" 2
expect run-a-process "$A" allowed "$A_PID"

$RUN -n 2 --name b -- sleep 300 2>/run/run-b.err &
B_PID=$!
wait_for 20 _in b "$B_PID"
pin run-b-pinned pinctl.slice/run-b.scope 2; B=$GOT
expect run-b-process "$B" allowed "$B_PID"
check run-disjoint "two runs, disjoint CPUs" disjoint "$A" "$B"

_sees() {
    $RUN -n 2 -- sh -c 'echo "$PINCTL_CPUS $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' >/run/run-c.out 2>&1 || {
        cat /run/run-c.out; return 1; }
    read -r _said _got </run/run-c.out
    [ "$_said" = "$_got" ] && [ "$(cl count "$_got")" = 2 ] && [ -z "$(cl inter "$_got" "$(cl union "$A" "$B")")" ] ||
        { cat /run/run-c.out; return 1; }
    echo "PINCTL_CPUS and Cpus_allowed_list $_got"
}
check run-sees-its-cpus "the command runs on its 2 CPUs, as PINCTL_CPUS says" _sees
shared_ok run-shared "$(cl union "$A" "$B")" system=$SYS_PID

# --numa-node and --mem: the CPUs of the last NUMA node alone, and the
# command's memory policy as numa_maps shows it (bind:N, prefer:N).
NODE=$(ls -d /sys/devices/system/node/node[0-9]* | sed 's/.*node//' | sort -n | tail -n 1)
NODE_CPUS=$(cat "/sys/devices/system/node/node$NODE/cpulist")
_numa() {
    $RUN -n 2 --numa-node "$NODE" --mem "$1" -- sh -c \
        'grep Cpus_allowed_list /proc/self/status | cut -f2; grep -m1 -o "$0:[0-9,-]*" /proc/self/numa_maps' "$1" \
        >/run/run-numa.out 2>&1 || { cat /run/run-numa.out; return 1; }
    _got=$(sed -n 1p /run/run-numa.out)
    [ "$(cl count "$_got")" = 2 ] && [ -z "$(cl minus "$_got" "$NODE_CPUS")" ] &&
        [ "$(sed -n 2p /run/run-numa.out)" = "$1:$NODE" ] || { cat /run/run-numa.out; return 1; }
    echo "CPUs $_got of node $NODE ($NODE_CPUS), memory $1:$NODE"
}
check run-numa-bind "--numa-node $NODE --mem bind: its CPUs, memory bound there" _numa bind
check run-numa-prefer "--numa-node $NODE --mem prefer: memory there first" _numa prefer
# --full-cores: every thread of its cores, as sysfs names the siblings.
_whole() {
    $RUN -n 2 --full-cores -- grep Cpus_allowed_list /proc/self/status >/run/run-whole.out 2>&1 ||
        { cat /run/run-whole.out; return 1; }
    _got=$(cut -f2 /run/run-whole.out)
    _first=$(cl minus "$_got" "" | sed 's/[,-].*//')
    _sib=$(cat "/sys/devices/system/cpu/cpu$_first/topology/thread_siblings_list")
    [ "$(cl count "$_got")" = 2 ] && [ -z "$(cl minus "$_sib" "$_got")" ] || { cat /run/run-whole.out; echo "siblings $_sib"; return 1; }
    echo "CPUs $_got: the core of CPU $_first whole ($_sib)"
}
check run-full-cores "--full-cores: a whole core, both its threads" _whole

_no_node() { ! $RUN -n 1 --numa-node 63 -- true >/run/run-node.out 2>&1 && grep "NUMA node 63: this machine has nodes" /run/run-node.out; }
check run-numa-unknown "a node the machine lacks is refused, the nodes it has named" _no_node

_refused() {
    ! $RUN -n "$(cl count "$ALL")" -- true >/run/run-over.out 2>&1 && grep "CPUs asked, [0-9]* free" /run/run-over.out
}
check run-over-ask "an over-ask is refused with the free count" _refused

# The client exits; its child stays in the run's cgroup: the CPUs stay.
$RUN -n 2 --name c -- sh -c 'sleep 300 >/dev/null 2>&1 & echo $! >/run/run-c.child' 2>/run/run-c.err
C_CHILD=$(cat /run/run-c.child 2>/dev/null)
pin run-c-pinned pinctl.slice/run-c.scope 2; C=$GOT
sleep 3
check run-c-kept "the client exited, its child keeps the run" _in c "$C_CHILD"
expect run-c-child "$C" allowed "$C_CHILD"

# A restart keeps every run where it is.
daemon_crash
daemon_start || return
expect_stays run-a-after-restart "$A" allowed "$A_PID" 2

# The last process of a run ends: its cgroup goes, its CPUs are shared.
kill "$C_CHILD" "$A_PID" 2>/dev/null
_gone() { [ ! -d "$CS/pinctl.slice/run-$1.scope" ]; }
wait_for 20 _gone a
check run-a-gone "pinctl.slice/run-a.scope is removed once its command ended" _gone a
wait_for 20 _gone c
check run-c-gone "pinctl.slice/run-c.scope is removed once its last process ended" _gone c
shared_ok run-released "$B" system=$SYS_PID
kill "$B_PID" 2>/dev/null

# Steps back to back under a per-user cap of one step's CPUs (issue #44):
# each is served, and the last one's cgroup goes without a round of checks
# (watchdog_interval is an hour here): the daemon reads the cgroups of
# held runs every half second.
daemon_stop
write_config 1h "$(printf 'watchdog_interval = "1h"\n[run]\nenabled = true\nsocket = "/run/pinctl/run.sock"\nmax_cpus_per_user = 2')"
daemon_start || return
_steps() {
    for _s in 1 2 3; do
        $RUN -n 2 --name "step$_s" -- true >/run/run-step.out 2>&1 || { echo "step $_s: $(cat /run/run-step.out)"; return 1; }
    done
    echo "3 steps of 2 CPUs one after the other, at most 2 per user"
}
check run-steps "steps back to back under max_cpus_per_user = 2" _steps
wait_for 5 _gone step3
check run-step-gone "the last step's cgroup is removed without a round of checks" _gone step3
