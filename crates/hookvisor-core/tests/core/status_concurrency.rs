//! status.json under real concurrency: many writer processes at once, a reader that never takes
//! the lock, and a writer killed with SIGKILL in the middle of a write.
//!
//! The writers are this test binary run again with `HOOKVISOR_TEST_WORKER` set, which makes
//! `worker_entry` act as a worker; without the variable `worker_entry` passes at once.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use hookvisor_core::hook::RunAs;
use hookvisor_core::{Context, Hook, HookKind, RunOutcome, Status, StatusStore};
use serde_json::Value;

const WORKER_VAR: &str = "HOOKVISOR_TEST_WORKER";
const STATUS_VAR: &str = "HOOKVISOR_TEST_STATUS";
const INDEX_VAR: &str = "HOOKVISOR_TEST_INDEX";
const ROUNDS_VAR: &str = "HOOKVISOR_TEST_ROUNDS";
const BARRIER_VAR: &str = "HOOKVISOR_TEST_BARRIER";

/// Size of the status the `big` worker writes: large enough that a write takes a while.
const PADDING: usize = 256 << 10;

/// A worker never outlives this, even if the test that spawned it died without killing it.
const WORKER_LIFETIME: Duration = Duration::from_secs(120);

fn hook(id: &str) -> Hook {
    Hook {
        id: id.to_owned(),
        name: id.to_owned(),
        kind: HookKind::File,
        path: PathBuf::from(format!("/ws/.discobot/hooks/{id}.sh")),
        description: None,
        run_as: RunAs::User,
        blocking: false,
        pattern: None,
        notify_llm: true,
        timeout: Duration::from_secs(1),
        spec: hookvisor_core::event::EventSpec::for_kind(HookKind::File),
        origin: hookvisor_core::hook::Origin::Workspace,
        phase1: true,
    }
}

/// A run that exited with `exit_code` after `duration`.
fn outcome(exit_code: i32, duration: Duration) -> RunOutcome {
    RunOutcome {
        exit_code,
        duration,
        ..RunOutcome::default()
    }
}

fn context(status: &Path) -> Context {
    Context {
        workspace: PathBuf::from("/ws"),
        session_id: "default".to_owned(),
        state_dir: status.parent().unwrap().to_owned(),
    }
}

/// The worker side. `increment`: record `ROUNDS` runs of hook `w<INDEX>` and bump the shared
/// loop-guard counter each time. `big`: rewrite a status of `PADDING` bytes forever, counting the
/// writes in hook `big`, until killed.
#[test]
fn worker_entry() {
    let Ok(mode) = env::var(WORKER_VAR) else {
        return;
    };
    let status_path = PathBuf::from(env::var(STATUS_VAR).unwrap());
    // Held until the test lets every worker go at once (see `Barrier`).
    let _barrier = env::var_os(BARRIER_VAR).map(|path| {
        let file = fs::File::open(path).unwrap();
        file.lock_shared().unwrap();
        file
    });
    let store = StatusStore::new(&status_path);
    let ctx = context(&status_path);
    match mode.as_str() {
        "increment" => {
            let index: usize = env::var(INDEX_VAR).unwrap().parse().unwrap();
            let rounds: u64 = env::var(ROUNDS_VAR).unwrap().parse().unwrap();
            let own = hook(&format!("w{index}"));
            for round in 0..rounds {
                store
                    .update(|s| {
                        let entry = s.entry(&own, &ctx);
                        entry.begin(SystemTime::now());
                        let success = round % 3 != 0;
                        entry.record(
                            &outcome(i32::from(!success), Duration::from_millis(1)),
                            SystemTime::now(),
                        );
                        s.consecutive_hook_turns += 1;
                        s.set_pending(&own.id, !success);
                    })
                    .unwrap();
            }
        }
        "big" => {
            let big = hook("big");
            let started = Instant::now();
            let mut n: u64 = 0;
            while started.elapsed() < WORKER_LIFETIME {
                n += 1;
                let fill = char::from(b'a' + (n % 26) as u8);
                store
                    .update(|s| {
                        s.entry(&big, &ctx)
                            .record(&outcome(0, Duration::ZERO), SystemTime::now());
                        s.extra.insert(
                            "padding".to_owned(),
                            Value::String(fill.to_string().repeat(PADDING)),
                        );
                    })
                    .unwrap();
            }
        }
        other => panic!("unknown {WORKER_VAR}={other}"),
    }
}

/// Kills the worker if the test fails before it does.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_worker(mode: &str, status: &Path, vars: &[(&str, String)]) -> Worker {
    spawn_worker_with(
        Command::new(env::current_exe().unwrap()),
        mode,
        status,
        vars,
    )
}

