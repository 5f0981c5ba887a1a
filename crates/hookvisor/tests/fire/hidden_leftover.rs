//! A leftover that hides from the scan, written as the attack (review of `d9e6cf1`): a process
//! of the hook's run that empties its own command line and environment with
//! `prctl(PR_SET_MM, PR_SET_MM_MAP)`, as any unprivileged process can, reads to `/proc` like
//! one in the middle of an exec. The run looks at it again for a second and then lets it go
//! (a process that hides its environment escapes the marker search); what it must not do is
//! spend that second scanning `/proc` (it did 5,000 scans, 0.24 s of CPU, before `147f6b8`).
//!
//! The CPU time is that of the one `hookvisor run` and the processes it reaped (wait4), so the
//! tests running beside it in this binary do not add to it.
#![allow(unsafe_code)]

use crate::common;

use std::fs;
use std::time::{Duration, Instant};

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

use nix::libc;

use common::{Workspace, check};

/// Names the FIFO the hiding process reports on; set only for that process.
const READY: &str = "HOOKVISOR_TEST_HIDE_READY";

/// The kernel's `struct prctl_mm_map`.
#[repr(C)]
struct PrctlMmMap {
    start_code: u64,
    end_code: u64,
    start_data: u64,
    end_data: u64,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
    auxv: *const u64,
    auxv_size: u32,
    exe_fd: u32,
}

/// Sets this process's memory map to what it is, but with empty argument and environment
/// areas: `/proc/self/cmdline` and `/proc/self/environ` then read empty.
fn hide_command_line_and_environment() -> Result<(), String> {
    let stat = fs::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
    let fields: Vec<u64> = stat[stat.rfind(')').ok_or("no ) in stat")? + 2..]
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // Numbered as in proc(5): the state is field 3.
    let field = |n: usize| fields.get(n - 3).copied().unwrap_or(0);
    let map = PrctlMmMap {
        start_code: field(26),
        end_code: field(27),
        start_data: field(45),
        end_data: field(46),
        start_brk: field(47),
        // SAFETY: sbrk(0) only reads the current break.
        brk: unsafe { libc::sbrk(0) } as u64,
        start_stack: field(28),
        arg_start: field(48),
        arg_end: field(48),
        env_start: field(50),
        env_end: field(50),
        auxv: std::ptr::null(),
        auxv_size: 0,
        // No change of /proc/self/exe.
        exe_fd: u32::MAX,
    };
    // SAFETY: `map` is a valid prctl_mm_map of the size passed, alive for the call.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_MM,
            libc::PR_SET_MM_MAP,
            &map as *const PrctlMmMap as libc::c_ulong,
            std::mem::size_of::<PrctlMmMap>() as libc::c_ulong,
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

/// Not a test of its own: the body of the hiding process, which the hook below starts from this
/// very binary with [`READY`] naming a FIFO. Without it, it returns at once.
#[test]
fn hiding_process() {
    let Some(ready) = std::env::var_os(READY) else {
        return;
    };
    let hidden = hide_command_line_and_environment();
    fs::write(&ready, format!("{} {hidden:?}\n", std::process::id())).unwrap();
    // The test kills it once the run is over; should the test die first, it must not stay
    // hidden for long: every run that scans the whole of /proc would wait a second on it.
    std::thread::sleep(Duration::from_secs(30));
    std::process::exit(0);
}

fn cpu(usage: &libc::rusage) -> Duration {
    let micros = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

/// Runs `command` to its end like `Command::output`, with the CPU time it and the processes it
/// reaped used: wait4's, of this child only.
// wait4 below reaps it, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn output_and_usage(mut command: Command) -> (Output, libc::rusage) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hookvisor");
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stderr.read_to_end(&mut buf).unwrap();
        buf
    });
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    let stderr = err.join().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our unwaited child; both pointers are to locals alive for the call.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(
        pid,
        child.id() as libc::pid_t,
        "wait4: {}",
        std::io::Error::last_os_error()
    );
    let status = std::process::ExitStatus::from_raw(status);
    (
        Output {
            status,
            stdout,
            stderr,
        },
        usage,
    )
}

#[test]
fn a_leftover_that_looks_mid_exec_holds_the_run_a_second_without_burning_it() {
    let ws = Workspace::new();
    let ready = ws.base().join("ready");
    let reported = ws.base().join("hidden");
    let body = format!(
        "mkfifo {ready}\n\
         {READY}={ready} setsid {exe} --exact {entry} --nocapture >/dev/null 2>&1 &\n\
         read line < {ready}\n\
         echo \"$line\" > {reported}",
        ready = ready.display(),
        exe = std::env::current_exe().unwrap().display(),
        // The test's name in this binary: its module path without the crate's name.
        entry = format_args!(
            "{}::hiding_process",
            module_path!().split_once("::").unwrap().1
        ),
        reported = reported.display(),
    );
    ws.hook("hide.sh", "file", "pattern: '*'", &body);

    let mut command = ws.hookvisor_command();
    command.args(["run", "hide"]);
    let started = Instant::now();
    let (out, usage) = output_and_usage(command);
    let took = started.elapsed();

    let line = fs::read_to_string(&reported).unwrap_or_default();
    let (pid, hidden) = line.trim().split_once(' ').unwrap_or(("", ""));
    if let Ok(pid) = pid.parse::<i32>() {
        // It escapes the run by design (it hid its marker); it must not outlive the test.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    check(out, "hookvisor run hide");
    assert_eq!(hidden, "Ok(())", "the process could not hide: {line:?}");
    // The run did meet it mid-exec: it waited its patience of a second before letting it go.
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "the run took {took:?}"
    );
    let used = cpu(&usage);
    assert!(
        used < Duration::from_millis(100),
        "hookvisor and its hook used {used:?} of CPU while waiting on a process that only \
         looks mid-exec"
    );
}
