# Scenario 11: unthrottle_exclusive (its default, "kubelet") on a real
# kernel. A Guaranteed container's CFS quota and its pod's are lifted while
# it holds its CPUs (cpu.max "max", cpu.cfs_quota_us -1), the limits they had
# are kept on the cgroups (user.pinctl.quota), and a busy loop in the
# container is no longer throttled; the kubelet rule still pins it after a
# restart of the daemon (its state file removed); an opt-out (xattr "0")
# gives the CPUs back and puts both quotas back.
write_config 1h
daemon_start || return

# quota REL: the quota file's value, as the kernel prints it.
quota() {
    if [ "$HIER" = v2 ]; then cat "$CPU/$1/cpu.max"; else cat "$CPU/$1/cpu.cfs_quota_us"; fi
}
# kept REL: the limit the daemon kept on REL.
kept() { vm-helper getxattr "$CS/$1" user.pinctl.quota 2>/dev/null; }
_quota_is() { [ "$(quota "$1")" = "$2" ]; }
# quota_is NAME REL WANT: waits until REL's quota reads WANT.
quota_is() {
    if wait_for "$WAIT" _quota_is "$2" "$3"; then pass "$1" "$2: $3"; else fail "$1" "$2: expected $3 got $(quota "$2")"; fi
}
if [ "$HIER" = v2 ]; then UNL="max 100000"; L1="100000 100000"; L2="200000 100000"; else UNL=-1; L1=100000; L2=200000; fi

POD=$(pod systemd guaranteed "$(uid systemd 20)")
mkcg "$POD"
limit "$POD" 2
APP=$(ctr "$POD" "$(cid 41)")
mkcg "$APP"
limit "$APP" 1
pin quota-pinned "$APP" 1; X=$GOT
quota_is quota-lifted "$APP" "$UNL"
quota_is quota-pod-lifted "$POD" "$UNL"
check quota-kept "the container's limit kept on it: $(kept "$APP")" [ "$(kept "$APP")" = "100000 100000" ]
check quota-pod-kept "the pod's limit kept on it: $(kept "$POD")" [ "$(kept "$POD")" = "200000 100000" ]

# A busy loop in the container: no longer throttled.
sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
BUSY=$!
echo "$BUSY" > "$CS/$APP/cgroup.procs"
[ "$HIER" = v1 ] && echo "$BUSY" > "$CPU/$APP/cgroup.procs"
throttled() { awk '$1 == "nr_throttled" { print $2 }' "$CPU/$1/cpu.stat"; }
_t0=$(throttled "$APP"); sleep 2; _t1=$(throttled "$APP")
check quota-not-throttled "nr_throttled $_t0 -> $_t1 over 2 s of a busy loop" [ "$_t0" = "$_t1" ]
expect quota-busy-on-its-cpu "$X" allowed "$BUSY"
kill -9 "$BUSY"; wait "$BUSY" 2>/dev/null

# A restart with the state file gone: the kept limit still decides.
daemon_crash
rm -f "$STATE"
daemon_start || return
expect_stays quota-restart-pinned "$X" eff "$APP" 2
check quota-restart-lifted "still lifted: $(quota "$APP")" [ "$(quota "$APP")" = "$UNL" ]

# Opted out: CPUs back, both quotas put back, the kept limits emptied.
setx "$APP" 0
quota_is quota-put-back "$APP" "$L1"
quota_is quota-pod-put-back "$POD" "$L2"
check quota-kept-emptied "kept: '$(kept "$APP")' '$(kept "$POD")'" [ -z "$(kept "$APP")" -a -z "$(kept "$POD")" ]
rmcg "$POD"
