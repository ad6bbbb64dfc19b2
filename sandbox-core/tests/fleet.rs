//! Fleet operations against an in-memory cloud: owner labels and scoped listings through the
//! client, the reaper (dry run, real run, foreign sandboxes, concurrent reapers, failures) and
//! the fallback layer destroying the sandbox a provider fallen back from made after all.

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use sandbox_sdk_core::client::{Client, Hooks, LoserEvent, LoserOutcome, RetryPolicy};
use sandbox_sdk_core::fleet::{Owner, ReapPolicy, ReapReason, SkipReason, Usage, reap};
use sandbox_sdk_core::idempotency::{CreateLookup, FINGERPRINT_LABEL, create_fingerprint};
use sandbox_sdk_core::{
    Capabilities, Command, CreateSpec, Download, Error, ErrorKind, FileEventStream, FileInfo,
    Level, ListFilter, ListOptions, Metrics, PreviewLink, Process, ProcessInfo, Provider, Result,
    Sandbox, SandboxInfo, SandboxState, SandboxStream, SnapshotInfo, SshAccess, Transfer,
    UploadBody,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const HOUR: Duration = Duration::from_secs(3600);

fn at(hours: u32) -> SystemTime {
    SystemTime::UNIX_EPOCH + HOUR * hours
}

/// How the cloud answers a create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Creates {
    /// Makes the sandbox and answers with it.
    Normally,
    /// Makes the sandbox, but it shows only from the n-th look-up on, and the create answers
    /// with an ambiguous timeout (the answer was lost).
    AmbiguouslyVisibleAfter(usize),
}

#[derive(Debug)]
struct Cloud {
    name: &'static str,
    /// Whether `list` applies the filter (a provider that ignores it shows everything).
    honours_filter: bool,
    sandboxes: Mutex<BTreeMap<String, SandboxInfo>>,
    /// Idempotency key of each sandbox, by id.
    keys: Mutex<BTreeMap<String, String>>,
    /// Ids not yet visible, with the look-up from which they are.
    hidden: Mutex<BTreeMap<String, usize>>,
    lookups: AtomicUsize,
    next: AtomicUsize,
    destroyed: Mutex<Vec<String>>,
    /// Ids whose destroy fails with a 500.
    broken: Mutex<Vec<String>>,
}

impl Cloud {
    fn new(name: &'static str) -> Arc<Cloud> {
        Arc::new(Cloud {
            name,
            honours_filter: true,
            sandboxes: Mutex::default(),
            keys: Mutex::default(),
            hidden: Mutex::default(),
            lookups: AtomicUsize::new(0),
            next: AtomicUsize::new(1),
            destroyed: Mutex::default(),
            broken: Mutex::default(),
        })
    }

    fn ignoring_filters(name: &'static str) -> Arc<Cloud> {
        let mut cloud = Arc::try_unwrap(Cloud::new(name)).unwrap();
        cloud.honours_filter = false;
        Arc::new(cloud)
    }

    /// Puts a sandbox there directly (made by someone, some time ago).
    fn seed(&self, id: &str, state: SandboxState, created: u32, labels: &[(&str, &str)]) {
        let mut info = SandboxInfo::new(id, self.name, state);
        info.created_at = Some(at(created));
        info.metadata = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.sandboxes.lock().unwrap().insert(id.to_owned(), info);
    }

    fn ids(&self) -> Vec<String> {
        self.sandboxes.lock().unwrap().keys().cloned().collect()
    }

    fn visible(&self, id: &str) -> bool {
        let seen = self.lookups.load(Ordering::SeqCst);
        self.hidden
            .lock()
            .unwrap()
            .get(id)
            .is_none_or(|from| seen >= *from)
    }
}

#[derive(Debug)]
struct CloudProvider(Arc<Cloud>, Creates);

impl CloudProvider {
    fn of(cloud: &Arc<Cloud>) -> CloudProvider {
        CloudProvider(cloud.clone(), Creates::Normally)
    }
}

