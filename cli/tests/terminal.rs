//! What the CLI writes is safe for a terminal and for a pipe (issue 39,
//! findings 11 and 14), on a real Local database file:
//!
//! - `status`, `list` (text), `stop`, `clear`, `break` and the error
//!   messages that echo a key or label escape C0 control bytes and DEL, so
//!   ESC/CR/OSC bytes never reach the terminal and a label with a line feed
//!   cannot forge a row; `--json` keeps the raw text (JSON escapes it).
//! - every output path that meets a closed pipe (`| head -c 10`) exits 0,
//!   quietly, instead of panicking with 101.

use mistri_locks::Locks;
use mistri_locks_testkit::unique;
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mistri-locks");
const TTL: Duration = Duration::from_secs(300);

/// A Local database file in a folder of its own, removed afterwards.
struct Db(std::path::PathBuf);

impl Db {
    fn new() -> Db {
        Db(std::env::temp_dir().join(unique("mistri-cli-term")))
    }

    fn path(&self) -> String {
        self.0.join("locks.db").display().to_string()
    }

    fn locks(&self) -> Locks {
        Locks::local(Some(std::path::Path::new(&self.path()))).unwrap()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_remove("MISTRI_LOCKS_URL")
            .arg("--url")
            .arg(self.path())
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// ESC ] 0 ; … BEL retitles a window; CR, LF and a forged row; DEL.
const KEY: &str = "job\x1b]0;owned\x07\rX\nFORGED  99  1s\x7f";
const KEY_SHOWN: &str = "job\\x1b]0;owned\\x07\\rX\\nFORGED  99  1s\\x7f";
const LABEL: &str = "web\x1b[2J\r\nFORGED-HOLDER 1 2 3\x7f";
const LABEL_SHOWN: &str = "web\\x1b[2J\\r\\nFORGED-HOLDER 1 2 3\\x7f";
const FLAG: &str = "job-stop\x1b[31m\nFAKE\x7f";
const FLAG_SHOWN: &str = "job-stop\\x1b[31m\\nFAKE\\x7f";

/// `bytes` holds no control byte but the line feeds ending its lines.
fn assert_terminal_safe(what: &str, bytes: &[u8]) {
    let bad: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|b| (*b < 0x20 && *b != b'\n') || *b == 0x7f)
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: control bytes {bad:?} reach the terminal in {:?}",
        String::from_utf8_lossy(bytes)
    );
}

