//! A probe of an `await: false` hook (docs/EVENTS.md §1.3: it never holds the reply, on any path):
//! the hook holds the FIFO `go` open (read-write, so the open does not wait), says it started
//! through another, then waits for a line the test writes to `go` only after the command it
//! was fired from returned. A command that waited for it would have seen it killed at its
//! timeout, and `go` left with no reader.

use std::fs;
use std::io::{BufRead as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

/// The FIFOs of one probed hook, and the line its start said.
pub struct Unawaited {
    started: Receiver<String>,
    started_path: PathBuf,
    go: PathBuf,
    done: PathBuf,
}

impl Unawaited {
    /// Makes the FIFOs in `dir` and starts listening for the hook's start.
    pub fn new(dir: &Path) -> Unawaited {
        let fifo = |name: &str| {
            let path = dir.join(name);
            let made = std::process::Command::new("mkfifo")
                .arg(&path)
                .status()
                .unwrap();
            assert!(made.success());
            path
        };
        let (started_path, go, done) = (fifo("started"), fifo("go"), fifo("done"));
        let (tx, started) = std::sync::mpsc::channel();
        let reader = started_path.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let file = fs::File::open(reader).unwrap();
            std::io::BufReader::new(file).read_line(&mut line).unwrap();
            let _ = tx.send(line);
        });
        Unawaited {
            started,
            started_path,
            go,
            done,
        }
    }

    /// The hook's front matter lines, `await: false` and its `run:`, which writes `${event}`.
    pub fn front(&self) -> String {
        format!(
            "await: false\ntimeout: 5\nrun: \"exec 3<> '{}'; echo started > '{}'; read line <&3; \
             echo ${{event}} > '{}'\"",
            self.go.display(),
            self.started_path.display(),
            self.done.display()
        )
    }

    /// Once the command `what` returned: the hook started and still runs. Lets it finish and
    /// returns what it wrote.
    pub fn still_running(self, what: &str) -> String {
        let said = self
            .started
            .recv_timeout(super::serve::DEADLINE)
            .unwrap_or_else(|_| panic!("{what}: the hook never started"));
        assert_eq!(said, "started\n");
        let mut go = fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&self.go)
            .unwrap_or_else(|e| panic!("{what} waited for the unawaited hook, which is gone: {e}"));
        go.write_all(b"go\n").unwrap();
        fs::read_to_string(&self.done).unwrap()
    }
}
