# Scenario 0: the kernel facts of KERNEL-NOTES.md that the daemon relies on,
# probed without the daemon in a cgroup of its own (kprobe). A FAIL here is a
# kernel that behaves differently from the notes, not a daemon bug.

# wr FILE VALUE: one write; prints the errno name, or OK.
wr() {
    # echo, not printf: busybox's printf does not report a failed write.
    _e=$( { echo -n "$2" > "$1"; } 2>&1 )
    case "$_e" in
        "") echo OK ;;
        *"No space left"*) echo ENOSPC ;;
        *"Permission denied"*) echo EACCES ;;
        *"resource busy"*) echo EBUSY ;;
        *"out of range"*) echo ERANGE ;;
        *"Invalid argument"*) echo EINVAL ;;
        *"Input/output error"*) echo EIO ;;
        *) echo "other: $_e" ;;
    esac
}
# is NAME WANT GOT DETAIL: one check of a fact.
is() {
    if [ "$2" = "$3" ]; then pass "$1" "$3${4:+ ($4)}"; else fail "$1" "expected $2 got $3${4:+ ($4)}"; fi
}
K=kprobe
ALL=$(online)
HI=$(cl list "$ALL" | tr ' ' '\n' | tail -1)
mkcg "$K" empty
# A cgroup directory's link count is 2 + its subdirectories (kernfs keeps
# it): a scan does not list one at 2 (RealFs::scan_dir), half of a node's.
is nlink-leaf 2 "$(stat -c %h "$CS/$K")"
mkdir "$CS/$K/n1" "$CS/$K/n2"
is nlink-counts-subdirs 4 "$(stat -c %h "$CS/$K")"
rmdir "$CS/$K/n1" "$CS/$K/n2"
is nlink-after-rmdir 2 "$(stat -c %h "$CS/$K")"
if [ "$HIER" = v1 ]; then
    is v1-new-cpus-empty "" "$(cpus "$K")"
    is v1-new-mems-empty "" "$(cat "$CS/$K/cpuset.mems")"
    sleep 1000 & P=$!
    is v1-attach-empty-ENOSPC ENOSPC "$(wr "$CS/$K/cgroup.procs" "$P")"
    is v1-parent-cpus OK "$(wr "$CS/$K/cpuset.cpus" "1-3")"
    wr "$CS/$K/cpuset.mems" 0 >/dev/null
    mkdir "$CS/$K/a"
    wr "$CS/$K/a/cpuset.mems" 0 >/dev/null
    is v1-child-outside-parent-EACCES EACCES "$(wr "$CS/$K/a/cpuset.cpus" "4")"
    is v1-child-inside-parent OK "$(wr "$CS/$K/a/cpuset.cpus" "2-3")"
    is v1-parent-drops-child-cpu-EBUSY EBUSY "$(wr "$CS/$K/cpuset.cpus" "1-2")" "parent now $(cpus "$K")"
    is v1-parent-unchanged-after-EBUSY 1-3 "$(cpus "$K")"
    _r=$(wr "$CS/$K/a/cpuset.cpus" "1000")
    case "$_r" in ERANGE | EINVAL) pass v1-cpu-that-does-not-exist "$_r" ;; *) fail v1-cpu-that-does-not-exist "expected ERANGE or EINVAL got $_r" ;; esac
    is v1-garbage-EINVAL EINVAL "$(wr "$CS/$K/a/cpuset.cpus" "x-y")"
    is v1-attach OK "$(wr "$CS/$K/a/cgroup.procs" "$P")"
    is v1-empty-with-tasks-ENOSPC ENOSPC "$(wr "$CS/$K/a/cpuset.cpus" "
