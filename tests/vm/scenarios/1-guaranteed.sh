# Scenario 1: Guaranteed containers (systemd and cgroupfs drivers) get
# exclusive, topology-aligned CPUs; burstable, best-effort, pause and
# system.slice processes lose exactly those CPUs; the structure (kubepods
# roots, QoS and pod cgroups) keeps every CPU on v1 and gets the shared pool
# with the CPUs pinned below on v2; deleting a container gives its CPUs
# back. Event-driven: no periodic reconcile helps.
write_config 1h
daemon_start || return

container systemd burstable 1; B_PID=$APP_PID; B_PAUSE=$PAUSE_PID
container cgroupfs besteffort 2; E_PID=$APP_PID
shared_ok before "" burstable=$B_PID besteffort=$E_PID system=$SYS_PID

# A Guaranteed pod of the systemd driver asking for 4 CPUs.
container systemd guaranteed 3 4; G1=$APP; G1_POD=$POD; G1_PID=$APP_PID; G1_PAUSE=$PAUSE_PID
pin systemd-pinned "$G1" 4; X1=$GOT
OTHERS=""
check systemd-aligned "exclusive CPUs of the systemd-driver container" aligned "$X1" 4
expect systemd-process "$X1" allowed "$G1_PID"

# A Guaranteed pod of the cgroupfs driver asking for 2 CPUs.
container cgroupfs guaranteed 4 2; G2=$APP; G2_POD=$POD; G2_PID=$APP_PID; G2_PAUSE=$PAUSE_PID
pin cgroupfs-pinned "$G2" 2; X2=$GOT
OTHERS=$X1
check cgroupfs-aligned "exclusive CPUs of the cgroupfs-driver container" aligned "$X2" 2
expect cgroupfs-process "$X2" allowed "$G2_PID"
check disjoint "no CPU in two exclusive sets" disjoint "$X1" "$X2"

EX=$(cl union "$X1" "$X2")
shared_ok shared-lose "$EX" burstable=$B_PID besteffort=$E_PID system=$SYS_PID \
    pause-burstable=$B_PAUSE pause-systemd=$G1_PAUSE pause-cgroupfs=$G2_PAUSE
expect_stays systemd-kept "$X1" eff "$G1" 1
structure_ok structure "$EX" "$G1_POD=$X1" "$G2_POD=$X2"

expect system.slice-shared "$(cl minus "$(online)" "$EX")" eff system.slice

# A burstable container and a system service that come later run on the
# shared pool.
container cgroupfs burstable 5; L_PID=$APP_PID
mkcg system.slice/late.service
LS_PID=$(spawn system.slice/late.service)
shared_ok late "$EX" burstable-late=$L_PID service-late=$LS_PID

# Deleting the systemd-driver container gives its CPUs back.
rmcg "$G1"
shared_ok deleted-one "$X2" burstable=$B_PID besteffort=$E_PID system=$SYS_PID pause-systemd=$G1_PAUSE
expect cgroupfs-kept "$X2" eff "$G2"

# A pod and its container made in one go (v1: `mkdir -p`, every level empty).
G3_POD=$(pod cgroupfs guaranteed "$(uid cgroupfs 6)")
G3=$(ctr "$G3_POD" "$(cid 13)")
mkcg_p "$G3"
limit "$G3" 2
G3_PID=$(spawn "$G3")
pin mkdir-p-pinned "$G3" 2; X3=$GOT
OTHERS=$X2
check mkdir-p-aligned "exclusive CPUs of a container made with its pod at once" aligned "$X3" 2
expect mkdir-p-process "$X3" allowed "$G3_PID"
expect mkdir-p-pod "$(structure_set "$(cl union "$X2" "$X3")" "$X3")" eff "$G3_POD"
check mkdir-p-disjoint "no CPU in two exclusive sets" disjoint "$X2" "$X3"
shared_ok mkdir-p "$(cl union "$X2" "$X3")" burstable=$B_PID system=$SYS_PID
rmcg "$G3_POD"
rmcg "$G1_POD" "$G2_POD"
shared_ok deleted-all "" burstable=$B_PID besteffort=$E_PID system=$SYS_PID burstable-late=$L_PID \
    service-late=$LS_PID