#[async_trait]
impl Provider for CloudProvider {
    fn name(&self) -> &str {
        self.0.name
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            list: Level::Native,
            ..Capabilities::NONE
        }
    }
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        let cloud = &self.0;
        let id = format!(
            "{}-{}",
            cloud.name,
            cloud.next.fetch_add(1, Ordering::SeqCst)
        );
        let mut info = SandboxInfo::new(&id, cloud.name, SandboxState::Running);
        info.metadata = spec.metadata.clone();
        // As every adapter's keyed create does.
        if let Some(fingerprint) = create_fingerprint(spec) {
            info.metadata.insert(FINGERPRINT_LABEL.into(), fingerprint);
        }
        info.created_at = Some(SystemTime::now());
        cloud.sandboxes.lock().unwrap().insert(id.clone(), info);
        if let Some(key) = &spec.idempotency_key {
            cloud.keys.lock().unwrap().insert(id.clone(), key.clone());
        }
        match self.1 {
            Creates::Normally => Ok(Box::new(CloudSandbox {
                cloud: cloud.clone(),
                id,
            })),
            Creates::AmbiguouslyVisibleAfter(n) => {
                let from = cloud.lookups.load(Ordering::SeqCst) + n;
                cloud.hidden.lock().unwrap().insert(id, from);
                Err(
                    Error::new(ErrorKind::Timeout, "the create's answer never came")
                        .with_ambiguous(true),
                )
            }
        }
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        if self.0.sandboxes.lock().unwrap().contains_key(id) && self.0.visible(id) {
            Ok(Box::new(CloudSandbox {
                cloud: self.0.clone(),
                id: id.to_owned(),
            }))
        } else {
            Err(Error::new(ErrorKind::NotFound, format!("no sandbox {id}")))
        }
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let cloud = &self.0;
        let infos: Vec<Result<SandboxInfo>> = cloud
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .filter(|i| cloud.visible(&i.id))
            .filter(|i| !cloud.honours_filter || filter.matches(i))
            .cloned()
            .map(Ok)
            .collect();
        Box::pin(futures::stream::iter(infos))
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        // Let a concurrent reaper interleave here, as a network round trip would.
        tokio::task::yield_now().await;
        if self.0.broken.lock().unwrap().iter().any(|b| b == id) {
            return Err(Error::new(ErrorKind::Provider, "internal error").with_status(500));
        }
        match self.0.sandboxes.lock().unwrap().remove(id) {
            Some(_) => {
                self.0.destroyed.lock().unwrap().push(id.to_owned());
                Ok(())
            }
            None => Err(Error::new(ErrorKind::NotFound, format!("no sandbox {id}"))),
        }
    }
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        let cloud = &self.0;
        cloud.lookups.fetch_add(1, Ordering::SeqCst);
        let keys = cloud.keys.lock().unwrap().clone();
        Ok(cloud
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .find(|i| keys.get(&i.id).map(String::as_str) == Some(key) && cloud.visible(&i.id))
            .cloned())
    }
    async fn usage(&self, sandbox: &SandboxInfo, _to: std::time::SystemTime) -> Result<Usage> {
        Err(Error::not_supported(self.0.name, "usage").with_sandbox_id(&sandbox.id))
    }
    async fn prepare(
        &self,
        _spec: &sandbox_sdk_core::fleet::PrepareSpec,
    ) -> Result<sandbox_sdk_core::fleet::Prepared> {
        Err(Error::not_supported(self.0.name, "prepare"))
    }
}

#[derive(Debug)]
struct CloudSandbox {
    cloud: Arc<Cloud>,
    id: String,
}

impl CloudSandbox {
    fn no<T>(&self, op: &str) -> Result<T> {
        Err(Error::not_supported(self.cloud.name, op))
    }
}