fn spawn_worker_with(
    mut cmd: Command,
    mode: &str,
    status: &Path,
    vars: &[(&str, String)],
) -> Worker {
    // The test's name in this binary: its module path without the crate's name.
    let entry = format!(
        "{}::worker_entry",
        module_path!().split_once("::").unwrap().1
    );
    cmd.args(["--exact", &entry, "--nocapture", "--test-threads=1"])
        .env(WORKER_VAR, mode)
        .env(STATUS_VAR, status)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    Worker(cmd.spawn().expect("re-run the test binary as a worker"))
}

/// Reads status.json without a lock, as a dashboard does, until stopped; every read that finds
/// the file must parse. Returns how many reads parsed.
fn spawn_reader(path: PathBuf, stop: Arc<AtomicBool>) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut parsed = 0;
        while !stop.load(Ordering::Relaxed) {
            match fs::read(&path) {
                Ok(bytes) => {
                    if let Err(e) = serde_json::from_slice::<Value>(&bytes) {
                        let head = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
                        panic!("torn read of {} bytes: {e}: {head}", bytes.len());
                    }
                    parsed += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("reading {}: {e}", path.display()),
            }
        }
        parsed
    })
}

fn temp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".status.json.") && n.ends_with(".tmp"))
        .collect()
}

#[test]
fn concurrent_writer_processes_lose_no_update_and_readers_never_see_a_torn_file() {
    const WRITERS: usize = 16;
    const ROUNDS: u64 = 50;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/status.json");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(path.clone(), stop.clone());

    let mut workers: Vec<Worker> = (0..WRITERS)
        .map(|i| {
            spawn_worker(
                "increment",
                &path,
                &[(INDEX_VAR, i.to_string()), (ROUNDS_VAR, ROUNDS.to_string())],
            )
        })
        .collect();
    for (i, worker) in workers.iter_mut().enumerate() {
        let exit = worker.0.wait().unwrap();
        assert!(exit.success(), "worker {i} failed: {exit}");
    }
    stop.store(true, Ordering::Relaxed);
    let parsed = reader.join().expect("the reader saw only whole files");
    assert!(parsed > 0, "the reader never saw the file");

    let status = Status::from_json(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        status.consecutive_hook_turns as u64,
        WRITERS as u64 * ROUNDS,
        "an update of the shared counter was lost"
    );
    assert_eq!(status.hooks.len(), WRITERS);
    for i in 0..WRITERS {
        let entry = &status.hooks[&format!("w{i}")];
        assert_eq!(entry.run_count, ROUNDS, "w{i}: {entry:?}");
        assert_eq!(entry.fail_count, ROUNDS.div_ceil(3), "w{i}: {entry:?}");
    }
    // The last round of each worker is 49, a success: nobody is left pending.
    assert_eq!(status.pending_hooks, Vec::<String>::new());
    assert_eq!(temp_files(path.parent().unwrap()), Vec::<String>::new());
}

/// Lets workers start at the same moment: each takes a shared lock of a file the test holds
/// exclusively, and the test lets go once all of them are waiting.
struct Barrier {
    path: PathBuf,
    held: fs::File,
}

impl Barrier {
    fn new(dir: &Path) -> Barrier {
        let path = dir.join("barrier");
        let held = fs::File::create(&path).unwrap();
        held.lock().unwrap();
        Barrier { path, held }
    }

    fn var(&self) -> (&'static str, String) {
        (BARRIER_VAR, self.path.display().to_string())
    }

    /// Waits until `n` processes wait for the barrier (their blocked locks show in
    /// /proc/locks), then lets them all go.
    fn release_when_waited_by(self, n: usize) {
        use std::os::unix::fs::MetadataExt;
        let ino = format!(":{} ", fs::metadata(&self.path).unwrap().ino());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let locks = fs::read_to_string("/proc/locks").unwrap();
            let waiting = locks
                .lines()
                .filter(|l| l.contains(" -> ") && l.contains(&ino))
                .count();
            if waiting >= n {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{waiting} of {n} workers at the barrier"
            );
            thread::sleep(Duration::from_millis(5));
        }
        drop(self.held);
    }
}

/// Waits for every worker to exit, failing the test if they have not after `limit`.
fn wait_all(workers: &mut [Worker], limit: Duration) {
    let deadline = Instant::now() + limit;
    for (i, worker) in workers.iter_mut().enumerate() {
        let exit = loop {
            if let Some(exit) = worker.0.try_wait().unwrap() {
                break exit;
            }
            assert!(
                Instant::now() < deadline,
                "worker {i} still running after {limit:?}"
            );
            thread::sleep(Duration::from_millis(10));
        };
        assert!(exit.success(), "worker {i} failed: {exit}");
    }
}