fn text(what: &str, out: &Output) -> String {
    assert_terminal_safe(what, &out.stdout);
    assert_terminal_safe(what, &out.stderr);
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn status_list_and_messages_escape_control_characters() {
    let db = Db::new();
    let locks = db.locks();
    locks.set_label(Some(LABEL)).unwrap();
    assert!(locks.acquire(KEY, TTL).unwrap());
    locks.set_flag(FLAG, TTL).unwrap();
    let fence = locks.info(KEY).unwrap().unwrap().holder.unwrap().fence;

    // The header and one lease row; then a blank line, the flag header and
    // one flag row (`status KEY` shows the flags naming KEY: none here).
    for (args, rows) in [
        (vec!["status"], 5),
        (vec!["list"], 5),
        (vec!["list", "job"], 5),
        (vec!["status", KEY], 3),
    ] {
        let out = db.output(&args);
        let shown = text(&format!("{args:?}"), &out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {shown}");
        assert!(shown.contains(KEY_SHOWN), "{args:?}: {shown}");
        assert!(shown.contains(LABEL_SHOWN), "{args:?}: {shown}");
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), rows, "a forged row? {args:?}: {shown}");
        assert!(lines[1].starts_with(KEY_SHOWN), "{args:?}: {shown}");
        if rows == 5 {
            assert!(lines[4].starts_with(FLAG_SHOWN), "{args:?}: {shown}");
        }
    }

    // JSON is left to JSON's escaping (every C0 byte; DEL is legal JSON
    // text): the raw key comes back whole.
    let out = db.output(&["list", "--json"]);
    assert!(
        !out.stdout.iter().any(|b| *b < 0x20 && *b != b'\n'),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["leases"][0]["key"], KEY);
    assert_eq!(doc["leases"][0]["holder"], LABEL);
    assert_eq!(doc["flags"][0]["key"], FLAG);

    // An error that echoes the key and its holder's label.
    let out = db.output(&["run", KEY, "--", "true"]);
    text("run (held)", &out);
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert_eq!(
        err,
        format!(
            "mistri-locks: the lease on {KEY_SHOWN} is held by {LABEL_SHOWN} (fence {fence})\n"
        )
    );
    // A run stopped by a flag whose name has control bytes.
    let out = db.output(&["run", "other", "--stop-key", FLAG, "--", "true"]);
    text("run (stopped)", &out);
    assert_eq!(out.status.code(), Some(76));

    // break: without --yes the refusal names key and holder; then for real.
    let out = db.output(&["break", KEY]);
    text("break (refused)", &out);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert!(
        err.contains(KEY_SHOWN) && err.contains(LABEL_SHOWN),
        "{err}"
    );
    let out = db.output(&["break", "--yes", KEY]);
    let shown = text("break", &out);
    assert_eq!(
        shown,
        format!("broke the lease on {KEY_SHOWN} (was held by {LABEL_SHOWN} (fence {fence}))\n")
    );
    let out = db.output(&["break", "--yes", KEY]);
    assert_eq!(
        text("break (none)", &out),
        format!("no live lease on {KEY_SHOWN}\n")
    );

    // stop and clear echo the flag.
    let out = db.output(&["clear", FLAG]);
    assert_eq!(text("clear", &out), format!("lowered flag {FLAG_SHOWN}\n"));
    let out = db.output(&["clear", FLAG]);
    assert_eq!(
        text("clear (down)", &out),
        format!("flag {FLAG_SHOWN} was not up\n")
    );
    let out = db.output(&["stop", "--ttl", "5m", FLAG]);
    assert_eq!(
        text("stop", &out),
        format!("raised flag {FLAG_SHOWN} for 5m00s\n")
    );
}

/// Spawns `args` with stdout into a pipe, reads 10 bytes and closes it:
/// the command must end by itself with status 0 and nothing on stderr.
fn into_a_closed_pipe(db: &Db, args: &[&str]) {
    let mut child = db
        .cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    // A failure guard, not a timing claim: the next write after the close
    // fails at once (`--watch`: within one 0.1 s interval).
    let limit = Duration::from_secs(60);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < limit, "{args:?}: still running");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(status.code(), Some(0), "{args:?}: {status:?}: {err}");
    assert_eq!(err, "", "{args:?}");
}

/// Runs `args` with stdout a pipe whose reading end is closed before the
/// command starts, so its first write fails (EPIPE) however short.
fn into_a_pipe_closed_before(db: &Db, args: &[&str]) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints, as pipe(2) needs.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe(2) just opened both descriptors; each is owned once.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    let out = db.cmd(args).stdout(writer).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    assert_eq!(err, "", "{args:?}");
}

#[test]
fn a_closed_pipe_ends_every_output_quietly() {
    let db = Db::new();
    let locks = db.locks();
    // Well past a 64 KiB pipe buffer in every form (over 100 bytes a lease
    // as text, several hundred as JSON), so the writer is still writing
    // when the reader goes.
    for i in 0..1000 {
        assert!(locks.acquire(&format!("lease:{i:04}"), TTL).unwrap());
    }
    let out = db.output(&["list"]);
    assert!(out.stdout.len() > 64 * 1024, "{} bytes", out.stdout.len());
    for args in [
        vec!["list", "--json"],
        vec!["list"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["list", "--json", "--watch", "0.1"],
        vec!["list", "--watch", "0.1"],
    ] {
        into_a_closed_pipe(&db, &args);
    }
    // Every other output path, short as it is.
    for args in [
        vec!["list", "--json"],
        vec!["status", "lease:0001"],
        vec!["status", "--json", "lease:0001"],
        vec!["stop", "--ttl", "5s", "epipe:flag"],
        vec!["clear", "epipe:flag"],
        vec!["break", "--yes", "lease:0002"],
        vec!["break", "--yes", "lease:0002"],
        vec!["completions", "bash"],
        vec!["schema"],
        vec!["--help"],
        vec!["--version"],
    ] {
        into_a_pipe_closed_before(&db, &args);
    }
}