#[async_trait]
impl Sandbox for CloudSandbox {
    fn id(&self) -> &str {
        &self.id
    }
    fn provider(&self) -> &str {
        self.cloud.name
    }
    fn capabilities(&self) -> Capabilities {
        CloudProvider::of(&self.cloud).capabilities()
    }
    async fn info(&self) -> Result<SandboxInfo> {
        self.cloud
            .sandboxes
            .lock()
            .unwrap()
            .get(&self.id)
            .cloned()
            .ok_or_else(|| Error::new(ErrorKind::NotFound, "gone"))
    }
    async fn exec(&self, _command: &Command) -> Result<Process> {
        self.no("exec")
    }
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.no("processes")
    }
    async fn attach(&self, _pid: &str) -> Result<Process> {
        self.no("attach")
    }
    async fn kill_process(&self, _pid: &str) -> Result<()> {
        self.no("kill_process")
    }
    async fn upload(&self, _path: &str, _body: UploadBody) -> Result<Transfer> {
        self.no("upload")
    }
    async fn write_file(&self, _path: &str, _data: Bytes) -> Result<Transfer> {
        self.no("write_file")
    }
    async fn download(&self, _path: &str) -> Result<Download> {
        self.no("download")
    }
    async fn list_files(&self, _path: &str, _options: ListOptions) -> Result<Vec<FileInfo>> {
        self.no("list_files")
    }
    async fn stat(&self, _path: &str) -> Result<FileInfo> {
        self.no("stat")
    }
    async fn mkdir(&self, _path: &str) -> Result<()> {
        self.no("mkdir")
    }
    async fn remove(&self, _path: &str) -> Result<()> {
        self.no("remove")
    }
    async fn rename(&self, _from: &str, _to: &str) -> Result<()> {
        self.no("rename")
    }
    async fn watch(&self, _path: &str, _recursive: bool) -> Result<FileEventStream> {
        self.no("watch")
    }
    async fn stop(&self) -> Result<()> {
        self.no("stop")
    }
    async fn pause(&self) -> Result<()> {
        self.no("pause")
    }
    async fn resume(&self) -> Result<()> {
        self.no("resume")
    }
    async fn destroy(&self) -> Result<()> {
        CloudProvider::of(&self.cloud).destroy(&self.id).await
    }
    async fn set_timeout(&self, _timeout: Duration) -> Result<()> {
        self.no("set_timeout")
    }
    async fn preview_link(&self, _port: u16) -> Result<PreviewLink> {
        self.no("preview_link")
    }
    async fn ssh_access(&self, _ttl: Duration) -> Result<SshAccess> {
        self.no("ssh_access")
    }
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        self.no("fork")
    }
    async fn snapshot(&self, _name: Option<&str>) -> Result<SnapshotInfo> {
        self.no("snapshot")
    }
    async fn metrics(&self) -> Result<Metrics> {
        self.no("metrics")
    }
}

fn owner() -> Owner {
    Owner::new("ci").unwrap()
}

/// Ours: old, young, failed; not ours: an old sandbox with no label, one of another owner,
/// and one whose label key differs only by prefix.
fn fleet(cloud: &Cloud) {
    let ours = [("sandbox_sdk_owner", "ci")];
    cloud.seed("ours-old", SandboxState::Running, 10, &ours);
    cloud.seed("ours-young", SandboxState::Running, 99, &ours);
    cloud.seed("ours-failed", SandboxState::Failed, 99, &ours);
    cloud.seed("foreign-old", SandboxState::Running, 1, &[]);
    cloud.seed(
        "theirs-old",
        SandboxState::Failed,
        1,
        &[("sandbox_sdk_owner", "someone-else")],
    );
    cloud.seed(
        "other-prefix",
        SandboxState::Failed,
        1,
        &[("acme_owner", "ci")],
    );
}

fn policy() -> ReapPolicy {
    ReapPolicy::new().max_age(HOUR * 24).failed().at(at(100))
}

fn skipped(report: &sandbox_sdk_core::fleet::ReapReport) -> Vec<(String, SkipReason)> {
    let mut s: Vec<_> = report
        .skipped
        .iter()
        .map(|s| (s.id.clone(), s.reason.clone()))
        .collect();
    s.sort_by(|a, b| a.0.cmp(&b.0));
    s
}

#[tokio::test]
async fn the_dry_run_says_what_it_would_destroy_and_why_and_destroys_nothing() {
    // A provider that ignores the owner filter: the reaper's own check must hold.
    let cloud = Cloud::ignoring_filters("cloud");
    fleet(&cloud);
    let before = cloud.ids();
    let report = reap(
        &CloudProvider::of(&cloud),
        &owner(),
        &policy().dry_run(true),
    )
    .await
    .unwrap();
    assert!(report.dry_run);
    let planned: Vec<(&str, String)> = report
        .planned
        .iter()
        .map(|d| (d.info.id.as_str(), d.reasons_text()))
        .collect();
    assert_eq!(
        planned,
        [
            ("ours-failed", "failed".to_owned()),
            ("ours-old", "age 3d18h > 24h".to_owned())
        ]
    );
    assert_eq!(
        skipped(&report),
        [
            ("foreign-old".to_owned(), SkipReason::NotOurs),
            ("other-prefix".to_owned(), SkipReason::NotOurs),
            ("ours-young".to_owned(), SkipReason::NoRule),
            ("theirs-old".to_owned(), SkipReason::NotOurs),
        ]
    );
    assert!(report.destroyed.is_empty() && report.failed.is_empty());
    assert_eq!(cloud.ids(), before, "a dry run destroyed something");
    assert!(cloud.destroyed.lock().unwrap().is_empty());
    assert_eq!(
        report.summary_line(),
        "reap (dry run): 2 planned, 0 destroyed, 0 failed, 4 skipped"
    );
}

