//! The NRI plugin's session against a stand-in runtime
//! (`support::nri_runtime`): registration, `Configure`, `Synchronize` in
//! parts, the container calls, the fallback to `StateChange`, a slow
//! daemon answered for in time, `UpdateContainers`, and a runtime that
//! restarts. The daemon's side here is a stub that answers as told; what
//! pinctld decides is tested in `nri_daemon.rs`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pinctl::nri::api::{self, event};
use pinctl::nri::ttrpc::code;
use pinctl::nri::{self, Answer, Asked, Call, Link, Registration, Settings};
use tokio::sync::mpsc;

use crate::support::nri_runtime::{Runtime, container, pod};

fn settings(budget: Duration) -> Settings {
    Settings {
        registration: Registration {
            name: "pinctl".to_string(),
            index: "10".to_string(),
        },
        budget,
        call_within: Duration::from_secs(5),
        fallback: Arc::new(|call: &Call| match call {
            Call::Create(_) => Answer::Create(api::CreateContainerResponse::default()),
            _ => Answer::Done,
        }),
    }
}

/// A stub daemon: answers each call with `answer`, and keeps every call.
struct Stub {
    calls: Arc<Mutex<Vec<Call>>>,
    outgoing: mpsc::Sender<nri::Outgoing>,
    links: mpsc::Receiver<Link>,
}

fn start(
    rt: &Runtime,
    budget: Duration,
    answer: impl Fn(&Call) -> Option<Answer> + Send + 'static,
) -> Stub {
    let (asked_tx, mut asked) = mpsc::channel::<Asked>(16);
    let (outgoing, outgoing_rx) = mpsc::channel(4);
    let (links_tx, links) = mpsc::channel(16);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let kept = calls.clone();
    tokio::spawn(async move {
        while let Some(Asked { call, reply }) = asked.recv().await {
            kept.lock().unwrap().push(call.clone());
            // None: never answered (the reply is kept, not dropped).
            match answer(&call) {
                Some(a) => {
                    let _ = reply.send(a);
                }
                None => std::mem::drop(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    drop(reply);
                })),
            }
        }
    });
    tokio::spawn(nri::keep_connected(
        rt.path.clone(),
        settings(budget),
        asked_tx,
        outgoing_rx,
        links_tx,
    ));
    Stub {
        calls,
        outgoing,
        links,
    }
}

fn cpus_of(r: &api::CreateContainerResponse) -> Option<String> {
    Some(
        r.adjust
            .as_ref()?
            .linux
            .as_ref()?
            .resources
            .as_ref()?
            .cpu
            .as_ref()?
            .cpus
            .clone(),
    )
}

