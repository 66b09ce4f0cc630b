//! What `mistri-locks serve` costs while pages are open: 10,000 leases on a
//! throwaway redis-server, open tabs that each `GET /api/state` on the
//! page's schedule (a tick every second, skipped while the last is in
//! flight), for a fixed period. Printed per binary and per number of
//! tabs: `serve`'s CPU (utime + stime from /proc), the Redis CPU and
//! commands per refresh, and the refreshes answered. Give a second binary
//! (an older build) to print it beside, as the baseline, in the same run.
//!
//! ```sh
//! cargo build --release -p mistri_locks_cli
//! cargo run --release -p mistri_locks_cli --example serve_cpu -- 60 [OLD_BIN]
//! ```
//! (SECONDS, default 60; the binary measured first is the one beside this
//! example, target/release/mistri-locks, or $MISTRI_LOCKS_BIN.)

use mistri_locks::{Locks, OpenOptions};
use mistri_locks_testkit::RedisServer;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LEASES: usize = 10_000;
const NAMESPACE: &str = "mistri:bench";

fn beside() -> PathBuf {
    if let Some(p) = std::env::var_os("MISTRI_LOCKS_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("mistri-locks"))
        .expect("a target folder")
}

/// CPU seconds (user + system) the process has used.
fn cpu_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // After the comm: state is field 3, utime 14, stime 15 (1-based).
    let utime: f64 = fields[11].parse().unwrap();
    let stime: f64 = fields[12].parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (utime + stime) / tick
}

fn redis_info(url: &str) -> (f64, u64) {
    let port: u16 = url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"INFO\r\n").unwrap();
    let mut reader = BufReader::new(s);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let len: usize = first.trim()[1..].parse().unwrap();
    let mut body = vec![0u8; len + 2];
    reader.read_exact(&mut body).unwrap();
    let text = String::from_utf8_lossy(&body);
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (
        field("used_cpu_sys") + field("used_cpu_user"),
        field("total_commands_processed") as u64,
    )
}

/// One `GET /api/state`, read to its end: the bytes of the answer.
fn refresh(addr: SocketAddr) -> usize {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!("GET /api/state HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    assert!(
        raw.starts_with(b"HTTP/1.1 200 "),
        "{:?}",
        String::from_utf8_lossy(&raw[..raw.len().min(200)])
    );
    raw.len()
}

struct Figures {
    serve_cpu: f64,
    redis_cpu: f64,
    commands: u64,
    refreshes: usize,
    bytes: usize,
}

fn measure(bin: &PathBuf, url: &str, tabs: usize, period: Duration) -> Figures {
    let mut child = Command::new(bin)
        .env_remove("MISTRI_LOCKS_URL")
        .args([
            "--url",
            url,
            "--namespace",
            NAMESPACE,
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line
        .strip_prefix("serving http://")
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("serve printed {line:?}"))
        .parse()
        .unwrap();
    let pid = child.id();
    let cpu0 = cpu_of(pid);
    let (rcpu0, cmd0) = redis_info(url);
    let start = Instant::now();
    let (refreshes, bytes) = std::thread::scope(|s| {
        let tabs: Vec<_> = (0..tabs)
            .map(|t| {
                s.spawn(move || {
                    // Tabs opened at different moments of the second.
                    let offset = Duration::from_millis(1000 * t as u64 / tabs as u64);
                    let mut next = start + offset;
                    let (mut n, mut bytes) = (0usize, 0usize);
                    while next < start + period {
                        std::thread::sleep(next.saturating_duration_since(Instant::now()));
                        bytes += refresh(addr);
                        n += 1;
                        // setInterval(refresh, 1000), a tick skipped while in flight.
                        while next <= Instant::now() {
                            next += Duration::from_secs(1);
                        }
                    }
                    (n, bytes)
                })
            })
            .collect();
        tabs.into_iter()
            .map(|t| t.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    let serve_cpu = cpu_of(pid) - cpu0;
    let (rcpu1, cmd1) = redis_info(url);
    let _ = child.kill();
    let _ = child.wait();
    Figures {
        serve_cpu,
        redis_cpu: rcpu1 - rcpu0,
        commands: cmd1 - cmd0,
        refreshes,
        bytes,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = args.get(1).map_or(60, |s| s.parse().expect("SECONDS"));
    let period = Duration::from_secs(seconds);
    let mut bins = vec![("this build", beside())];
    if let Some(old) = args.get(2) {
        bins.push(("baseline", PathBuf::from(old)));
    }
    let server = RedisServer::start();
    let url = server.url();
    let locks = Locks::open_with(&url, &OpenOptions::new().namespace(NAMESPACE)).unwrap();
    for i in 0..LEASES {
        assert!(locks
            .acquire(&format!("report:{i:05}"), Duration::from_secs(3600))
            .unwrap());
    }
    println!(
        "{LEASES} leases on a throwaway redis-server; each tab GETs /api/state every second for {seconds} s"
    );
    println!(
        "| binary | tabs | refreshes | serve CPU | serve CPU per refresh | Redis CPU per refresh | commands per refresh | MB per refresh |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for tabs in [1, 4] {
        for (name, bin) in &bins {
            let f = measure(bin, &url, tabs, period);
            let per = f.refreshes.max(1) as f64;
            println!(
                "| {name} | {tabs} | {} | {:.2} s | {:.1} ms | {:.1} ms | {:.0} | {:.2} |",
                f.refreshes,
                f.serve_cpu,
                f.serve_cpu * 1000.0 / per,
                f.redis_cpu * 1000.0 / per,
                f.commands as f64 / per,
                f.bytes as f64 / per / 1e6
            );
        }
    }
}