")"
    is v1-parent-grows OK "$(wr "$CS/$K/cpuset.cpus" "1-$HI")"
    is v1-children-not-widened 2-3 "$(cpus "$K/a")"
    # Hot-plug: CPU 3 leaves a's cpuset and does not come back.
    cpu_online 3 0
    is v1-offline-removed 2 "$(cpus "$K/a")"
    cpu_online 3 1
    sleep 0.5
    is v1-online-not-given-back 2 "$(cpus "$K/a")" "root has $(cpus "")"
    is v1-online-root-gets-it-back "$ALL" "$(cl norm "$(cpus "")")"
    # Every CPU of a cpuset offline: v1 moves its tasks to the parent.
    cpu_online 2 0
    sleep 0.5
    _where=$(grep -l "^$P\$" "$CS/$K/cgroup.procs" "$CS/$K/a/cgroup.procs" 2>/dev/null | sed "s|$CS/||; s|/cgroup.procs||")
    is v1-empty-cpuset-tasks-move-up "$K" "$_where"
    cpu_online 2 1
    kill -9 "$P"
    # The load-balancing flag (the daemon turns a shared cgroup's off before
    # writing it, while the root's is 1: its writes then skip rebuilding the
    # scheduler domains). With the root's flag at 1 the whole machine is one
    # balancing domain and no other cpuset's flag changes scheduling: the
    # scheduler domains (/proc/schedstat's domainN lines) stay as they were.
    doms() { grep -c '^domain' /proc/schedstat 2>/dev/null || echo 0; }
    is v1-root-balances 1 "$(cat "$CS/cpuset.sched_load_balance")"
    _d=$(doms)
    is v1-balance-flag-off OK "$(wr "$CS/$K/cpuset.sched_load_balance" 0)"
    is v1-balance-flag-reads-0 0 "$(cat "$CS/$K/cpuset.sched_load_balance")"
    sleep 0.2
    is v1-balance-off-keeps-domains "$_d" "$(doms)" "domain lines in /proc/schedstat, root's flag 1"
    # The probe sees a change where there is one: with the root's flag 0 too,
    # CPUs lose their domains (the operator's isolation, never touched).
    wr "$CS/cpuset.sched_load_balance" 0 >/dev/null
    sleep 0.2
    _off=$(doms)
    wr "$CS/cpuset.sched_load_balance" 1 >/dev/null
    sleep 0.2
    if [ "$_d" -gt 0 ] && [ "$_off" -lt "$_d" ]; then
        pass v1-balance-probe-sees-domains "$_d domain lines; $_off with the root's flag 0"
    else
        fail v1-balance-probe-sees-domains "expected fewer than $_d domain lines with the root's flag 0, got $_off"
    fi
    is v1-root-balances-again "$_d" "$(doms)"
else
    is v2-new-cpus-empty "" "$(cpus "$K")"
    is v2-new-effective-is-parents "$ALL" "$(eff "$K")"
    echo "+cpuset" > "$CS/$K/cgroup.subtree_control"
    mkdir "$CS/$K/a"
    is v2-parent-cpus OK "$(wr "$CS/$K/cpuset.cpus" "1-2")"
    is v2-child-outside-parent-accepted OK "$(wr "$CS/$K/a/cpuset.cpus" "3")"
    is v2-empty-intersection-falls-back 1-2 "$(eff "$K/a")" "cpuset.cpus $(cpus "$K/a")"
    is v2-child-inside-parent OK "$(wr "$CS/$K/a/cpuset.cpus" "2")"
    is v2-parent-drops-child-cpu-accepted OK "$(wr "$CS/$K/cpuset.cpus" "1")"
    is v2-child-falls-back-to-parent 1 "$(eff "$K/a")" "cpuset.cpus $(cpus "$K/a")"
    wr "$CS/$K/cpuset.cpus" "1-$HI" >/dev/null
    wr "$CS/$K/a/cpuset.cpus" "2-3" >/dev/null
    _r=$(wr "$CS/$K/a/cpuset.cpus" "1000")
    case "$_r" in ERANGE | EINVAL) pass v2-cpu-that-does-not-exist "$_r" ;; *) fail v2-cpu-that-does-not-exist "expected ERANGE or EINVAL got $_r" ;; esac
    cpu_online 3 0
    is v2-offline-kept-in-cpus 2-3 "$(cpus "$K/a")"
    is v2-offline-left-out-of-effective 2 "$(eff "$K/a")"
    cpu_online 3 1
    sleep 0.5
    is v2-online-back-in-effective 2-3 "$(eff "$K/a")"
    is v2-clear-with-newline OK "$(wr "$CS/$K/a/cpuset.cpus" "
