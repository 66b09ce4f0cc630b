//! `mistri-locks serve`: the operator's page, its JSON, its actions and the
//! metrics over HTTP/1.1, from a small std-thread server.
//!
//! The interface itself (routes, JSON, refusals, the Host check) is the
//! core's [`mistri_locks::operator::handle`], the same one the Rack and WSGI
//! apps call, and the request head is read by the core's
//! [`operator::wire::read_head`]; this file reads requests off sockets and
//! writes responses. One thread accepts; each connection gets a thread, at
//! most [`MAX_CONNECTIONS`] at once and [`MAX_PER_PEER`] from one address;
//! a connection past either cap is answered 503 with `Retry-After` and
//! closed at once, by the accepting thread (the socket is non-blocking
//! then, so this never waits). Each connection answers one request and
//! closes. The whole request, head and body, must arrive within
//! [`REQUEST_DEADLINE`] of the connection's accept (each read waits only
//! for the time left; past it the answer is 408), and the whole response
//! must be taken within [`RESPONSE_DEADLINE`]: a client that trickles
//! bytes holds one thread for at most that long. The request head is at
//! most [`operator::wire::MAX_HEAD`] bytes and the body
//! [`operator::MAX_BODY`]; anything larger is refused before it is read.

use crate::Failure;
use mistri_locks::operator::wire::{self, HeadError};
use mistri_locks::operator::{self, OperatorOptions, OperatorResponse};
use mistri_locks::Locks;
use mistri_locks::OptionValue;
use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections served at once from one peer address.
pub const MAX_PER_PEER: usize = 8;
/// The longest the whole request (head and body) may take to arrive.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// The longest the whole response may take to be taken by the client.
pub const RESPONSE_DEADLINE: Duration = Duration::from_secs(30);

/// `serve`'s options.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:9187", value_name = "ADDR")]
    listen: SocketAddr,
    /// Show and act on keys under this prefix only.
    #[arg(long, default_value = "", value_name = "PREFIX")]
    prefix: String,
    /// Enable Stop, Clear and Break (each needs the bearer token from --token-file).
    #[arg(long, requires = "token_file")]
    allow_actions: bool,
    /// A file (mode 0600, yours) whose content, trimmed, is the bearer token actions need; only with --allow-actions.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Also answer to this Host (repeatable): NAME (any port), NAME:PORT, .DOMAIN (and its subdomains), or * (any).
    /// Without it: the listen address, localhost, 127.0.0.1 and [::1].
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_host: Vec<String>,
    /// Behind a TLS-terminating proxy: take the scheme and host from X-Forwarded-Proto and X-Forwarded-Host.
    #[arg(long)]
    trust_forwarded: bool,
}

pub const AFTER_HELP: &str = "\
Routes: GET / (the page), GET /api/state?prefix=P (JSON), GET /metrics (Prometheus text),
POST /api/stop, /api/clear, /api/break with {\"key\": \"...\"} (only with --allow-actions,
`Authorization: Bearer <token>`, and from this origin). Listens on loopback unless told
otherwise, and answers only to the Host names it is told (--allow-host; 421 otherwise).
Prints the address it serves, then serves until killed. See docs/OPERATING.md.";

pub fn serve(locks: Locks, args: ServeArgs) -> Result<i32, Failure> {
    if args.token_file.is_some() && !args.allow_actions {
        return Err(Failure::usage(
            "--token-file needs --allow-actions (without it there is no action for the token to authorise)",
        ));
    }
    let token = match &args.token_file {
        None => None,
        Some(path) => Some(read_token(path)?),
    };
    // The core's rules (a token of at least 16 characters; actions need
    // one): checked before listening.
    let mut builder = OperatorOptions::builder();
    let rule = |e: mistri_locks::Error| match &args.token_file {
        Some(path) => Failure::usage(format!("--token-file {}: {e}", path.display())),
        None => Failure::usage(format!("--allow-actions: {e} (give --token-file F)")),
    };
    builder
        .set("prefix", OptionValue::Text(args.prefix.clone()))
        .and_then(|b| b.set("allow_actions", OptionValue::Bool(args.allow_actions)))
        .and_then(|b| b.set("token", token.map_or(OptionValue::None, OptionValue::Text)))
        .and_then(|b| b.set("trust_forwarded", OptionValue::Bool(args.trust_forwarded)))
        .map_err(rule)?;
    builder.build().map_err(rule)?;
    let listener = TcpListener::bind(args.listen).map_err(|e| Failure {
        status: crate::EXIT_ERROR,
        message: format!("cannot listen on {}: {e}", args.listen),
    })?;
    let addr = listener.local_addr().map_err(|e| Failure {
        status: crate::EXIT_ERROR,
        message: e.to_string(),
    })?;
    // The listen address and the loopback names, then what was allowed.
    let mut allowed_hosts = vec![addr.to_string()];
    allowed_hosts.extend(operator::LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()));
    allowed_hosts.extend(args.allow_host.iter().cloned());
    for host in allowed_hosts {
        builder
            .set("allowed_hosts", OptionValue::Text(host))
            .map_err(|e| Failure::usage(format!("--allow-host: {e}")))?;
    }
    let opts = Arc::new(builder.build().map_err(|e| Failure::usage(e.to_string()))?);
    if !addr.ip().is_loopback() {
        eprintln!("mistri-locks: serving on {addr}, reachable beyond this host");
        if args.allow_host.is_empty() {
            eprintln!(
                "mistri-locks: it answers only to the Host {addr} and the loopback names; add --allow-host NAME for the name clients use"
            );
        }
    }
    println!(
        "serving http://{addr}/ ({})",
        if opts.allow_actions {
            "actions enabled"
        } else {
            "read-only"
        }
    );
    let _ = std::io::stdout().flush();
    let peers: Arc<Mutex<Peers>> = Arc::default();
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let accepted = Instant::now();
        let Ok(peer) = stream.peer_addr().map(|a| a.ip()) else {
            continue;
        };
        if let Err(why) = peers.lock().unwrap_or_else(|p| p.into_inner()).enter(peer) {
            busy(stream, why);
            continue;
        }
        let (locks, opts, peers2) = (locks.clone(), opts.clone(), peers.clone());
        let spawned = std::thread::Builder::new()
            .name("mistri-serve".into())
            .spawn(move || {
                let _ = connection(&locks, &opts, stream, accepted);
                peers2.lock().unwrap_or_else(|p| p.into_inner()).leave(peer);
            });
        if spawned.is_err() {
            peers.lock().unwrap_or_else(|p| p.into_inner()).leave(peer);
        }
    }
    Ok(0)
}

