//! `mistri-locks serve`: the operator's page, its JSON, its actions and the
//! metrics over HTTP/1.1, from a small std-thread server.
//!
//! The interface itself (routes, JSON, refusals) is the core's
//! [`mistri_locks::operator::handle`], the same one the Rack and WSGI apps
//! call; this file only reads requests and writes responses. One thread
//! accepts; each connection gets a thread (at most [`MAX_CONNECTIONS`] at
//! once; more wait in the kernel's backlog), answers one request and
//! closes, so a slow client ties up one thread for at most [`IO_TIMEOUT`]
//! per read. The request head is at most [`MAX_HEAD`] bytes and the body
//! [`operator::MAX_BODY`]; anything larger is refused before it is read.

use crate::Failure;
use mistri_locks::operator::{self, OperatorOptions, OperatorRequest, OperatorResponse};
use mistri_locks::Locks;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// The longest a read or write on a connection may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request line plus headers.
pub const MAX_HEAD: usize = 16 * 1024;

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
    /// A file whose content (trimmed) is the bearer token actions need.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

pub const AFTER_HELP: &str = "\
Routes: GET / (the page), GET /api/state?prefix=P (JSON), GET /metrics (Prometheus text),
POST /api/stop, /api/clear, /api/break with {\"key\": \"...\"} (only with --allow-actions,
`Authorization: Bearer <token>`, and from this origin). Listens on loopback unless told
otherwise. Prints the address it serves, then serves until killed. See docs/OPERATING.md.";

pub fn serve(locks: Locks, args: ServeArgs) -> Result<i32, Failure> {
    let token = match &args.token_file {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ))
            })?;
            let token = text.trim().to_owned();
            if token.len() < 16 {
                return Err(Failure::usage(format!(
                    "the token in {} is shorter than 16 characters",
                    path.display()
                )));
            }
            Some(token)
        }
    };
    let listener = TcpListener::bind(args.listen).map_err(|e| Failure {
        status: crate::EXIT_ERROR,
        message: format!("cannot listen on {}: {e}", args.listen),
    })?;
    let addr = listener.local_addr().map_err(|e| Failure {
        status: crate::EXIT_ERROR,
        message: e.to_string(),
    })?;
    let opts = Arc::new(OperatorOptions {
        prefix: args.prefix,
        allow_actions: args.allow_actions,
        token,
        ..OperatorOptions::default()
    });
    if !addr.ip().is_loopback() {
        eprintln!("mistri-locks: serving on {addr}, reachable beyond this host");
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
    let busy = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        if busy.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            // Shed load rather than grow threads without bound.
            drop(stream);
            continue;
        }
        busy.fetch_add(1, Ordering::AcqRel);
        let (locks, opts, done) = (locks.clone(), opts.clone(), busy.clone());
        let spawned = std::thread::Builder::new()
            .name("mistri-serve".into())
            .spawn(move || {
                let _ = connection(&locks, &opts, stream);
                done.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
    Ok(0)
}

/// A parsed request head.
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

enum Bad {
    Io,
    Status(u16, &'static str),
}

fn read_head(reader: &mut impl BufRead) -> Result<Head, Bad> {
    let mut total = 0usize;
    let mut line = Vec::new();
    let mut next_line = |reader: &mut dyn BufRead| -> Result<String, Bad> {
        line.clear();
        let n = reader
            .take((MAX_HEAD - total + 1) as u64)
            .read_until(b'\n', &mut line)
            .map_err(|_| Bad::Io)?;
        total += n;
        if total > MAX_HEAD {
            return Err(Bad::Status(431, "the request head is larger than 16 KiB"));
        }
        if n == 0 {
            return Err(Bad::Io);
        }
        String::from_utf8(line.clone())
            .map(|s| s.trim_end_matches(['\r', '\n']).to_owned())
            .map_err(|_| Bad::Status(400, "the request head is not UTF-8"))
    };
    let request_line = next_line(reader)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Bad::Status(400, "a bad request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Bad::Status(400, "only HTTP/1.x is served"));
    }
    let mut headers = Vec::new();
    loop {
        let h = next_line(reader)?;
        if h.is_empty() {
            break;
        }
        let Some((k, v)) = h.split_once(':') else {
            return Err(Bad::Status(400, "a bad header line"));
        };
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    Ok(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
    })
}

fn plain(status: u16, message: &str) -> OperatorResponse {
    OperatorResponse {
        status,
        headers: vec![("Content-Type".into(), "text/plain; charset=utf-8".into())],
        body: format!("{message}\n").into_bytes(),
    }
}

fn connection(locks: &Locks, opts: &OperatorOptions, stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    let head = match read_head(&mut reader) {
        Ok(h) => h,
        Err(Bad::Io) => return Ok(()),
        Err(Bad::Status(status, message)) => {
            return write(&mut out, &plain(status, message), false)
        }
    };
    let length = match head.header("Content-Length").map(str::parse::<usize>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return write(&mut out, &plain(400, "a bad Content-Length"), false),
    };
    if head.header("Transfer-Encoding").is_some() {
        return write(
            &mut out,
            &plain(411, "send a Content-Length, not chunks"),
            false,
        );
    }
    if length > operator::MAX_BODY {
        return write(&mut out, &operator::too_large(), false);
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let (path, query) = head.target.split_once('?').unwrap_or((&head.target, ""));
    let req = OperatorRequest {
        method: &head.method,
        path,
        query,
        mount: "",
        scheme: "http",
        host: head.header("Host"),
        forwarded_proto: head.header("X-Forwarded-Proto"),
        forwarded_host: head.header("X-Forwarded-Host"),
        origin: head.header("Origin"),
        authorization: head.header("Authorization"),
        csrf: head.header("X-CSRF-Token"),
        cookie: head.header("Cookie"),
        body: &body,
        host_authorized: None,
    };
    let response = operator::handle(locks, opts, &req);
    write(&mut out, &response, head.method != "HEAD")
}

fn write(out: &mut TcpStream, r: &OperatorResponse, with_body: bool) -> std::io::Result<()> {
    let reason = match r.status {
        411 => "Length Required",
        431 => "Request Header Fields Too Large",
        _ => r.reason(),
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", r.status);
    for (k, v) in &r.headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        r.body.len()
    ));
    out.write_all(head.as_bytes())?;
    if with_body {
        out.write_all(&r.body)?;
    }
    out.flush()
}
