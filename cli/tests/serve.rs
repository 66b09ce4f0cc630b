//! `mistri-locks serve` over real TCP on 127.0.0.1: the Host check, the
//! whole-request deadline and the connection caps against trickling
//! clients, the token file's checks, and the transport's 400s. Each test
//! starts its own `serve` process (`memory://`, a Local file, or a
//! throwaway MariaDB) on a free port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mistri-locks");
/// cli/src/serve.rs: the whole request must arrive within 10 s.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// A process starting on a busy machine.
const START: Duration = Duration::from_secs(30);

struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(url: &str, args: &[&str]) -> Serve {
    let mut child = Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .args(["--url", url, "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("serving http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("serve printed {line:?}"))
        .parse()
        .unwrap();
    Serve { child, addr }
}

/// A TCP connection to `to` from the loopback address `from` (127.0.0.x:
/// a distinct peer for the server's per-address cap).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let SocketAddr::V4(to) = to else {
        panic!("IPv4 only")
    };
    let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // address structs live across the calls and `len` is their size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let local = sin(from, 0);
        let rc = libc::bind(fd, std::ptr::addr_of!(local).cast(), len);
        assert_eq!(rc, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let remote = sin(*to.ip(), to.port());
        let rc = libc::connect(fd, std::ptr::addr_of!(remote).cast(), len);
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

/// Sends `request` whole and reads the answer to its end: (status, head,
/// body).
fn exchange(mut s: TcpStream, request: &[u8]) -> (u16, String, String) {
    s.set_read_timeout(Some(START)).unwrap();
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    (status, head.to_owned(), body.to_owned())
}

fn get(addr: SocketAddr, path: &str, host: &str, extra: &str) -> (u16, String, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n");
    exchange(TcpStream::connect(addr).unwrap(), req.as_bytes())
}

#[test]
fn serve_answers_only_to_its_hosts() {
    let s = serve("memory://", &["--allow-host", "locks.example.com"]);
    let me = s.addr.to_string();
    let port = s.addr.port();
    for host in [
        me.as_str(),
        &format!("localhost:{port}"),
        "127.0.0.1",
        "locks.example.com",
        "LOCKS.example.com:8080",
    ] {
        let (status, _, body) = get(s.addr, "/api/state", host, "");
        assert_eq!(status, 200, "{host}: {body}");
    }
    for path in ["/api/state", "/metrics", "/"] {
        let (status, head, body) = get(s.addr, path, "evil.example", "");
        assert_eq!(status, 421, "{path}: {head}\n{body}");
        assert!(
            head.starts_with("HTTP/1.1 421 Misdirected Request"),
            "{head}"
        );
        assert!(body.contains("--allow-host evil.example"), "{body}");
    }
    let (status, _, _) = get(s.addr, "/api/state", "sub.locks.example.com", "");
    assert_eq!(status, 421, "a subdomain needs .locks.example.com");
    // No Host at all.
    let (status, _, _) = exchange(
        TcpStream::connect(s.addr).unwrap(),
        b"GET /api/state HTTP/1.1\r\n\r\n",
    );
    assert_eq!(status, 400);
    // Not trusted: X-Forwarded-Host is not read.
    let (status, _, _) = get(
        s.addr,
        "/api/state",
        &me,
        "X-Forwarded-Host: evil.example\r\n",
    );
    assert_eq!(status, 200);
    drop(s);
    let s = serve("memory://", &["--trust-forwarded"]);
    let me = s.addr.to_string();
    let (status, _, _) = get(
        s.addr,
        "/api/state",
        &me,
        "X-Forwarded-Host: evil.example\r\n",
    );
    assert_eq!(
        status, 421,
        "trusted: the forwarded host is the one checked"
    );
}

#[test]
fn two_content_lengths_and_two_hosts_are_refused() {
    let s = serve("memory://", &[]);
    let me = s.addr.to_string();
    for (what, extra) in [
        (
            "two equal lengths",
            "Content-Length: 2\r\nContent-Length: 2\r\n",
        ),
        ("two lengths", "Content-Length: 2\r\nContent-Length: 20\r\n"),
        ("a signed length", "Content-Length: +2\r\n"),
        ("two hosts", "Host: evil.example\r\n"),
    ] {
        let req = format!("POST /api/clear HTTP/1.1\r\nHost: {me}\r\n{extra}\r\n{{}}");
        let (status, _, body) = exchange(TcpStream::connect(s.addr).unwrap(), req.as_bytes());
        assert_eq!(status, 400, "{what}: {body}");
    }
}

/// 64 clients from one address trickle a request head a byte a second
/// (the issue's slowloris): 8 of them (the per-address cap) are served
/// threads, the other 56 are answered 503 with Retry-After at once; a
/// normal `GET /api/state` from another address is answered 200 while
/// the 8 are still open; and the 8 are answered 408 and closed at the
/// request deadline (10 s after their accept), long before their heads
/// could end.
#[test]
fn trickling_clients_hold_no_operator_out() {
    let s = serve("memory://", &[]);
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let opened = Instant::now();
    let mut socks: Vec<TcpStream> = (0..64)
        .map(|_| {
            let c = connect_from(attacker, s.addr);
            c.set_nonblocking(true).unwrap();
            c
        })
        .collect();
    let head = b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ";
    let mut answers: Vec<Option<(Instant, Vec<u8>)>> = vec![None; 64];
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); 64];
    let mut normal: Option<(u16, Duration, usize)> = None;
    // One byte a second to every socket still open; read what comes back.
    // Bounded: 40 rounds (far past the 10 s deadline).
    for round in 0..40usize {
        for (i, c) in socks.iter_mut().enumerate() {
            if answers[i].is_some() {
                continue;
            }
            let byte = head.get(round).copied().unwrap_or(b'a');
            let _ = c.write(&[byte]);
            let mut buf = [0u8; 1024];
            loop {
                match c.read(&mut buf) {
                    Ok(0) => {
                        answers[i] = Some((Instant::now(), std::mem::take(&mut got[i])));
                        break;
                    }
                    Ok(n) => got[i].extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        answers[i] = Some((Instant::now(), std::mem::take(&mut got[i])));
                        break;
                    }
                }
            }
        }
        let rejected = answers.iter().flatten().count();
        if normal.is_none() && rejected >= 56 {
            // The 56 past the cap were answered; the 8 within it are still
            // being read (the deadline is 10 s after their accept).
            assert_eq!(rejected, 56, "more than the cap was answered");
            assert!(opened.elapsed() < REQUEST_DEADLINE, "the machine stalled");
            let asked = Instant::now();
            let (status, _, body) = get(s.addr, "/api/state", "127.0.0.1", "");
            let took = asked.elapsed();
            let still_open = answers.iter().filter(|a| a.is_none()).count();
            normal = Some((status, took, still_open));
            assert_eq!(status, 200, "{body}");
            assert!(body.starts_with("{\"now_ms\":"), "{body}");
        }
        if answers.iter().all(Option::is_some) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let (status, took, still_open) = normal.expect("the 56 past the cap were never answered");
    assert_eq!((status, still_open), (200, 8));
    eprintln!(
        "a normal GET /api/state took {:.1} ms while 8 trickling connections were held and 56 refused",
        took.as_secs_f64() * 1000.0
    );
    let mut refused = 0;
    let mut timed_out = 0;
    for a in &answers {
        let (at, bytes) = a.as_ref().expect("a trickling connection outlived 40 s");
        let text = String::from_utf8_lossy(bytes);
        if text.starts_with("HTTP/1.1 503 ") {
            assert!(text.contains("\r\nRetry-After: 1\r\n"), "{text}");
            refused += 1;
        } else {
            assert!(text.starts_with("HTTP/1.1 408 "), "{text:?}");
            let after = at.duration_since(opened);
            // Answered at the deadline: not before it (from the accept,
            // which follows the connect), and long before the 40 rounds.
            assert!(
                after + Duration::from_millis(50) >= REQUEST_DEADLINE,
                "{after:?}"
            );
            timed_out += 1;
        }
    }
    assert_eq!((refused, timed_out), (56, 8));
}

