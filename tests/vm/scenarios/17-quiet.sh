# Scenario 17: housekeeping (issue #42) on a real kernel. A rule's job
# pins 2 CPUs beside a neighbour that burns CPU, writes files and churns
# network namespaces (each one's teardown is unbound workqueue work).
# With housekeeping = true: the unbound workqueues' mask and every kernel
# thread the kernel lets move keep off the job's CPUs (the kernel's own
# view: Cpus_allowed_list), and `pinctl verify --noise` finds nothing
# movable there. A reload that turns it off puts every original back, and
# verify --noise then finds movable kernel work there. The job's end puts
# everything back as before the daemon started. The bed runs it on
# 1s4c2t/v1 and the 6.12 boot (tests/vm/run's WHERE), about 1-4 minutes.
# Before Linux 6.9 the workers of ordered workqueues (netns's, which the
# neighbour's namespaces use) keep their CPUs when the workqueue mask
# changes: there, verify --noise may find only those (named, not failed);
# on 6.12 it must find nothing movable.
_major=$(uname -r | cut -d. -f1)
_minor=$(uname -r | cut -d. -f2)
NEW_WQ=""
[ "$_major" -gt 6 ] || { [ "$_major" = 6 ] && [ "$_minor" -ge 9 ]; } && NEW_WQ=1
WQ=/sys/devices/virtual/workqueue/cpumask
if [ ! -w "$WQ" ]; then
    note "no writable $WQ on this kernel: skipped"
    return 0
fi
# verify --noise traces through an instance of its own.
[ -d /sys/kernel/tracing/instances ] || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null

# Every kernel thread the daemon may move (PF_KTHREAD without
# PF_NO_SETAFFINITY, on more than one CPU): "pid cpus", sorted.
_kthreads() {
    for _p in $(awk 'FNR == 1 {
            sub(/^.*\) /, "");
            split($0, f, " ");
            if (and(f[7], 2097152) && !and(f[7], 67108864)) print FILENAME
        }' /proc/[0-9]*/stat 2>/dev/null | sed 's|^/proc/||; s|/stat$||'); do
        _a=$(allowed "$_p")
        case "$_a" in *[-,]*) echo "$_p $_a" ;; esac
    done | sort
}
# The movable kernel threads allowed on a CPU of $1.
_on() {
    _kthreads | while read -r _p _a; do
        [ -n "$(cl inter "$_a" "$1")" ] && echo "$_p($(cat "/proc/$_p/comm" 2>/dev/null))"
    done
}
_quiet() { [ -z "$(cl inter "$(mask_list "$WQ")" "$1")" ] && [ -z "$(_on "$1")" ]; }
# The kernel threads of before, still there, that hold something else.
_changed() {
    echo "$KT_BEFORE" | while read -r _p _a; do
        [ -e "/proc/$_p" ] || continue
        _now=$(allowed "$_p")
        [ -z "$_now" ] || [ "$_now" = "$_a" ] || echo "$_p: $_now, was $_a"
    done
}
_as_before() { [ "$(cat "$WQ")" = "$WQ_BEFORE" ] && [ -z "$(_changed)" ]; }
# The names of one class's sources in /tmp/noise.json.
_named() {
    tr -d '\n ' < /tmp/noise.json | grep -o "\"class\":\"$1\",\"name\":\"[^\"]*\"" | sed 's/.*"name":"//; s/"$//' | sort -u | tr '\n' ' '
}
_noise() {
    pinctl verify --noise "$1" --json > /tmp/noise.json 2>/tmp/noise.err
    NOISE_RC=$?
    NOISE_SUM=$(tr -d '\n ' < /tmp/noise.json | sed -n 's/.*"per_minute":{\([^}]*\)}.*/\1/p')
    NOISE_MOV=$(_named movable)
    NOISE_NB=$(_named neighbour)
}

WQ_BEFORE=$(cat "$WQ")
KT_BEFORE=$(_kthreads)
# This shell (and so the daemon, pinctl and the neighbour) in a shared
# cgroup: the root cgroup's tasks may run anywhere (v2 cannot confine
# them). Its pid from its own /proc/self: a command substitution forks.
read -r ME _ </proc/self/stat
echo "$ME" > "$CS/system.slice/cron.service/cgroup.procs" || fail quiet-shell "cannot move the scenario's shell ($ME) into system.slice/cron.service"
# A generous read_timeout: the first read of sysfs in a cold guest, beside
# other emulated guests, has taken over 5 s.
write_config 1h 'housekeeping = true
read_timeout = "20s"
watchdog_interval = "1s"'
daemon_start || return
mkcg hpc.slice/job-1.scope empty
J_PID=$(spawn hpc.slice/job-1.scope)
pin quiet-pinned hpc.slice/job-1.scope 2; X=$GOT

