# Kubernetes in-place pod resize (issue #34) with the real stack: Debian's
# containerd (1.6, its CRI plugin, runc) driven by the bed's CRI client
# (cri.sh, cri.py), run with runc's systemd driver and its cgroupfs
# driver, as cri_drivers says (the guest: one per hierarchy by default).
# A Guaranteed pod's container of 2 CPUs is pinned by the kubelet rule;
# the pod's limit is written as the kubelet writes it (CPUQuota= on the
# pod's slice through systemd, or the pod cgroup's own files), and the
# container is resized as the kubelet resizes it, with CRI
# UpdateContainerResources (containerd runs `runc update`): on a grow the
# pod's limit first, then the container's; on a shrink the other way round.
#
# Per driver, beside a neighbour pinned on 1 CPU: 2 → 4 gives a superset
# of the 2 it had, and the shared pool (a Burstable container; on v2
# system.slice too) loses the 2 new CPUs; 4 → 3 keeps a subset that holds
# the 2 first given, and the pool widens; → 1, below those 2, is refused:
# the set stays, `pinctl status` lists it under "Resizes pending" and
# `pinctl describe` has a Resize: line, before and after a restart of the
# daemon; → 2 is the first 2 again; with the node filled by another pin, 2 → 4 does not fit:
# the set stays, shown pending, and it grows once the other pin is gone;
# then `runc update --cpu-quota` on the running container (runc's root as
# containerd uses it) grows it to 5; on the systemd driver runc sets
# CPUQuota= on the container's scope through systemd, and a daemon-reload
# (systemd writes that quota back) changes nothing; 5 → 2.5, no whole
# number, lets it go to the shared pool with the kubelet's quota kept as
# written (not the one kept when it was lifted). After each resize the
# quota reads unlimited again and the limit kept (user.pinctl.quota) is the
# new one, on the container and on its pod. During every resize the
# container's process affinity is read every 10 ms: it never loses one of
# its first 2 CPUs, is never on another workload's exclusive CPUs, and
# never holds a CPU outside its sets before and after. The teardown gives
# the CPUs back and leaves the neighbour where it was.
. /vm/debian/cri/cri.sh
RUNC_ROOT=/run/containerd/runc/k8s.io
# The exclusive CPUs of the earlier scenarios (none when only install ran).
OTHERS=$(cl union "${EXCL:-}" "$(cl union "${X:-}" "${R:-}")")

# pod_limit N: the Guaranteed pod's limit of N CPUs, as the kubelet writes
# it for its driver: CPUQuota= on the pod's slice (systemd writes the
# cgroup's files), or the pod cgroup's files.
pod_limit() {
    if [ "$DRV" = systemd ]; then
        systemctl set-property --runtime "$(basename "$GPOD")" "CPUQuota=$(($1 * 100))%" 2>&1
    else
        limit "$GPOD" "$1" 2>&1
    fi
}
# ctr_limit N HOW: the container's limit of N CPUs through CRI
# UpdateContainerResources (cri) or `runc update --cpu-quota` (runc).
ctr_limit() {
    if [ "$2" = runc ]; then
        _sd=""
        [ "$DRV" = systemd ] && _sd=--systemd-cgroup
        runc --root "$RUNC_ROOT" $_sd update --cpu-quota $(($1 * 100000)) "$GID" 2>&1
    else
        $CRI update "$GID" --cpus "$1" 2>&1
    fi
}
# resize FROM TO HOW: the kubelet's in-place resize of the container, in
# its order of writes.
resize() {
    if [ "$2" -gt "$1" ]; then
        pod_limit "$2" && ctr_limit "$2" "$3"
    else
        ctr_limit "$2" "$3" && pod_limit "$2"
    fi
    echo "$1 → $2 CPUs ($3)"
}

# watch_start TAG KEEP AVOID: the container's process affinity read every
# 10 ms in the background (vm-helper affinity) until watch_stop.
watch_start() {
    rm -f "/run/aff-$1.ready" "/run/aff-$1.stop"
    vm-helper affinity "$GP" "$2" "$3" "/run/aff-$1.ready" "/run/aff-$1.stop" >"/run/aff-$1.out" 2>&1 &
    AFF_PID=$!
    wait_for 30 test -e "/run/aff-$1.ready" || note "affinity sampler $1 not ready: $(tr '\n' ';' <"/run/aff-$1.out")"
}
# watch_stop NAME TAG WITHIN: stops it; no reading lost a CPU of KEEP or
# held one of AVOID, and every reading was within WITHIN.
watch_stop() {
    touch "/run/aff-$2.stop"
    wait "$AFF_PID"; _arc=$?
    _within() {
        _bad=""
        for _v in $(awk '$1 == "seen" { print $2 }' "/run/aff-$1.out"); do
            [ -z "$(cl minus "$_v" "$2")" ] || _bad="$_bad $_v"
        done
        _sum=$(grep -v '^seen ' "/run/aff-$1.out" | tail -n 5 | tr '\n' ';')
        _seen=$(awk '$1 == "seen" { printf "%s(%s) ", $2, $3 }' "/run/aff-$1.out")
        [ "$_arc" = 0 ] && [ -z "$_bad" ] || { echo "seen $_seen; outside $2:${_bad:- none}; $_sum"; return 1; }
        echo "seen $_seen; $_sum"
    }
    check "$1" "affinity never lost a first CPU, never on another's, within $3" _within "$2" "$3"
}

