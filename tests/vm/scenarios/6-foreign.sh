# Scenario 6: another writer (the kubelet, `systemctl daemon-reload`) puts
# every CPU into a pinned container's cpuset and into system.slice: both are
# reverted, on inotify alone (no periodic reconcile).
write_config 1h
daemon_start || return
container systemd burstable 1; B_PID=$APP_PID
container systemd guaranteed 2 4; G=$APP; G_PID=$APP_PID
pin pinned "$G" 4; XG=$GOT
shared_ok before "$XG" burstable=$B_PID system=$SYS_PID

t0=$(now_ms)
echo "$(online)" > "$CS/$G/cpuset.cpus" && note "wrote $(online) to $G/cpuset.cpus"
expect container-reverted "$XG" eff "$G"
expect container-process "$XG" allowed "$G_PID"
note "container reverted after $(( $(now_ms) - t0 )) ms"
expect_stays container-stays "$XG" eff "$G" 1

echo "$(online)" > "$CS/system.slice/cpuset.cpus" && note "wrote $(online) to system.slice/cpuset.cpus"
shared_ok system-reverted "$XG" system=$SYS_PID burstable=$B_PID