")"
    is v2-cleared-inherits "1-$HI" "$(eff "$K/a")" "cpuset.cpus '$(cpus "$K/a")'"
    # What a shared-pool write per subtree (issue #14) relies on: a child
    # that inherits (empty) or lists every CPU (as a runtime may write it)
    # follows its parent's narrowing and widening in one write of the parent,
    # its own cpuset.cpus untouched.
    mkdir "$CS/$K/b"
    wr "$CS/$K/b/cpuset.cpus" "0-$HI" >/dev/null
    wr "$CS/$K/cpuset.cpus" "1-2" >/dev/null
    is v2-empty-child-follows-parent-narrowing 1-2 "$(eff "$K/a")"
    is v2-wide-child-follows-parent-narrowing 1-2 "$(eff "$K/b")" "cpuset.cpus $(cpus "$K/b")"
    is v2-wide-child-keeps-its-own-set "0-$HI" "$(cl norm "$(cpus "$K/b")")"
    wr "$CS/$K/cpuset.cpus" "1-$HI" >/dev/null
    is v2-empty-child-follows-parent-widening "1-$HI" "$(eff "$K/a")"
    is v2-wide-child-follows-parent-widening "1-$HI" "$(eff "$K/b")"
    # ...and one whose own set holds all of its parent's new set, but not
    # every CPU (written by the daemon before the pool shrank).
    wr "$CS/$K/b/cpuset.cpus" "1-3" >/dev/null
    wr "$CS/$K/cpuset.cpus" "1-2" >/dev/null
    is v2-holding-child-follows-parent-narrowing 1-2 "$(eff "$K/b")" "cpuset.cpus $(cpus "$K/b")"
    wr "$CS/$K/cpuset.cpus" "1-$HI" >/dev/null
    rmdir "$CS/$K/b"
    is v2-partition-file present "$( [ -e "$CS/$K/a/cpuset.cpus.partition" ] && echo present)"
    # Isolated partitions (issue #16), observed and not yet relied on: what
    # each kernel says (SEEN lines) before the daemon's checks are written.
    seen() { echo "SEEN $HIER/$TOPO/$SCEN/$1: $2"; }
    # part REL VALUE: writes REL's cpuset.cpus.partition; prints the write's
    # result and the state the kernel reports then.
    part() { echo "$(wr "$CS/$1/cpuset.cpus.partition" "$2"): $(cat "$CS/$1/cpuset.cpus.partition")"; }
    P=kpart
    wr "$CS/$K/cpuset.cpus" "1-$((HI - 1))" >/dev/null # a sibling holding $HI would block a partition
    mkdir "$CS/$P"
    echo "+cpuset" > "$CS/$P/cgroup.subtree_control"
    mkdir "$CS/$P/c"
    if [ -e "$CS/$P/cpuset.cpus.exclusive" ]; then
        seen partition-exclusive-file "present ($(uname -r))"
        seen partition-parent-exclusive "$(wr "$CS/$P/cpuset.cpus.exclusive" "$HI")"
        seen partition-parent-root "$(part "$P" root)"
        seen partition-child-exclusive "$(wr "$CS/$P/c/cpuset.cpus.exclusive" "$HI")"
        seen partition-child-isolated "$(part "$P/c" isolated)"
        seen partition-child-exclusive-effective "$(cat "$CS/$P/c/cpuset.cpus.exclusive.effective" 2>&1)"
        seen partition-child-effective "$(eff "$P/c")"
        seen partition-root-isolated-list "$(cat "$CS/cpuset.cpus.isolated" 2>&1)"
        seen partition-root-effective "$(eff "")"
        seen partition-child-bad-exclusive "$(wr "$CS/$P/c/cpuset.cpus.exclusive" "0"): $(cat "$CS/$P/c/cpuset.cpus.partition")"
        seen partition-child-member "$(part "$P/c" member)"
        seen partition-parent-member "$(part "$P" member)"
        seen partition-root-effective-after "$(eff "")"
    else
        seen partition-exclusive-file "absent ($(uname -r))"
        wr "$CS/$P/c/cpuset.cpus" "$HI" >/dev/null
        seen partition-child-isolated-without-parent "$(part "$P/c" isolated)"
        wr "$CS/$P/c/cpuset.cpus.partition" member >/dev/null
        wr "$CS/$P/cpuset.cpus" "$HI" >/dev/null
        seen partition-parent-root "$(part "$P" root)"
        seen partition-child-isolated "$(part "$P/c" isolated)"
        seen partition-root-effective "$(eff "")"
        wr "$CS/$P/c/cpuset.cpus.partition" member >/dev/null
        wr "$CS/$P/cpuset.cpus.partition" member >/dev/null
    fi
    rmdir "$CS/$P/c" "$CS/$P"
    if [ -e "$CS/$K/cpuset.cpus.exclusive" ]; then
        # A remote partition, as isolation = "partition" would make one: the
        # workload deep in a tree of member cgroups (kubepods.slice, its pod,
        # the container), its CPUs granted by cpuset.cpus.exclusive down the
        # path, the leaf isolated; a sibling (system.slice) holds every CPU.
        # Seen on 6.12.117 (Debian), 16 CPUs: the grant is taken top-down
        # while the sibling holds every CPU; the leaf becomes "isolated",
        # and its CPU leaves every other cgroup's effective set (root,
        # sibling, its own parents) and shows in the root's
        # cpuset.cpus.isolated; a sibling's overlapping grant is EINVAL; the
        # leaf's cpuset.cpus may hold more than its grant. A parent's grant
        # shrunk below the leaf's, or the leaf's CPU taken offline, makes it
        # "isolated invalid (...)" and it stays invalid after the grant or
        # the CPU comes back, until the partition is written again. Undone
        # leaf first (member), then the grants in any order; a write of no
        # bytes (echo -n "") never reaches the kernel, so a grant is cleared
        # by a newline. The facts isolation = "partition" relies on are
        # checks (is), the rest observations (seen).
        R=kpods; S=ksys
        mkcg "$R"; mkcg "$R/pod"; mkcg "$R/pod/ctr"; mkcg "$S"
        wr "$CS/$S/cpuset.cpus" "$ALL" >/dev/null
        X2="$((HI - 1))-$HI"
        seen remote-root-children "$(for _c in "$CS"/*/; do _n=$(basename "$_c"); printf '%s=%s/%s ' "$_n" "$(cpus "$_n")" "$(cat "$_c/cpuset.cpus.exclusive" 2>/dev/null)"; done)"
        seen remote-mid-before-top "$(wr "$CS/$R/pod/cpuset.cpus.exclusive" "$HI")"
        wr "$CS/$R/pod/cpuset.cpus.exclusive" "" >/dev/null
        seen remote-top-exclusive-sibling-holds "$(wr "$CS/$R/cpuset.cpus.exclusive" "$X2")"
        wr "$CS/$S/cpuset.cpus" "0-$((HI - 2))" >/dev/null
        wr "$CS/$K/cpuset.cpus" "1-$((HI - 2))" >/dev/null
        seen remote-top-exclusive-siblings-narrowed "$(wr "$CS/$R/cpuset.cpus.exclusive" "$X2")"
        wr "$CS/$R/cpuset.cpus" "$ALL" >/dev/null
        seen remote-top-exclusive-own-cpus-all "$(wr "$CS/$R/cpuset.cpus.exclusive" "$X2")"
        wr "$CS/$R/cpuset.cpus" "$X2" >/dev/null
        seen remote-top-exclusive-own-cpus-x "$(wr "$CS/$R/cpuset.cpus.exclusive" "$X2")"
        seen remote-top-exclusive-effective "$(cat "$CS/$R/cpuset.cpus.exclusive.effective" 2>&1)"
        seen remote-sibling-widened-over-grant "$(wr "$CS/$S/cpuset.cpus" "$ALL"): eff $(eff "$S")"
        is remote-mid-exclusive OK "$(wr "$CS/$R/pod/cpuset.cpus.exclusive" "$X2")"
        is remote-leaf-exclusive OK "$(wr "$CS/$R/pod/ctr/cpuset.cpus.exclusive" "$HI")"
        seen remote-leaf-cpus "$(wr "$CS/$R/pod/ctr/cpuset.cpus" "$HI")"
        seen remote-sibling-effective-before "$(eff "$S")"
        is remote-leaf-isolated "OK: isolated" "$(part "$R/pod/ctr" isolated)"
        is remote-leaf-exclusive-effective "$HI" "$(cat "$CS/$R/pod/ctr/cpuset.cpus.exclusive.effective" 2>&1)"
        seen remote-leaf-effective "$(eff "$R/pod/ctr")"
        seen remote-mid-effective "$(eff "$R/pod")"
        seen remote-top-effective "$(eff "$R")"
        is remote-sibling-without "" "$(cl inter "$(eff "$S")" "$HI")" "its effective $(eff "$S")"
        is remote-root-without "" "$(cl inter "$(eff "")" "$HI")" "its effective $(eff "")"
        is remote-root-isolated-list "$HI" "$(cat "$CS/cpuset.cpus.isolated" 2>&1)"
        seen remote-sys-isolated "$(cat /sys/devices/system/cpu/isolated 2>&1)"
        sleep 1000 </dev/null >/dev/null 2>&1 & _T=$!
        echo "$_T" > "$CS/$R/pod/ctr/cgroup.procs"
        seen remote-task-allowed "$(allowed "$_T")"
        seen remote-sibling-exclusive-overlap "$(wr "$CS/$S/cpuset.cpus.exclusive" "$HI")"
        seen remote-leaf-cpus-widened "$(wr "$CS/$R/pod/ctr/cpuset.cpus" "$X2"): $(cat "$CS/$R/pod/ctr/cpuset.cpus.partition")"
        wr "$CS/$R/pod/ctr/cpuset.cpus" "$HI" >/dev/null
        seen remote-leaf-after-narrowing "$(cat "$CS/$R/pod/ctr/cpuset.cpus.partition")"
        # Why a workload whose CPUs move leaves its partition first.
        is remote-leaf-cpus-moved "OK: isolated; eff $HI" "$(wr "$CS/$R/pod/ctr/cpuset.cpus" "$((HI - 1))"): $(cat "$CS/$R/pod/ctr/cpuset.cpus.partition"); eff $(eff "$R/pod/ctr")"
        wr "$CS/$R/pod/ctr/cpuset.cpus" "$HI" >/dev/null
        seen remote-leaf-after-moved-back "$(cat "$CS/$R/pod/ctr/cpuset.cpus.partition")"
        seen remote-mid-cpus-below-grant "$(wr "$CS/$R/pod/cpuset.cpus" "0-$((HI - 2))"): $(cat "$CS/$R/pod/ctr/cpuset.cpus.partition"); eff $(eff "$R/pod/ctr")"
        wr "$CS/$R/pod/cpuset.cpus" "$ALL" >/dev/null
        seen remote-leaf-after-mid-cpus-back "$(cat "$CS/$R/pod/ctr/cpuset.cpus.partition")"
        part "$R/pod/ctr" isolated >/dev/null
        _r="$(wr "$CS/$R/pod/cpuset.cpus.exclusive" "$((HI - 1))"): $(cat "$CS/$R/pod/ctr/cpuset.cpus.partition")"
        _why=${_r#*invalid (}
        is remote-mid-exclusive-shrunk "OK: isolated invalid" "${_r%% (*}" "${_why%)}"
        wr "$CS/$R/pod/cpuset.cpus.exclusive" "$X2" >/dev/null
        _r=$(cat "$CS/$R/pod/ctr/cpuset.cpus.partition")
        _why=${_r#*invalid (}
        is remote-leaf-stays-invalid-after-regrant "isolated invalid" "${_r%% (*}" "${_why%)}"
        if [ -e "/sys/devices/system/cpu/cpu$HI/online" ]; then
            echo 0 > "/sys/devices/system/cpu/cpu$HI/online"
            seen remote-leaf-cpu-offline "$(cat "$CS/$R/pod/ctr/cpuset.cpus.partition"); eff $(eff "$R/pod/ctr"); task $(allowed "$_T")"
            echo 1 > "/sys/devices/system/cpu/cpu$HI/online"
            sleep 0.5
            seen remote-leaf-cpu-online "$(cat "$CS/$R/pod/ctr/cpuset.cpus.partition"); eff $(eff "$R/pod/ctr"); task $(allowed "$_T")"
        fi
        is remote-leaf-member "OK: member" "$(part "$R/pod/ctr" member)"
        seen remote-task-allowed-after "$(allowed "$_T")"
        wr "$CS/$R/pod/ctr/cpuset.cpus.exclusive" "" >/dev/null
        is remote-empty-write-ignored "$HI" "$(cat "$CS/$R/pod/ctr/cpuset.cpus.exclusive")" "a write of no bytes"
        NL='
'
        is remote-leaf-exclusive-clear OK "$(wr "$CS/$R/pod/ctr/cpuset.cpus.exclusive" "$NL")"
        is remote-leaf-exclusive-cleared "" "$(cat "$CS/$R/pod/ctr/cpuset.cpus.exclusive")"
        is remote-mid-exclusive-clear OK "$(wr "$CS/$R/pod/cpuset.cpus.exclusive" "$NL")"
        is remote-top-exclusive-clear OK "$(wr "$CS/$R/cpuset.cpus.exclusive" "$NL")"
        is remote-root-after "$ALL; isolated " "$(eff ""); isolated $(cat "$CS/cpuset.cpus.isolated" 2>&1)"
        kill -9 "$_T"; wait "$_T" 2>/dev/null
        rmcg "$R" "$S"
    fi
fi
# What lifting an exclusive workload's CFS quota (issue #16) relies on, in
# the cpu controller of either version: an unlimited quota (v2 `max`, v1
# -1) stops the throttling; v1 refuses a child's quota above its parent's
# and a parent's below a child's, but takes an unlimited child under a
# limited parent (a lifted container's -1 never blocks putting its pod's
# quota back); v2 takes them all.
Q=kquota
mkcg "$Q"
mkcg "$Q/c"
q_set() {
    if [ "$HIER" = v2 ]; then
        wr "$CPU/$1/cpu.max" "$2 100000"
    else
        [ "$2" = max ] && set -- "$1" -1
        wr "$CPU/$1/cpu.cfs_quota_us" "$2"
    fi
}
q_get() {
    if [ "$HIER" = v2 ]; then cut -d' ' -f1 "$CPU/$1/cpu.max"; else cat "$CPU/$1/cpu.cfs_quota_us"; fi
}
throttled() { awk '$1 == "nr_throttled" { print $2 }' "$CPU/$1/cpu.stat"; }
# grows REL: whether REL's nr_throttled grows over a second.
grows() {
    _a=$(throttled "$1")
    sleep 1
    _b=$(throttled "$1")
    [ "${_b:-0}" -gt "${_a:-0}" ] && echo grows || echo "still ($_a)"
}
sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
BUSY=$!
echo "$BUSY" > "$CPU/$Q/c/cgroup.procs"
is quota-half-cpu OK "$(q_set "$Q/c" 50000)"
is quota-throttles grows "$(grows "$Q/c")"
is quota-lift OK "$(q_set "$Q/c" max)"
if [ "$HIER" = v2 ]; then _unl=max; else _unl=-1; fi
is quota-lift-reads-back "$_unl" "$(q_get "$Q/c")"
is quota-lifted-not-throttled "still ($(throttled "$Q/c"))" "$(grows "$Q/c")"
# The busy loop goes before any parent gets a quota: one boot of 16 (TCG,
# 16 vCPUs, kernel 6.1, v2) hung for good right after the parent's 0.5-CPU
# quota was written under a lifted child running it (the other 15 saw the
# parent's nr_throttled grow). Until that is understood, the parent's
# throttling is not probed here.
kill -9 "$BUSY"
is quota-parent-half-cpu OK "$(q_set "$Q" 50000)"
q_set "$Q/c" 40000 >/dev/null
if [ "$HIER" = v1 ]; then
    is v1-quota-above-parent-EINVAL EINVAL "$(q_set "$Q/c" 80000)"
    is v1-parent-below-child-EINVAL EINVAL "$(q_set "$Q" 30000)"
else
    is v2-quota-above-parent-accepted OK "$(q_set "$Q/c" 80000)"
    is v2-parent-below-child-accepted OK "$(q_set "$Q" 30000)"
fi
is quota-unlimited-under-limited-parent OK "$(q_set "$Q/c" max)"
is quota-parent-lift OK "$(q_set "$Q" max)"
is quota-put-back OK "$(q_set "$Q/c" 50000)"
is quota-put-back-reads 50000 "$(q_get "$Q/c")"
rmcg "$Q"
vm-helper setxattr "$CS/$K" user.pinctl.cpus 4 && is xattr-on-cgroupfs 4 "$(vm-helper getxattr "$CS/$K" user.pinctl.cpus)"
rmcg "$K"

# Interrupt affinity (issue #16's irq_affinity), under /proc/irq: what
# steering device interrupts off exclusive CPUs relies on. The default
# affinity (a hex mask) takes a write and reads it back; an interrupt's
# smp_affinity_list takes a CPU list and reads it back (the serial port's,
# IO-APIC, not managed); each interrupt's present value written back to it
# says which refuse (kernel-managed ones, multi-queue MSI-X: EIO), observed
# as SEEN lines. Everything is put back as it was.
seen() { echo "SEEN $HIER/$TOPO/$SCEN/$1: $2"; }
_def=$(cat /proc/irq/default_smp_affinity)
is irq-default-write OK "$(wr /proc/irq/default_smp_affinity 1)"
is irq-default-reads-back 1 "$(tr -d , </proc/irq/default_smp_affinity | sed 's/^0*//')"
is irq-default-put-back OK "$(wr /proc/irq/default_smp_affinity "$_def")"
_serial=$(awk '/ttyS0/ { sub(":", "", $1); print $1; exit }' /proc/interrupts)
if [ -n "$_serial" ] && [ -e "/proc/irq/$_serial/smp_affinity_list" ]; then
    _was=$(cat "/proc/irq/$_serial/smp_affinity_list")
    is irq-serial-write OK "$(wr "/proc/irq/$_serial/smp_affinity_list" 0)" "irq $_serial was $_was"
    is irq-serial-reads-back 0 "$(cat "/proc/irq/$_serial/smp_affinity_list")"
    seen irq-serial-effective "$(cat "/proc/irq/$_serial/effective_affinity_list" 2>&1)"
    is irq-serial-put-back OK "$(wr "/proc/irq/$_serial/smp_affinity_list" "$_was")"
    is irq-serial-put-back-reads "$_was" "$(cat "/proc/irq/$_serial/smp_affinity_list")"
else
    seen irq-serial "no ttyS0 in /proc/interrupts"
fi
_ok=0; _eio=""; _other=""
for _d in /proc/irq/[0-9]*; do
    [ -e "$_d/smp_affinity_list" ] || continue
    _n=${_d##*/}
    _r=$(wr "$_d/smp_affinity_list" "$(cat "$_d/smp_affinity_list")")
    case "$_r" in
        OK) _ok=$((_ok + 1)) ;;
        EIO) _eio="$_eio $_n($(awk -v n="$_n:" '$1 == n { print $NF }' /proc/interrupts))" ;;
        *) _other="$_other $_n:$_r" ;;
    esac
done
seen irq-rewrite "$_ok take their own value back; EIO:${_eio:- none}; other:${_other:- none}"