# _read_quota REL: REL's quota (_q: max or -1 when unlimited) and the limit
# the daemon kept (_k: user.pinctl.quota).
_read_quota() {
    if [ "$HIER" = v1 ]; then _q=$(cat "$CPU/$1/cpu.cfs_quota_us" 2>&1); else _q=$(cut -d' ' -f1 "$CPU/$1/cpu.max" 2>&1); fi
    _k=$(vm-helper getxattr "$CS/$1" user.pinctl.quota 2>&1)
}
# quota_ok NAME REL N: REL's quota reads unlimited again and the limit kept
# is N CPUs.
_quota_is() {
    _read_quota "$1"
    case "$_q" in max | -1) [ "$_k" = "$2 100000" ] ;; *) false ;; esac
}
quota_ok() {
    if wait_for "$WAIT" _quota_is "$2" $(($3 * 100000)); then
        pass "$1" "quota of $2 unlimited ($_q), kept '$_k'"
    else
        fail "$1" "quota of $2: expected unlimited, kept '$(($3 * 100000)) 100000', got '$_q', kept '$_k'"
    fi
}

# quota_stays NAME REL Q: REL's quota reads Q, the limit kept is emptied,
# and the quota still reads Q 2 s later.
_limited_is() {
    _read_quota "$1"
    [ "$_q" = "$2" ] && [ -z "$_k" ]
}
quota_stays() {
    if wait_for "$WAIT" _limited_is "$2" "$3" && sleep 2 && _limited_is "$2" "$3"; then
        pass "$1" "quota of $2 stays $_q, nothing kept"
    else
        fail "$1" "quota of $2: expected $3 to stay, nothing kept; got '$_q', kept '$_k'"
    fi
}

# pending N: `pinctl status` lists the container under "Resizes pending",
# wanting N; not_pending: it lists no resize.
_section() { pinctl status 2>&1 | awk '/^Resizes pending/ { on = 1 } on && /^$/ { exit } on'; }
pending() { _s=$(_section); echo "$_s" | grep -q "wants $1:" && echo "$_s" | tr -s ' \n' ' '; }
not_pending() { _s=$(_section); [ -z "$_s" ] || { echo "$_s" | tr -s ' \n' ' '; return 1; }; }
# described N: `pinctl describe` of the container has its Resize: line.
described() { _d=$(pinctl describe "$GID" 2>&1); echo "$_d" | grep "Resize:.*wants $1" || { echo "$_d" | tr -s ' \n' ' '; return 1; }; }
pending_ok() {
    if wait_for "$WAIT" pending "$2" >/dev/null; then pass "$1" "$(pending "$2")"; else fail "$1" "no resize wanting $2 under \"Resizes pending\": $(pinctl status 2>&1 | tr -s ' \n' ' ')"; fi
}

# pool_ok NAME SET: the shared pool is online minus the others' CPUs and
# SET, for the Burstable container and, on v2, system.slice.
pool_ok() {
    expect "$1" "$(cl minus "$(online)" "$(cl union "$OTHERS" "$2")")" allowed "$BP"
    [ "$HIER" = v1 ] || expect "$1-system" "$(cl minus "$(online)" "$(cl union "$OTHERS" "$2")")" eff system.slice
}
# grown NAME TAG N OLD: after a grow to N CPUs, the container holds N (set
# in GOT), the sampling TAG stops (within OLD and the N), and the N hold
# OLD.
grown() {
    pin "$1" "$GCG" "$3"
    _new=$GOT
    watch_stop "$1-affinity" "$2" "$(cl union "$4" "$_new")"
    check "$1-superset" "the $3 hold $4" superset "$_new" "$4"
    GOT=$_new
}
superset() { [ -z "$(cl minus "$2" "$1")" ] || { echo "$1 lacks $(cl minus "$2" "$1") of $2"; return 1; }; echo "$1 ⊇ $2"; }
subset() { superset "$2" "$1"; }

