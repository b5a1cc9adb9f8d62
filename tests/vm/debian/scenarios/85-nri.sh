# pinctld as containerd's NRI plugin (Debian 13: containerd 1.7 with NRI
# v0.6, off by default; Debian 12's 1.6 has none and skips this). Pods run
# over CRI as the kubelet runs them (cri.sh), runc's systemd driver.
#
# - A Burstable pod: made on the shared pool (the scope's AllowedCPUs=).
# - A Guaranteed pod of 2 CPUs: its bundle already holds 2 exclusive CPUs
#   (pinctld answered CreateContainer), its first process reads them as
#   its own before anything else runs, runc told systemd (the scope's
#   AllowedCPUs=), and a daemon-reload changes nothing. Its CFS quota is
#   lifted at create (the bundle's quota -1, the limit asked kept in the
#   annotation pinctl.io/quota-lifted), and stays lifted after the reload.
# - Resized to 4 CPUs through CRI: pinctld answers NRI's UpdateContainer
#   with the 4, keeping the first 2; runc tells systemd; a daemon-reload
#   keeps them.
# - The Burstable pod's scope follows the pool: pinctld updates it through
#   the runtime (UpdateContainers), runc tells systemd, and a
#   daemon-reload does not put it back on the pinned CPUs; after a restart
#   of pinctld (the runtime synchronizes it again) too.
# - pinctld stopped: the next pod starts unpinned (the runtime goes on
#   without its plugin); pinctld started again pins it through the watcher.
# - The teardown gives every CPU back.
# - A second CPU owner: the kubelet's static CPU manager (its checkpoint
#   file) is named in the status, and its exclusive CPUs leave the shared
#   pool; with the checkpoint gone, they come back.
. /vm/debian/cri/cri.sh

_ctd_version=$(containerd --version 2>/dev/null | awk '{ print $3 }')
case "$_ctd_version" in
    v1.[0-6].* | 1.[0-6].* | "")
        note "containerd ${_ctd_version:-missing} has no NRI (1.7 and later): skipped"
        return 0
        ;;
esac
EXCL=${EXCL:-$X}
DRV=systemd
OUT=/run/nri-out
mkdir -p "$OUT"
rm -f "$OUT"/*
rm -rf "${BUNDLES:?}"/*

# containerd with NRI on, then pinctld registered as its plugin.
ctd_config "$DRV"
cat >> "$CTD_CONF" <<'EOF'
  [plugins."io.containerd.nri.v1.nri"]
    disable = false
EOF
check nri-containerd "containerd $_ctd_version with NRI on" _ctd_restart
_sock() { [ -S /var/run/nri/nri.sock ] || { echo "no /var/run/nri/nri.sock"; return 1; }; }
check nri-socket "containerd made its NRI socket" _sock
[ -n "${IMPORTED:-}" ] || { check image-import "one-layer busybox image imported with ctr" _import && IMPORTED=1; }
cp "$CONFIG" /run/pinctld.toml.before-nri
sed -i '/^\[nri\]$/,$ s/^enabled = false$/enabled = true/' "$CONFIG"
check nri-restart "systemctl restart pinctld with [nri] on" systemctl restart pinctld.service
_linked() { pinctl status --json 2>/dev/null | jq -e '.nri.connected and (.nri.runtime // "" | startswith("containerd"))' >/dev/null; }
if wait_for 30 _linked; then
    pass nri-registered "pinctld is registered: $(pinctl status --json | jq -c .nri)"
else
    fail nri-registered "not registered: $(pinctl status --json 2>&1 | jq -c .nri 2>&1)"
fi
POOL=$(cl minus "$(online)" "$EXCL")

# A Burstable pod: made on the shared pool.
check nri-burstable-run "a Burstable pod with NRI" \
    run_pod nriburst --name nri-burst --uid "$(uid cgroupfs 73)" --qos burstable --container app
NB_APP=$(pod_pid nriburst app); NB_SCOPE=""
# (systemd shows a CPU list with spaces.)
_nb_allowed() { systemctl show -p AllowedCPUs --value "$NB_SCOPE" | tr ' ' ','; }
if ran nriburst; then
    NB_SCOPE=$(cg_of "$NB_APP"); NB_SCOPE=${NB_SCOPE##*/}
    expect nri-burstable-allowedcpus "$POOL" _nb_allowed x
fi