/// The agent left a FIFO where the lock file goes, and many writers find it at once: exactly
/// one of them moves it aside and makes the new lock, and all of them then serialise on that
/// one lock (two writers each replacing it would lock different files and lose updates).
#[test]
fn writers_racing_to_replace_a_fifo_lock_lose_no_update() {
    const WRITERS: usize = 16;
    const ROUNDS: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("status.json");
    let lock = StatusStore::new(&path).lock_path();
    nix::unistd::mkfifo(&lock, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();

    let barrier = Barrier::new(dir.path());
    let mut workers: Vec<Worker> = (0..WRITERS)
        .map(|i| {
            spawn_worker(
                "increment",
                &path,
                &[
                    (INDEX_VAR, i.to_string()),
                    (ROUNDS_VAR, ROUNDS.to_string()),
                    barrier.var(),
                ],
            )
        })
        .collect();
    barrier.release_when_waited_by(WRITERS);
    wait_all(&mut workers, Duration::from_secs(60));

    let status = Status::from_json(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        status.consecutive_hook_turns as u64,
        WRITERS as u64 * ROUNDS,
        "an update of the shared counter was lost"
    );
    assert!(fs::symlink_metadata(&lock).unwrap().is_file());
    let aside: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("status.json.lock.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "replaced more than once: {aside:?}");
}

#[test]
fn a_writer_killed_mid_write_leaves_a_whole_file_and_no_stale_lock() {
    const MAX_ROUNDS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("status.json");
    let store = StatusStore::new(&path);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(path.clone(), stop.clone());
    let runs = |store: &StatusStore| {
        store
            .load()
            .unwrap()
            .hooks
            .get("big")
            .map_or(0, |h| h.run_count)
    };

    let mut killed_mid_write = 0;
    let mut rounds = 0;
    for round in 0..MAX_ROUNDS {
        rounds += 1;
        let before = runs(&store);
        let mut worker = spawn_worker("big", &path, &[]);
        // Wait for a few complete writes, then for a write in progress (its temp file exists),
        // and kill the writer there.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                Instant::now() < deadline,
                "round {round}: the writer made no progress"
            );
            if runs(&store) >= before + 3 && !temp_files(dir.path()).is_empty() {
                break;
            }
            thread::yield_now();
        }
        worker.0.kill().unwrap();
        worker.0.wait().unwrap();
        if !temp_files(dir.path()).is_empty() {
            killed_mid_write += 1;
        }

        let bytes = fs::read(&path).unwrap();
        let status = Status::from_json(&bytes).unwrap_or_else(|e| {
            panic!("round {round}: status.json is not whole after the kill: {e}")
        });
        let padding = status.extra["padding"].as_str().unwrap();
        assert_eq!(padding.len(), PADDING, "round {round}");

        // The lock died with its holder: the next writer gets it at once.
        let (done, finished) = mpsc::channel();
        let next = store.clone();
        thread::spawn(move || {
            done.send(next.update(|s| s.consecutive_hook_turns += 1))
                .unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("round {round}: a stale lock blocks the next writer"))
            .unwrap();
        assert_eq!(
            temp_files(dir.path()),
            Vec::<String>::new(),
            "round {round}: the next writer removes the dead writer's temp file"
        );
        if killed_mid_write >= 3 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let parsed = reader.join().expect("the reader saw only whole files");
    eprintln!("killed {killed_mid_write} of {rounds} writers mid-write; {parsed} unlocked reads");
    assert!(
        killed_mid_write > 0,
        "no kill in {MAX_ROUNDS} rounds landed during a write; the test proved nothing"
    );
    let status = store.load().unwrap();
    assert_eq!(
        status.consecutive_hook_turns, rounds,
        "one update after each kill"
    );
    assert!(status.hooks["big"].run_count >= 3);
}

/// The init writes status.json as root before handing the state dir to the run user: the
/// user's server must still be able to lock and update it (root's lock file is not writable
/// by the user, root's status.json is replaced, not written in place).
#[test]
fn the_run_user_updates_a_status_root_wrote() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    if hookvisor_testkit::ensure_test_user().is_none() {
        return;
    }
    let user = nix::unistd::User::from_name("hv-test").unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.path().join("state");
    let path = state.join("status.json");
    let store = StatusStore::new(&path);
    store.update(|s| s.set_pending("from-root", true)).unwrap();
    // What the init does: hand the state dir (not its files) to the run user.
    nix::unistd::chown(&state, Some(user.uid), Some(user.gid)).unwrap();

    let mut cmd = Command::new(env::current_exe().unwrap());
    cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    let mut worker = spawn_worker_with(
        cmd,
        "increment",
        &path,
        &[(INDEX_VAR, "0".to_owned()), (ROUNDS_VAR, "3".to_owned())],
    );
    let exit = worker.0.wait().unwrap();
    assert!(exit.success(), "the run user could not update: {exit}");

    let status = store.load().unwrap();
    assert_eq!(status.hooks["w0"].run_count, 3);
    assert!(
        status.is_pending("from-root"),
        "root's data survived the user's writes"
    );
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        user.uid.as_raw()
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
}