# The neighbour: on the shared CPUs, as any unpinned process.
( while :; do :; done ) </dev/null >/dev/null 2>&1 &
BURN=$!
( while :; do
    unshare -n true 2>/dev/null
    dd if=/dev/zero of=/tmp/quiet.noise bs=64k count=16 2>/dev/null
    rm -f /tmp/quiet.noise
done ) </dev/null >/dev/null 2>&1 &
CHURN=$!

if wait_for "$WAIT" _quiet "$X"; then
    pass quiet-moved "workqueue mask $(cat "$WQ"), no movable kernel thread on $X"
else
    fail quiet-moved "workqueue mask $(cat "$WQ"); on $X: $(_on "$X" | tr '\n' ' ' | head -c 300)"
fi
_line=$(pinctl status 2>&1 | grep -i -A2 'housekeeping' | tr '\n' ' ')
check quiet-status "pinctl status: $(echo "$_line" | head -c 200)" [ -n "$_line" ]

_noise 10s
_msg="verify --noise 10s exit $NOISE_RC; per minute: $NOISE_SUM; movable: ${NOISE_MOV:-none}; neighbours: ${NOISE_NB:-none} $(tail -c 300 /tmp/noise.err)"
_nb=$(echo "$NOISE_SUM" | sed -n 's/.*"neighbour":\([0-9.]*\).*/\1/p')
_other=$(echo "$NOISE_MOV" | tr ' ' '\n' | grep -v '^kworker/u' | grep . | tr '\n' ' ')
if [ "$NOISE_RC" = 0 ]; then
    pass quiet-noise-on "$_msg"
elif [ -z "$NEW_WQ" ] && [ "$_nb" = 0 -o "$_nb" = 0.0 ] && [ -z "$_other" ] && [ -s /tmp/noise.json ]; then
    pass quiet-noise-on "$_msg (Linux $(uname -r): ordered workqueues' workers stay before 6.9)"
else
    fail quiet-noise-on "$_msg"
fi
# Sampled again after the 10 s: the kernel started no thread there since
# that a round of checks has not moved.
check quiet-still "on $X: $(_on "$X" | tr '\n' ' ' | head -c 300)" _quiet "$X"

# A reload turns it off: everything as before.
write_config 1h 'housekeeping = false
read_timeout = "20s"
watchdog_interval = "1s"'
kill -HUP "$DPID"
if wait_for "$WAIT" _as_before; then
    pass quiet-reload-off "workqueue mask and kernel threads as before"
else
    fail quiet-reload-off "mask $(cat "$WQ") (was $WQ_BEFORE); $(_changed | tr '\n' ' ' | head -c 300)"
fi
_noise 10s
check quiet-noise-off "verify --noise 10s exit $NOISE_RC; per minute: $NOISE_SUM; movable: ${NOISE_MOV:-none} $(tail -c 300 /tmp/noise.err)" [ "$NOISE_RC" != 0 -a -n "$NOISE_MOV" ]

# On again, then the job ends: everything as before.
write_config 1h 'housekeeping = true
read_timeout = "20s"
watchdog_interval = "1s"'
kill -HUP "$DPID"
wait_for "$WAIT" _quiet "$X" || fail quiet-reload-on "on $X: $(_on "$X" | tr '\n' ' ' | head -c 300)"
kill "$BURN" "$CHURN" 2>/dev/null
kill_in hpc.slice/job-1.scope
rmcg hpc.slice/job-1.scope hpc.slice
if wait_for "$WAIT" _as_before; then
    pass quiet-put-back "workqueue mask and kernel threads as before"
else
    fail quiet-put-back "mask $(cat "$WQ") (was $WQ_BEFORE); $(_changed | tr '\n' ' ' | head -c 300)"
fi

# Whatever happened, the next scenario gets the node as it was.
daemon_stop
echo "$ME" > "$CS/cgroup.procs"
echo "$WQ_BEFORE" > "$WQ" 2>/dev/null
echo "$KT_BEFORE" | while read -r _p _a; do
    [ -e "/proc/$_p" ] && taskset -pc "$_a" "$_p" >/dev/null 2>&1
done
rm -f /run/pinctl/housekeeping.json