#[tokio::test]
async fn the_real_run_destroys_only_ours_and_leaves_foreign_sandboxes_alone() {
    for cloud in [Cloud::new("cloud"), Cloud::ignoring_filters("cloud")] {
        fleet(&cloud);
        let report = reap(&CloudProvider::of(&cloud), &owner(), &policy())
            .await
            .unwrap();
        assert_eq!(report.destroyed, ["ours-failed", "ours-old"]);
        assert!(report.failed.is_empty());
        assert_eq!(
            cloud.ids(),
            ["foreign-old", "other-prefix", "ours-young", "theirs-old"]
        );
        let mut destroyed = cloud.destroyed.lock().unwrap().clone();
        destroyed.sort();
        assert_eq!(destroyed, ["ours-failed", "ours-old"]);
    }
}

#[tokio::test]
async fn a_keep_set_keeps_its_sandboxes_and_reaps_the_rest_of_ours() {
    let cloud = Cloud::new("cloud");
    fleet(&cloud);
    let report = reap(
        &CloudProvider::of(&cloud),
        &owner(),
        &ReapPolicy::new().keep_only(["ours-old"]).at(at(100)),
    )
    .await
    .unwrap();
    assert_eq!(report.destroyed, ["ours-failed", "ours-young"]);
    let young = report
        .planned
        .iter()
        .find(|d| d.info.id == "ours-young")
        .unwrap();
    assert_eq!(young.reasons, [ReapReason::NotKept]);
    assert!(skipped(&report).contains(&("ours-old".to_owned(), SkipReason::Kept)));
    assert_eq!(
        cloud.ids(),
        ["foreign-old", "other-prefix", "ours-old", "theirs-old"]
    );
}