resize_round() {
    DRV=$1; T=$1; S5=""
    ctd_config "$DRV"
    check "$T-containerd" "containerd with runc's $DRV driver" _ctd_restart
    command ctr -n k8s.io images ls -q 2>/dev/null | grep -qx "$IMAGE" ||
        check image-import "one-layer busybox image imported with ctr" _import

    check "$T-burstable-run" "a Burstable pod: RunPodSandbox, CreateContainer, StartContainer" \
        run_pod rbu --name "rbu-$T" --uid "$(uid cgroupfs $((BASE + 1)))" --qos burstable --container app
    check "$T-guaranteed-run" "a Guaranteed pod of 2 CPUs" \
        run_pod rgu --name "rgu-$T" --uid "$(uid cgroupfs $((BASE + 2)))" --qos guaranteed --cpus 2 --container app
    ran rbu && ran rgu || return 0
    BP=$(pod_pid rbu app)
    GP=$(pod_pid rgu app); GID=$(pod_id rgu app); GCG=$(cg_of "$GP"); GPOD=$(dirname "$GCG")
    note "Guaranteed pod: app $GCG ($GID), Burstable: $(cg_of "$BP")"
    pin "$T-pinned" "$GCG" 2; B=$GOT
    [ "$(cl count "$B")" = 2 ] || { note "not pinned: the resizes are not tried"; return 0; }
    check "$T-limit-2" "the kubelet's pod limit" pod_limit 2
    quota_ok "$T-quota-2" "$GCG" 2
    quota_ok "$T-pod-quota-2" "$GPOD" 2
    # A neighbour pinned beside it (a Guaranteed container of 1 CPU, made
    # by hand as in scenario pin), whose CPU no resize may take.
    [ -d "$CS/kubepods" ] || mkcg kubepods
    container cgroupfs guaranteed $((BASE + 4)) 1; NB=$APP; NBPOD=$POD
    pin "$T-neighbour" "$NB" 1
    _outer=$OTHERS
    [ "$(cl count "$GOT")" = 1 ] && OTHERS=$(cl union "$OTHERS" "$GOT")
    pool_ok "$T-pool-2" "$B"

    # 2 → 4: a superset; the pool loses the 2 new CPUs.
    watch_start grow "$B" "$OTHERS"
    check "$T-resize-4" "UpdateContainerResources" resize 2 4 cri
    grown "$T-grown-4" grow 4 "$B"; S4=$GOT
    expect "$T-grown-process" "$S4" allowed "$GP"
    pool_ok "$T-pool-4" "$S4"
    quota_ok "$T-quota-4" "$GCG" 4
    quota_ok "$T-pod-quota-4" "$GPOD" 4
    if [ "$DRV" = systemd ]; then
        _scope_quota() { _v=$(systemctl show -p CPUQuotaPerSecUSec --value "$(basename "$GCG")"); echo "CPUQuotaPerSecUSec=$_v"; [ "$_v" = "$1" ]; }
        check "$T-scope-cpuquota-4" "runc set CPUQuota= on the scope through systemd" _scope_quota 4s
    fi

    # 4 → 3: a subset that holds the first 2; the pool widens.
    watch_start shrink "$B" "$OTHERS"
    check "$T-resize-3" "UpdateContainerResources" resize 4 3 cri
    pin "$T-shrunk-3" "$GCG" 3; S3=$GOT
    watch_stop "$T-shrink-affinity" shrink "$S4"
    check "$T-shrunk-subset" "the 3 are of the 4" subset "$S3" "$S4"
    check "$T-shrunk-keeps-first" "the 3 hold the first 2" superset "$S3" "$B"
    pool_ok "$T-pool-3" "$S3"
    quota_ok "$T-quota-3" "$GCG" 3

    # → 1, below the first 2: refused, shown, the set stays; the quota
    # still follows.
    watch_start below "$B" "$OTHERS"
    check "$T-resize-1" "UpdateContainerResources" resize 3 1 cri
    pending_ok "$T-below-pending" 1
    check "$T-below-describe" "pinctl describe $GID" described 1
    expect_stays "$T-below-stays" "$S3" eff "$GCG" 2
    # A restart while it waits: the set stays and the resize is still
    # pending (the first 2 come from the state file).
    check "$T-restart" "systemctl restart pinctld" systemctl restart pinctld.service
    pending_ok "$T-restart-pending" 1
    expect_stays "$T-restart-stays" "$S3" eff "$GCG" 1
    watch_stop "$T-below-affinity" below "$S3"
    quota_ok "$T-quota-1" "$GCG" 1
    # → 2: the first 2 again, nothing pending.
    check "$T-resize-2" "UpdateContainerResources" resize 1 2 cri
    expect "$T-back-to-first" "$B" eff "$GCG"
    check "$T-not-pending" "no resize pending" not_pending
    pool_ok "$T-pool-back" "$B"

    # 2 → 4 on a full node: another pin takes every free CPU but one.
    _free=$(cl count "$(cl minus "$(cl minus "$(online)" "$(cl union "$OTHERS" "$B")")" 0)")
    FILL=$((_free - 1))
    if [ "$FILL" -lt 1 ]; then
        note "$_free CPU(s) free: no room for another pin; the full node and runc update are not tried"
    else
        container cgroupfs guaranteed $((BASE + 5)) "$FILL"; FI=$APP; FIPOD=$POD
        pin "$T-filler" "$FI" "$FILL"; F=$GOT
        watch_start full "$B" "$(cl union "$OTHERS" "$F")"
        check "$T-resize-4-full" "UpdateContainerResources, $FILL of $_free free CPUs taken" resize 2 4 cri
        pending_ok "$T-full-pending" 4
        check "$T-full-describe" "pinctl describe $GID" described 4
        expect_stays "$T-full-stays" "$B" eff "$GCG" 2
        watch_stop "$T-full-affinity" full "$B"
        quota_ok "$T-full-quota" "$GCG" 4
        # The other pin goes: it grows.
        watch_start freed "$B" "$OTHERS"
        rmcg "$FIPOD"
        grown "$T-freed-grown-4" freed 4 "$B"; S4=$GOT
        check "$T-freed-not-pending" "no resize pending" not_pending
        pool_ok "$T-pool-freed" "$S4"

        # runc update on the running container, as containerd's shim runs it.
        watch_start runc "$B" "$OTHERS"
        check "$T-runc-5" "runc --root $RUNC_ROOT update --cpu-quota 500000 (pod's limit first)" resize 4 5 runc
        grown "$T-runc-grown-5" runc 5 "$S4"; S5=$GOT
        quota_ok "$T-runc-quota-5" "$GCG" 5
        pool_ok "$T-pool-5" "$S5"
        if [ "$DRV" = systemd ]; then
            check "$T-scope-cpuquota-5" "runc update set CPUQuota= on the scope through systemd" _scope_quota 5s
            # systemd writes the scope's and the slice's quotas back.
            watch_start reload "$S5" "$OTHERS"
            systemctl daemon-reload
            quota_ok "$T-reload-quota" "$GCG" 5
            quota_ok "$T-reload-pod-quota" "$GPOD" 5
            expect_stays "$T-reload-stays" "$S5" eff "$GCG" 2
            watch_stop "$T-reload-affinity" reload "$S5"
        fi
    fi

    # 5 → 2.5: no whole number of CPUs, so the kubelet rule lets it go;
    # the quotas the kubelet wrote (container first, then pod) stay.
    if [ -n "${S5:-}" ]; then
        _fraction() {
            $CRI update "$GID" --cpus 2.5 2>&1 || return 1
            if [ "$DRV" = systemd ]; then
                systemctl set-property --runtime "$(basename "$GPOD")" CPUQuota=250% 2>&1
            elif [ "$HIER" = v1 ]; then
                echo 250000 >"$CPU/$GPOD/cpu.cfs_quota_us"
            else
                echo "250000 100000" >"$CPU/$GPOD/cpu.max"
            fi
        }
        check "$T-resize-2.5" "UpdateContainerResources to 2.5 CPUs, then the pod's limit" _fraction
        pool_ok "$T-fraction-released" ""
        expect "$T-fraction-process" "$(cl minus "$(online)" "$OTHERS")" allowed "$GP"
        quota_stays "$T-fraction-quota" "$GCG" 250000
        quota_stays "$T-fraction-pod-quota" "$GPOD" 250000
    fi

    # Teardown: the Guaranteed pod's CPUs come back to the pool.
    _rm() { $CRI rm-pod --timeout 0 "$@" >/run/cri-rm.out 2>&1 || { tail -n 2 /run/cri-rm.out | tr '\n' ' '; return 1; }; tr '\n' ';' </run/cri-rm.out; }
    check "$T-teardown" "the Guaranteed pod removed" _rm "$(pod_id rgu sandbox)"
    pool_ok "$T-released" ""
    expect "$T-neighbour-kept" "$(cl minus "$OTHERS" "$_outer")" eff "$NB"
    check "$T-teardown-burstable" "the Burstable pod removed" _rm "$(pod_id rbu sandbox)"
    rmcg "$NBPOD"
    OTHERS=$_outer
}

for _drv in $(cri_drivers); do
    case $_drv in systemd) BASE=70 ;; cgroupfs) BASE=80 ;; esac
    resize_round "$_drv"
done
_stop() { systemctl stop containerd.service 2>&1; }
check containerd-stop "systemctl stop containerd" _stop