#[tokio::test]
async fn the_plugin_registers_asks_for_container_events_and_answers_calls() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::bind(dir.path());
    let stub = start(&rt, Duration::from_secs(1), |call| {
        Some(match call {
            Call::Create(_) => Answer::Create(api::CreateContainerResponse {
                adjust: Some(api::ContainerAdjustment {
                    linux: Some(api::LinuxContainerAdjustment {
                        resources: Some(api::cpuset_resources("2-3", "0")),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            _ => Answer::Done,
        })
    });
    let mut conn = rt.accept().await;
    let reg = conn.registration().await;
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("pinctl", "10")
    );

    let configured: api::ConfigureResponse = conn
        .ask(
            "Configure",
            &api::ConfigureRequest {
                config: String::new(),
                runtime_name: "containerd".into(),
                runtime_version: "1.7.24".into(),
            },
        )
        .await;
    for e in [
        event::CREATE_CONTAINER,
        event::UPDATE_CONTAINER,
        event::STOP_CONTAINER,
        event::REMOVE_CONTAINER,
    ] {
        assert_ne!(configured.events & (1 << (e - 1)), 0, "event {e} asked for");
    }
    assert_eq!(configured.events & (1 << (event::RUN_POD_SANDBOX - 1)), 0);

    // A split Synchronize: the first part is answered by the session, the
    // daemon gets the whole.
    let part: api::SynchronizeResponse = conn
        .ask(
            "Synchronize",
            &api::SynchronizeRequest {
                pods: vec![pod("p1", "u1")],
                containers: vec![container("c1", "p1", "app", None)],
                more: true,
            },
        )
        .await;
    assert!(part.more && part.update.is_empty());
    let _: api::SynchronizeResponse = conn
        .ask(
            "Synchronize",
            &api::SynchronizeRequest {
                pods: vec![pod("p2", "u2")],
                containers: vec![container("c2", "p2", "app", None)],
                more: false,
            },
        )
        .await;

    let created: api::CreateContainerResponse = conn
        .ask(
            "CreateContainer",
            &api::CreateContainerRequest {
                pod: Some(pod("p3", "u3")),
                container: Some(container("c3", "p3", "app", Some((200_000, 100_000)))),
            },
        )
        .await;
    assert_eq!(cpus_of(&created).as_deref(), Some("2-3"));

    // A newer runtime's dedicated call is unimplemented, so that it falls
    // back to StateChange, which the daemon gets.
    let removed = conn
        .call(
            "RemoveContainer",
            &api::StopContainerRequest {
                pod: Some(pod("p3", "u3")),
                container: Some(container("c3", "p3", "app", None)),
            },
        )
        .await;
    assert_eq!(removed.unwrap_err().0, code::UNIMPLEMENTED);
    let _: api::Empty = conn
        .ask(
            "StateChange",
            &api::StateChangeEvent {
                event: event::REMOVE_CONTAINER,
                pod: Some(pod("p3", "u3")),
                container: Some(container("c3", "p3", "app", None)),
            },
        )
        .await;

    let calls = stub.calls.lock().unwrap().clone();
    let names: Vec<&str> = calls.iter().map(Call::name).collect();
    assert_eq!(
        names,
        ["Configure", "Synchronize", "CreateContainer", "StateChange"]
    );
    match &calls[1] {
        Call::Synchronize(s) => {
            let ids: Vec<&str> = s.containers.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids, ["c1", "c2"]);
            assert_eq!(s.pods.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    match &calls[0] {
        Call::Configured { runtime, version } => assert_eq!(
            (runtime.as_str(), version.as_str()),
            ("containerd", "1.7.24")
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_daemon_that_does_not_answer_in_time_is_answered_for_and_a_refusal_reaches_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::bind(dir.path());
    let _stub = start(&rt, Duration::from_millis(200), |call| match call {
        Call::Create(c) if c.container.as_ref().is_some_and(|c| c.id == "slow") => None,
        Call::Create(_) => Some(Answer::Refuse(
            "no exclusive CPUs left: 4 asked, 2 free".into(),
        )),
        _ => Some(Answer::Done),
    });
    let mut conn = rt.accept().await;
    conn.registration().await;

    let t = Instant::now();
    let created: api::CreateContainerResponse = conn
        .ask(
            "CreateContainer",
            &api::CreateContainerRequest {
                pod: Some(pod("p", "u")),
                container: Some(container("slow", "p", "app", None)),
            },
        )
        .await;
    let took = t.elapsed();
    assert_eq!(cpus_of(&created), None, "the fallback adjusts nothing");
    assert!(
        took < Duration::from_secs(2),
        "answered within the runtime's budget: {took:?}"
    );

    let refused = conn
        .call(
            "CreateContainer",
            &api::CreateContainerRequest {
                pod: Some(pod("p", "u")),
                container: Some(container("big", "p", "app", None)),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(refused.0, code::FAILED_PRECONDITION);
    assert!(refused.1.contains("4 asked, 2 free"), "{}", refused.1);
}

#[tokio::test]
async fn updates_reach_the_runtime_and_a_restarted_runtime_is_registered_with_again() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::bind(dir.path());
    let mut stub = start(&rt, Duration::from_secs(1), |_| Some(Answer::Done));
    let mut conn = rt.accept().await;
    conn.registration().await;
    assert_eq!(stub.links.recv().await, Some(Link::Up));
    conn.fail_updates.push("gone".to_string());

    let (tx, rx) = tokio::sync::oneshot::channel();
    let request = api::UpdateContainersRequest {
        update: ["c1", "gone"]
            .iter()
            .map(|id| api::ContainerUpdate {
                container_id: id.to_string(),
                linux: Some(api::LinuxContainerUpdate {
                    resources: Some(api::cpuset_resources("0-1,4-7", "")),
                }),
                ignore_failure: false,
            })
            .collect(),
        evict: Vec::new(),
    };
    stub.outgoing
        .send(nri::Outgoing { request, reply: tx })
        .await
        .unwrap();
    conn.wait_updates(1).await;
    // The runtime's answer goes back while the runtime reads on.
    let reader = tokio::spawn(async move {
        let _ = conn.call("Shutdown", &api::Empty {}).await;
        conn
    });
    let answer = rx.await.unwrap().unwrap();
    let failed: Vec<&str> = answer
        .failed
        .iter()
        .map(|c| c.container_id.as_str())
        .collect();
    assert_eq!(failed, ["gone"]);
    let conn = reader.await.unwrap();
    assert_eq!(
        conn.updates[0].update[0]
            .linux
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .cpu
            .as_ref()
            .unwrap()
            .cpus,
        "0-1,4-7"
    );

    // The runtime restarts: the plugin is told the link went, dials again
    // and registers again.
    drop(conn);
    match stub.links.recv().await {
        Some(Link::Down(why)) => assert!(why.contains("closed"), "{why}"),
        other => panic!("{other:?}"),
    }
    let mut again = rt.accept().await;
    assert_eq!(again.registration().await.plugin_name, "pinctl");
    assert_eq!(stub.links.recv().await, Some(Link::Up));
}