# A Guaranteed pod: made on its CPUs.
FIRST='grep Cpus_allowed_list /proc/$$/status > /out/first; exec sleep 1000000'
check nri-guaranteed-run "RunPodSandbox, CreateContainer, StartContainer with NRI" \
    run_pod nriguar --name nri-guar --uid "$(uid cgroupfs 71)" --qos guaranteed --cpus 2 \
    --command "$FIRST" --mount "$OUT:/out" --container app
NG_APP=$(pod_pid nriguar app); NG=""
if ran nriguar; then
    NG_CG=$(cg_of "$NG_APP")
    _bundle=$BUNDLES/$(pod_id nriguar app)/config.json
    NG=$(jq -r '.linux.resources.cpu.cpus // empty' "$_bundle" 2>/dev/null)
    check nri-bundle "the bundle holds 2 CPUs of the shared pool $POOL (none reserved) at create time: '$NG'" \
        eval '[ "$(cl count "$NG")" = 2 ] && [ "$(cl inter "$NG" "$POOL")" = "$(cl norm "$NG")" ] && [ -z "$(cl inter "$NG" 0)" ]'
    # Its quota lifted at create: unlimited in the bundle, the limit asked
    # kept in an annotation, the cgroup made with none (systemd's
    # CPUQuotaPerSecUSec= infinity, so a daemon-reload keeps it so), the
    # limit then kept on the cgroup too.
    _bq=$(jq -r '[.linux.resources.cpu.quota, .annotations["pinctl.io/quota-lifted"]] | map(tostring) | join(" ")' "$_bundle" 2>/dev/null)
    check nri-bundle-quota "the bundle's quota lifted, the limit kept as an annotation: '$_bq'" \
        [ "$_bq" = "-1 200000 100000" ]
    _cgq() {
        if [ "$HIER" = v1 ]; then cat "$CPU/$NG_CG/cpu.cfs_quota_us"; else awk '{ print $1 }' "$CPU/$NG_CG/cpu.max"; fi
    }
    _unlimited=max; [ "$HIER" = v1 ] && _unlimited=-1
    _cgq_lifted() { [ "$(_cgq 2>/dev/null)" = "$_unlimited" ]; }
    check nri-quota-made "the cgroup made with its quota lifted: '$(_cgq 2>&1)'" _cgq_lifted
    _kept() { [ "$(vm-helper getxattr "$CS/$NG_CG" user.pinctl.quota 2>/dev/null)" = "200000 100000" ]; }
    check nri-quota-kept "the limit asked kept on the cgroup (user.pinctl.quota)" wait_for "$WAIT" _kept
    _first() { wait_for 20 test -s "$OUT/first" || return 1; awk '{ print $2 }' "$OUT/first"; }
    expect nri-first-instruction "$NG" _first x
    pin nri-guaranteed-pinned "$NG_CG" 2
    expect nri-guaranteed-process "$NG" allowed "$NG_APP"
    _scope=${NG_CG##*/}
    _allowed() { systemctl show -p AllowedCPUs --value "$_scope" | tr " " ","; }
    expect nri-allowedcpus "$NG" _allowed x
    _told=$(journalctl -b -u pinctld.service --no-pager -o cat | grep -c "NRI CreateContainer: made on its exclusive CPUs")
    check nri-logged "pinctld logged its answer ($_told)" [ "$_told" -ge 1 ]
    systemctl daemon-reload
    expect_stays nri-after-reload "$NG" allowed "$NG_APP" 2
    check nri-quota-after-reload "still lifted after the reload: '$(_cgq 2>&1)'" _cgq_lifted
    expect nri-pool "$(cl minus "$POOL" "$NG")" allowed "$B_PID"
    if [ -n "$NB_SCOPE" ]; then
        expect nri-burstable-told "$(cl minus "$POOL" "$NG")" _nb_allowed x
        systemctl daemon-reload
        expect_stays nri-burstable-after-reload "$(cl minus "$POOL" "$NG")" allowed "$NB_APP" 2
    fi
fi

# pinctld stopped: the runtime makes the next pod without it, unpinned;
# started again, pinctld pins it as it finds it.
systemctl stop pinctld.service
rm -f "$OUT/first"
check nri-stopped-run "a Guaranteed pod while pinctld is stopped" \
    run_pod nrilate --name nri-late --uid "$(uid cgroupfs 72)" --qos guaranteed --cpus 2 \
    --command "$FIRST" --mount "$OUT:/out" --container app
NL_APP=$(pod_pid nrilate app)
if ran nrilate; then
    NL_CG=$(cg_of "$NL_APP")
    _late=$(awk '{ print $2 }' "$OUT/first" 2>/dev/null)
    check nri-stopped-unpinned "its first process ran on $(show "$_late"), not 2 exclusive CPUs" \
        eval '[ "$(cl count "$_late")" -gt 2 ]'
    check nri-start "systemctl start pinctld" systemctl start pinctld.service
    pin nri-stopped-pinned-later "$NL_CG" 2
    [ -z "$NG" ] || expect nri-guaranteed-kept "$NG" allowed "$NG_APP"
    # The runtime synchronized pinctld again; the pool lost the late pin.
    [ -z "$NB_SCOPE" ] || [ -z "$NG" ] ||
        expect nri-burstable-told-after-restart "$(cl minus "$(cl minus "$POOL" "$NG")" "$GOT")" _nb_allowed x
else
    systemctl start pinctld.service
fi

# An in-place resize through the runtime (the kubelet's
# UpdateContainerResources): pinctld resizes the Guaranteed container on
# NRI's UpdateContainer, before runc writes anything, and runc tells
# systemd the new set; a daemon-reload keeps it.
if [ -n "$NG" ]; then
    _up() { $CRI update "$(pod_id nriguar app)" --cpus 4 2>&1; }
    check nri-resize "UpdateContainerResources to 4 CPUs" _up
    pin nri-resized "$NG_CG" 4; NG4=$GOT
    check nri-resize-keeps "the 4 CPUs $(show "$NG4") keep its first 2 $(show "$NG")" \
        eval '[ "$(cl inter "$NG4" "$NG")" = "$(cl norm "$NG")" ]'
    expect nri-resize-allowedcpus "$NG4" _allowed x
    _rs=$(journalctl -b -u pinctld.service --no-pager -o cat | grep -c "NRI UpdateContainer: resized to its new limit")
    check nri-resize-logged "pinctld resized it on the runtime's call ($_rs)" [ "$_rs" -ge 1 ]
    systemctl daemon-reload
    expect_stays nri-resize-after-reload "$NG4" allowed "$NG_APP" 2
fi

# Teardown: every CPU back.
_rm() {
    # shellcheck disable=SC2046
    $CRI rm-pod --timeout 0 $(pod_id nriburst sandbox) $(pod_id nriguar sandbox) $(pod_id nrilate sandbox) \
        >/run/cri-rm.out 2>&1 || { tail -n 2 /run/cri-rm.out | tr '\n' ' '; return 1; }
}
check nri-teardown "StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox" _rm
shared_ok nri-released "$EXCL" burstable=$B_PID
_none() { [ "$(pinctl status --json | jq '.nri.announced')" = 0 ]; }
check nri-no-announcement-left "no container announced and unmade" _none

# A second CPU owner: a kubelet checkpoint with the static policy.
KUBELET_STATE=/var/lib/kubelet/cpu_manager_state
mkdir -p /var/lib/kubelet
_ctd_pid() { systemctl show -p MainPID --value containerd.service; }
_pool_now=$(pinctl status --json | jq -r .shared_pool)
printf '{"policyName":"static","defaultCpuSet":"0-13","entries":{"u1":{"app":"14-15"}},"checksum":1}\n' >"$KUBELET_STATE"
_owner() { pinctl status --json 2>/dev/null | jq -e '.other_owners[0].what | contains("static CPU manager")' >/dev/null; }
if wait_for 40 _owner; then
    pass nri-second-owner "named in the status: $(pinctl status --json | jq -c '.other_owners[0]')"
else
    fail nri-second-owner "not in the status: $(pinctl status --json | jq -c '.other_owners')"
fi
check nri-second-owner-line "pinctl status has its Owner: line" eval 'pinctl status | grep -q "^Owner.*static CPU manager"'
# pinctld gives back what it pinned in the kubepods subtrees (as after a
# reload): the shared pool is every CPU but the kubelet's and the pins
# elsewhere.
_off_kubelet() { _p=$(pinctl status --json | jq -r .shared_pool); [ -n "$_p" ] && [ -z "$(cl inter "$_p" 14-15)" ]; }
check nri-second-owner-pool "the shared pool leaves the kubelet's 14-15" wait_for 30 _off_kubelet
expect nri-second-owner-containerd "$(pinctl status --json | jq -r .shared_pool)" allowed "$(_ctd_pid)"
rm -f "$KUBELET_STATE"
expect nri-second-owner-gone "$_pool_now" allowed "$(_ctd_pid)"
_stop() { systemctl stop containerd.service 2>&1; }
check nri-containerd-stop "systemctl stop containerd" _stop
cp /run/pinctld.toml.before-nri "$CONFIG"
systemctl restart pinctld.service