fn token_file(dir: &std::path::Path, name: &str, text: &str, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.display().to_string()
}

/// Runs `serve` with `args`, which must refuse to start: exit 2 with a
/// message, within the time a process takes to start (a serve that starts
/// instead is killed and the test fails).
fn serve_fails(args: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .args(["--url", "memory://", "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + START;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "it served anyway: {args:?}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "it served anyway: {args:?}");
    err
}

#[test]
fn the_token_file_is_checked_like_the_local_folder() {
    let dir = std::env::temp_dir().join(format!("mistri-serve-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = token_file(&dir, "good", "0123456789abcdef-token\n", 0o600);
    for mode in [0o644, 0o666, 0o640] {
        let f = token_file(
            &dir,
            &format!("m{mode:o}"),
            "0123456789abcdef-token\n",
            mode,
        );
        let err = serve_fails(&["--allow-actions", "--token-file", &f]);
        assert!(
            err.contains(&format!("mode {mode:04o}")) && err.contains("chmod 600"),
            "{err}"
        );
    }
    let two = token_file(
        &dir,
        "two",
        "0123456789abcdef-token\nsecond-line-here\n",
        0o600,
    );
    let err = serve_fails(&["--allow-actions", "--token-file", &two]);
    assert!(err.contains("whitespace inside"), "{err}");
    // Another user's file: as root, a file given to nobody; otherwise a
    // file of root's.
    // SAFETY: getuid has no preconditions.
    let theirs = if unsafe { libc::getuid() } == 0 {
        let f = token_file(&dir, "theirs", "0123456789abcdef-token\n", 0o600);
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
        f
    } else {
        "/etc/passwd".to_owned()
    };
    let err = serve_fails(&["--allow-actions", "--token-file", &theirs]);
    assert!(err.contains("belongs to uid"), "{err}");
    // The core's rule: a token under 16 characters is refused before
    // listening (`--allow-actions` without `--token-file` is clap's refusal).
    let short = token_file(&dir, "short", "0123456789abcde\n", 0o600);
    let err = serve_fails(&["--allow-actions", "--token-file", &short]);
    assert!(err.contains("at least 16 characters"), "{err}");
    // --token-file alone (it would be ignored) is an error.
    let err = serve_fails(&["--token-file", &good]);
    assert!(err.contains("--allow-actions"), "{err}");
    // The good one serves; `bearer` in lower case is the same scheme.
    let s = serve("memory://", &["--allow-actions", "--token-file", &good]);
    let body = r#"{"key": "stop:x"}"#;
    for auth in ["Bearer", "bearer", "BEARER"] {
        let req = format!(
            "POST /api/clear HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth} 0123456789abcdef-token\r\nContent-Length: {}\r\n\r\n{body}",
            s.addr,
            body.len()
        );
        let (status, _, text) = exchange(TcpStream::connect(s.addr).unwrap(), req.as_bytes());
        assert_eq!(status, 200, "{auth}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve` on `--url mysql://…` (a throwaway MariaDB 10.11): the state
/// document lists a lease another process holds, with its holder
/// description and fence, and a raised flag; `/metrics` counts both.
#[test]
fn serve_on_mysql_shows_the_state_and_metrics() {
    use mistri_locks::{Locks, OpenOptions};
    let server = mistri_locks_testkit::MariaDbServer::start();
    let ns = mistri_locks_testkit::unique("mistri:serve");
    let mut options = OpenOptions::new().namespace(&ns);
    options.label = Some("mysql-holder".into());
    let locks = Locks::open_with(&server.url(), &options).unwrap();
    assert!(locks.acquire("job:1", Duration::from_secs(60)).unwrap());
    let fence = locks.fence("job:1").expect("a fence for the lease");
    locks
        .set_flag("stop:job:1", Duration::from_secs(60))
        .unwrap();

    let s = serve(&server.url(), &["--namespace", &ns]);
    let me = s.addr.to_string();
    let (status, _, body) = get(s.addr, "/api/state", &me, "");
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let leases = doc["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{doc}");
    assert_eq!(leases[0]["key"], "job:1");
    assert_eq!(leases[0]["holder"], "mysql-holder");
    assert_eq!(leases[0]["fence"], fence);
    assert_eq!(doc["flags"][0]["key"], "stop:job:1", "{doc}");

    let (status, _, text) = get(s.addr, "/metrics", &me, "");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("mistri_locks_fleet_leases_held 1\n"),
        "{text}"
    );
    assert!(
        text.contains("mistri_locks_fleet_flags_raised 1\n"),
        "{text}"
    );
    assert!(locks.release("job:1").unwrap());
}