/// Reads the bearer token from `path`, checked as the Local backend checks
/// its folder: a file of this user that nobody else may read, one line.
fn read_token(path: &Path) -> Result<String, Failure> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let mut file = std::fs::File::open(path)
        .map_err(|e| Failure::usage(format!("cannot read the token file {shown}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| Failure::usage(format!("cannot read the token file {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(Failure::usage(format!(
            "the token file {shown} is not a regular file"
        )));
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Err(Failure::usage(format!(
            "the token file {shown} belongs to uid {}, not to uid {uid} (this process); refusing it: its owner can read or change the token",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Failure::usage(format!(
            "the token file {shown} has mode {mode:04o}: other users can read it; refusing it (chmod 600 {shown})"
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| Failure::usage(format!("cannot read the token file {shown} as text: {e}")))?;
    let token = text.trim().to_owned();
    if token.chars().any(char::is_whitespace) {
        return Err(Failure::usage(format!(
            "the token in {shown} has whitespace inside (more than one line?); a bearer token is one word"
        )));
    }
    Ok(token)
}

/// The connections being served, in all and per peer address.
#[derive(Default)]
struct Peers {
    total: usize,
    by_ip: HashMap<IpAddr, usize>,
}

impl Peers {
    fn enter(&mut self, ip: IpAddr) -> Result<(), &'static str> {
        let mine = self.by_ip.get(&ip).copied().unwrap_or(0);
        if mine >= MAX_PER_PEER {
            return Err("8 connections from your address are open already");
        }
        if self.total >= MAX_CONNECTIONS {
            return Err("64 connections are open already");
        }
        self.total += 1;
        *self.by_ip.entry(ip).or_insert(0) += 1;
        Ok(())
    }

    fn leave(&mut self, ip: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.by_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.by_ip.remove(&ip);
            }
        }
    }
}

/// Answers 503 on a connection past a cap and closes it, without waiting:
/// the socket is non-blocking, the answer fits an empty send buffer, and
/// what the client already sent is drained so the close is a clean FIN
/// after the answer (not a reset that could discard it).
fn busy(mut stream: TcpStream, why: &str) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut r = wire::plain(503, &format!("busy: {why}; retry in a moment"));
    r.headers.push(("Retry-After".into(), "1".into()));
    let mut bytes = wire::response_head(&r).into_bytes();
    bytes.extend_from_slice(&r.body);
    let _ = stream.write_all(&bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
}

/// A socket whose reads and writes each wait only for the time left
/// before a deadline for the whole request (or response).
struct Deadlined {
    stream: TcpStream,
    deadline: Instant,
}

impl Deadlined {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

fn timed_out() -> OperatorResponse {
    wire::plain(
        408,
        "the request did not arrive within 10 s (head and body together)",
    )
}

fn connection(
    locks: &Locks,
    opts: &OperatorOptions,
    stream: TcpStream,
    accepted: Instant,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(Deadlined {
        stream: stream.try_clone()?,
        deadline: accepted + REQUEST_DEADLINE,
    });
    let mut out = Deadlined {
        stream,
        deadline: accepted + REQUEST_DEADLINE + RESPONSE_DEADLINE,
    };
    let head = match wire::read_head(&mut reader) {
        Ok(h) => h,
        Err(HeadError::Io(_)) if reader.get_ref().expired() => {
            return write(&mut out, &timed_out(), true)
        }
        Err(HeadError::Io(_)) => return Ok(()),
        Err(HeadError::Refused(r)) => return write(&mut out, &r, true),
    };
    let length = match head.body_length() {
        Ok(n) => n,
        Err(r) => return write(&mut out, &r, true),
    };
    let mut body = vec![0u8; length];
    if let Err(e) = reader.read_exact(&mut body) {
        if reader.get_ref().expired() {
            return write(&mut out, &timed_out(), true);
        }
        return Err(e);
    }
    let response = operator::handle(locks, opts, &head.request("http", &body));
    write(&mut out, &response, head.method != "HEAD")
}

fn write(out: &mut Deadlined, r: &OperatorResponse, with_body: bool) -> std::io::Result<()> {
    out.write_all(wire::response_head(r).as_bytes())?;
    if with_body {
        out.write_all(&r.body)?;
    }
    out.flush()
}