#[tokio::test]
async fn a_policy_with_no_rule_reaps_nothing() {
    let cloud = Cloud::new("cloud");
    fleet(&cloud);
    let report = reap(&CloudProvider::of(&cloud), &owner(), &ReapPolicy::new())
        .await
        .unwrap();
    assert!(report.planned.is_empty() && report.destroyed.is_empty());
    assert_eq!(cloud.ids().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapers_running_at_once_destroy_each_sandbox_once() {
    let cloud = Cloud::new("cloud");
    for i in 0..20 {
        cloud.seed(
            &format!("ours-{i:02}"),
            SandboxState::Running,
            1,
            &[("sandbox_sdk_owner", "ci")],
        );
    }
    cloud.seed("foreign", SandboxState::Running, 1, &[]);
    let provider = CloudProvider::of(&cloud);
    let owner = owner();
    let policy = policy();
    let (a, b) = tokio::join!(
        reap(&provider, &owner, &policy),
        reap(&provider, &owner, &policy)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let destroyed = a.destroyed.len() + b.destroyed.len();
    let gone = [&a, &b]
        .iter()
        .flat_map(|r| &r.skipped)
        .filter(|s| s.reason == SkipReason::Gone)
        .count();
    assert_eq!(destroyed, 20, "each sandbox destroyed exactly once");
    // Every sandbox one reaper destroyed and the other had planned too shows as gone there.
    assert_eq!(destroyed + gone, a.planned.len() + b.planned.len());
    assert_eq!(cloud.destroyed.lock().unwrap().len(), 20);
    assert_eq!(cloud.ids(), ["foreign"]);
}

#[tokio::test]
async fn a_failed_destroy_is_reported_and_the_others_go_on() {
    let cloud = Cloud::new("cloud");
    fleet(&cloud);
    cloud.broken.lock().unwrap().push("ours-old".into());
    let report = reap(&CloudProvider::of(&cloud), &owner(), &policy())
        .await
        .unwrap();
    assert_eq!(report.destroyed, ["ours-failed"]);
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.failed[0].doomed.info.id, "ours-old");
    assert_eq!(report.failed[0].error.status(), Some(500));
    assert!(cloud.ids().contains(&"ours-old".to_owned()));
}

#[tokio::test]
async fn an_owned_client_labels_creates_and_lists_only_its_own() {
    let cloud = Cloud::ignoring_filters("cloud");
    fleet(&cloud);
    let client = Client::builder(Arc::new(CloudProvider::of(&cloud)))
        .retry(RetryPolicy::never())
        .owner(owner())
        .build();
    let sandbox = client
        .create(&CreateSpec::new().metadata("team", "x"))
        .await
        .unwrap();
    let info = sandbox.info().await.unwrap();
    assert_eq!(info.metadata["sandbox_sdk_owner"], "ci");
    assert_eq!(info.metadata["team"], "x");
    let mut listed: Vec<String> = client
        .list(&ListFilter::new())
        .map_ok(|i| i.id)
        .try_collect()
        .await
        .unwrap();
    listed.sort();
    assert_eq!(listed, ["cloud-1", "ours-failed", "ours-old", "ours-young"]);
    // A spec naming another owner is refused before anything is made.
    let e = match client
        .create(&CreateSpec::new().metadata("sandbox_sdk_owner", "someone-else"))
        .await
    {
        Err(e) => e,
        Ok(_) => panic!("a second owner was accepted"),
    };
    assert_eq!(e.kind(), ErrorKind::Validation);
    assert_eq!(cloud.ids().len(), 7);
}

#[tokio::test]
async fn the_same_key_under_two_owners_is_two_keys_on_the_provider() {
    let cloud = Cloud::new("cloud");
    let client = |id: &str| {
        Client::builder(Arc::new(CloudProvider::of(&cloud)))
            .retry(RetryPolicy::never())
            .owner(Owner::new(id).unwrap())
            .build()
    };
    let (alice, bob) = (client("alice"), client("bob"));
    let spec = CreateSpec::new().idempotency_key("job-1");
    let a = alice.create(&spec).await.unwrap();
    let b = bob.create(&spec).await.unwrap();
    let keys = cloud.keys.lock().unwrap().clone();
    assert_ne!(keys[a.id()], keys[b.id()], "{keys:?}");
    assert!(keys.values().all(|k| k != "job-1"), "{keys:?}");
    // Each owner's look-up of its own key finds its own sandbox.
    for (client, sandbox) in [(&alice, &a), (&bob, &b)] {
        let found = client.find_by_idempotency_key("job-1").await.unwrap();
        assert_eq!(found.map(|i| i.id).as_deref(), Some(sandbox.id()));
    }
}

/// Hooks that pass each loser event on.
struct Losers(tokio::sync::mpsc::UnboundedSender<(String, String)>);

impl Hooks for Losers {
    fn on_fallback_loser(&self, event: &LoserEvent<'_>) {
        let outcome = match event.outcome {
            LoserOutcome::Destroyed { sandbox_id } => format!("destroyed {sandbox_id}"),
            LoserOutcome::NoneAppeared => "none appeared".to_owned(),
            other => format!("{other:?}"),
        };
        let _ = self.0.send((event.provider.to_owned(), outcome));
    }
}

fn fallback_client(
    primary: CloudProvider,
    fallback: CloudProvider,
) -> (
    Client,
    tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = Client::builder(Arc::new(primary))
        .fallback(Arc::new(fallback))
        .retry(RetryPolicy::never())
        .hooks(Arc::new(Losers(tx)))
        .loser_lookup(
            CreateLookup::new(Duration::from_secs(60))
                .intervals(Duration::from_secs(1), Duration::from_secs(8)),
        )
        .build();
    (client, rx)
}

#[tokio::test(start_paused = true)]
async fn a_fallback_after_an_ambiguous_create_leaves_exactly_one_sandbox() {
    // The primary makes the sandbox but the answer is lost; it shows up only at the fourth
    // look-up, after the fallback has made another one.
    let primary = Cloud::new("primary");
    let fallback = Cloud::new("fallback");
    let (client, mut losers) = fallback_client(
        CloudProvider(primary.clone(), Creates::AmbiguouslyVisibleAfter(4)),
        CloudProvider::of(&fallback),
    );
    let spec = CreateSpec::new().idempotency_key("job-1");
    let sandbox = client.create(&spec).await.unwrap();
    assert_eq!(sandbox.provider(), "fallback");
    // For a moment there are two.
    assert_eq!(primary.sandboxes.lock().unwrap().len(), 1);
    let started = tokio::time::Instant::now();
    let event = losers.recv().await.unwrap();
    assert_eq!(
        event,
        ("primary".to_owned(), "destroyed primary-1".to_owned())
    );
    assert!(
        started.elapsed() <= Duration::from_secs(60),
        "bounded by the window"
    );
    let total = primary.sandboxes.lock().unwrap().len() + fallback.sandboxes.lock().unwrap().len();
    assert_eq!(total, 1, "exactly one sandbox in total");
    assert_eq!(fallback.ids(), [sandbox.id().to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn a_loser_that_never_appears_is_looked_up_for_the_window_only() {
    // Visible only after a thousand look-ups: never within the window.
    let primary = Cloud::new("primary");
    let fallback = Cloud::new("fallback");
    let (client, mut losers) = fallback_client(
        CloudProvider(primary.clone(), Creates::AmbiguouslyVisibleAfter(1000)),
        CloudProvider::of(&fallback),
    );
    let started = tokio::time::Instant::now();
    client
        .create(&CreateSpec::new().idempotency_key("job-2"))
        .await
        .unwrap();
    let event = losers.recv().await.unwrap();
    assert_eq!(event, ("primary".to_owned(), "none appeared".to_owned()));
    assert_eq!(started.elapsed(), Duration::from_secs(60));
    // 1 look-up at once, then at 1, 3, 7, 15, 23, ..., 55 s and at the window's end.
    assert_eq!(primary.lookups.load(Ordering::SeqCst), 11);
    assert!(primary.destroyed.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_someone_else_made_under_the_key_is_not_destroyed_as_the_loser() {
    // The primary times out (making nothing visible); someone else's sandbox carries the key
    // there, without this create's fingerprint.
    let primary = Cloud::new("primary");
    let fallback = Cloud::new("fallback");
    primary.seed("squatter", SandboxState::Running, 1, &[]);
    primary
        .keys
        .lock()
        .unwrap()
        .insert("squatter".into(), "job-4".into());
    let (client, mut losers) = fallback_client(
        CloudProvider(primary.clone(), Creates::AmbiguouslyVisibleAfter(1000)),
        CloudProvider::of(&fallback),
    );
    let sandbox = client
        .create(&CreateSpec::new().idempotency_key("job-4"))
        .await
        .unwrap();
    assert_eq!(sandbox.provider(), "fallback");
    let event = losers.recv().await.unwrap();
    assert_eq!(event, ("primary".to_owned(), "none appeared".to_owned()));
    assert!(primary.destroyed.lock().unwrap().is_empty());
    assert!(primary.ids().contains(&"squatter".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn the_winner_is_never_taken_for_the_loser() {
    // Primary and fallback are two clients of the same cloud: the key's look-up on the
    // provider fallen back from finds the winner itself, which must be left alone.
    let shared = Cloud::new("shared");
    let (client, mut losers) = fallback_client(
        CloudProvider(shared.clone(), Creates::AmbiguouslyVisibleAfter(1000)),
        CloudProvider::of(&shared),
    );
    let sandbox = client
        .create(&CreateSpec::new().idempotency_key("job-3"))
        .await
        .unwrap();
    let event = losers.recv().await.unwrap();
    assert_eq!(event, ("shared".to_owned(), "none appeared".to_owned()));
    assert!(shared.destroyed.lock().unwrap().is_empty());
    assert!(shared.ids().contains(&sandbox.id().to_owned()));
}

#[tokio::test]
async fn usage_is_estimated_where_the_provider_has_no_meter_and_gated_without_emulation() {
    let cloud = Cloud::new("e2b");
    let mut info = SandboxInfo::new("sb", "e2b", SandboxState::Running);
    info.created_at = Some(SystemTime::now() - HOUR);
    info.resources.cpus = Some(2);
    info.resources.memory_mb = Some(4096);
    let client = Client::new(Arc::new(CloudProvider::of(&cloud)));
    assert_eq!(client.capabilities().usage, Level::Emulated);
    let usage = client.usage(&info, SystemTime::now()).await.unwrap();
    assert!(usage.estimated);
    assert!(usage.running >= HOUR, "{usage:?}");
    // Priced from the shipped table under the provider's name: 2 vCPU, 4 GiB on E2B.
    let cost = usage.cost_usd.unwrap();
    assert!((0.1656..0.17).contains(&cost), "{cost}");
    let bare = Client::builder(Arc::new(CloudProvider::of(&cloud)))
        .emulate(false)
        .build();
    assert_eq!(bare.capabilities().usage, Level::Unsupported);
    let e = bare.usage(&info, SystemTime::now()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSupported);
    assert_eq!(e.sandbox_id(), Some("sb"));
}
