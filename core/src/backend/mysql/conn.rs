//! One connection to a MySQL or MariaDB server, driven by hand: the client
//! protocol (handshake v10, `mysql_native_password`, `caching_sha2_password`
//! fast path and full authentication over TLS, `COM_QUERY` with text
//! results) over a std socket, plain or TLS by rustls, every read and write
//! bounded by the caller's deadline.
//!
//! No runtime, no thread: a forked child simply drops its inherited copies.
//! Any I/O error or timeout makes the connection unusable
//! ([`Conn::broken`]): its reply may still be in flight, so it is dropped,
//! never pooled.

use super::url::{MyConfig, SslMode};
use crate::error::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest socket timeout set (zero means "block forever" to the OS).
const MIN_IO: Duration = Duration::from_millis(1);

// Capability flags (the MySQL client/server protocol).
const LONG_PASSWORD: u32 = 0x1;
const LONG_FLAG: u32 = 0x4;
const CONNECT_WITH_DB: u32 = 0x8;
const PROTOCOL_41: u32 = 0x200;
const SSL: u32 = 0x800;
const TRANSACTIONS: u32 = 0x2000;
const SECURE_CONNECTION: u32 = 0x8000;
const MULTI_STATEMENTS: u32 = 0x1_0000;
const MULTI_RESULTS: u32 = 0x2_0000;
const PLUGIN_AUTH: u32 = 0x8_0000;
const PLUGIN_AUTH_LENENC: u32 = 0x20_0000;
/// The server status flag "another result follows".
const MORE_RESULTS: u16 = 0x0008;
/// utf8mb4_general_ci: on both MySQL 8 and MariaDB.
const CHARSET: u8 = 45;
const MAX_PACKET: u32 = 1 << 30;

/// An error the server sent (the connection stays usable unless it then
/// closed it).
#[derive(Debug, Clone)]
pub(crate) struct ServerError {
    pub(crate) code: u16,
    pub(crate) state: String,
    pub(crate) message: String,
}

impl ServerError {
    /// A deadlock (1213, also a Galera certification failure) or a lock
    /// wait timeout (1205): the transaction was rolled back; trying again
    /// is safe.
    pub(crate) fn retryable(&self) -> bool {
        matches!(self.code, 1213 | 1205)
    }

    /// As the crate's error, about `peer`.
    pub(crate) fn into_error(self, peer: &str) -> Error {
        let text = format!(
            "MySQL at {peer} answered with an error: {} ({} / SQLSTATE {})",
            self.message, self.code, self.state
        );
        match self.code {
            // access denied, unknown database, no privilege, read-only
            1044 | 1045 | 1049 | 1142 | 1227 | 1290 | 1370 | 1698 => Error::Config(text),
            // the server is going away, too many connections, killed
            1040 | 1053 | 1077 | 1079 | 1080 | 1927 | 4031 => Error::Connection(text),
            _ => Error::Backend(text),
        }
    }
}

/// One row of text columns.
pub(crate) type Row = Vec<Option<String>>;

enum Stream {
    Tcp(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn sock(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(buf),
            Stream::Tls(s) => s.write_all(buf).and_then(|()| s.flush()),
        }
    }
}

/// A connection to one server.
pub(crate) struct Conn {
    stream: Stream,
    rbuf: Vec<u8>,
    /// The next packet's sequence number.
    seq: u8,
    peer: String,
    aimed: Option<Duration>,
    /// An I/O error or a timeout happened: never use again.
    pub(crate) broken: bool,
    /// The last write failed: the server did not get the statement.
    pub(crate) unsent: bool,
    /// The server's version string (`10.11.6-MariaDB-…`, `8.0.36`).
    pub(crate) version: String,
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Time left until `deadline`, or the error that says there is none.
pub(crate) fn left(deadline: Instant, peer: &str) -> Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| *d >= MIN_IO)
        .ok_or_else(|| {
            Error::Connection(format!(
                "MySQL at {peer} did not answer in time (deadline passed)"
            ))
        })
}

/// A length-encoded integer at `*at` of `p`.
fn lenenc(p: &[u8], at: &mut usize) -> Option<u64> {
    let first = *p.get(*at)?;
    *at += 1;
    let width = match first {
        0..=0xfa => return Some(u64::from(first)),
        0xfc => 2,
        0xfd => 3,
        0xfe => 8,
        _ => return None,
    };
    let mut v = 0u64;
    for i in 0..width {
        v |= u64::from(*p.get(*at + i)?) << (8 * i);
    }
    *at += width;
    Some(v)
}

fn server_error(p: &[u8]) -> ServerError {
    let code = u16::from_le_bytes([
        p.get(1).copied().unwrap_or(0),
        p.get(2).copied().unwrap_or(0),
    ]);
    let (state, message) = if p.get(3) == Some(&b'#') {
        (
            String::from_utf8_lossy(p.get(4..9).unwrap_or(&[])).into_owned(),
            String::from_utf8_lossy(p.get(9..).unwrap_or(&[])).into_owned(),
        )
    } else {
        (
            "HY000".to_owned(),
            String::from_utf8_lossy(p.get(3..).unwrap_or(&[])).into_owned(),
        )
    };
    ServerError {
        code,
        state,
        message,
    }
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// `mysql_native_password`: SHA1(pw) XOR SHA1(nonce + SHA1(SHA1(pw))).
fn native_scramble(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = sha1_smol::Sha1::from(password).digest().bytes();
    let h2 = sha1_smol::Sha1::from(h1).digest().bytes();
    let mut m = sha1_smol::Sha1::new();
    m.update(nonce);
    m.update(&h2);
    xor(&h1, &m.digest().bytes())
}

/// `caching_sha2_password`: SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) + nonce).
fn sha2_scramble(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = Sha256::digest(password);
    let h2 = Sha256::digest(h1);
    let mut m = Sha256::new();
    m.update(h2);
    m.update(nonce);
    xor(&h1, &m.finalize())
}

impl Conn {
    fn aim(&mut self, deadline: Instant) -> Result<()> {
        let left = left(deadline, &self.peer)?;
        if self.aimed.is_some_and(|t| t.abs_diff(left) < MIN_IO) {
            return Ok(());
        }
        self.aimed = None;
        let sock = self.stream.sock();
        sock.set_read_timeout(Some(left))
            .and(sock.set_write_timeout(Some(left)))
            .map_err(|e| self.io(&e))?;
        self.aimed = Some(left);
        Ok(())
    }

    fn io(&self, e: &std::io::Error) -> Error {
        if is_timeout(e) {
            Error::Connection(format!("MySQL at {} did not answer in time", self.peer))
        } else {
            Error::Connection(format!(
                "lost the connection to MySQL at {}: {e}",
                self.peer
            ))
        }
    }

    fn protocol(&mut self, what: &str) -> Error {
        self.broken = true;
        Error::Connection(format!(
            "MySQL at {} sent an unexpected packet ({what})",
            self.peer
        ))
    }

    /// Opens, (TLS,) authenticates, all by `deadline`.
    pub(crate) fn connect(cfg: &MyConfig, deadline: Instant) -> Result<Conn> {
        let peer = cfg.describe();
        let deadline = match cfg.connect_timeout {
            Some(t) => deadline.min(Instant::now() + t),
            None => deadline,
        };
        let addrs: Vec<_> = (cfg.host.as_str(), cfg.port)
            .to_socket_addrs()
            .map_err(|e| Error::Connection(format!("cannot resolve MySQL host {}: {e}", cfg.host)))?
            .collect();
        let mut last = None;
        let mut tcp = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, left(deadline, &peer)?) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            let why = match last {
                Some(e) if is_timeout(&e) => "timed out".to_owned(),
                Some(e) => e.to_string(),
                None => "no address".to_owned(),
            };
            Error::Connection(format!("cannot reach MySQL at {peer}: {why}"))
        })?;
        let _ = tcp.set_nodelay(true);
        let mut con = Conn {
            stream: Stream::Tcp(tcp),
            rbuf: Vec::with_capacity(8192),
            seq: 0,
            peer,
            aimed: None,
            broken: false,
            unsent: false,
            version: String::new(),
        };
        con.handshake(cfg, deadline)?;
        Ok(con)
    }

    fn handshake(&mut self, cfg: &MyConfig, deadline: Instant) -> Result<()> {
        let hello = self.read_packet(deadline)?;
        match hello.first() {
            Some(10) => {}
            Some(0xff) => return Err(server_error(&hello).into_error(&self.peer)),
            _ => return Err(self.protocol("not a protocol-10 greeting")),
        }
        let short = |c: &mut Conn| c.protocol("a short greeting");
        let nul = match hello[1..].iter().position(|&b| b == 0) {
            Some(n) => n + 1,
            None => return Err(short(self)),
        };
        self.version = String::from_utf8_lossy(&hello[1..nul]).into_owned();
        let mut at = nul + 1 + 4; // connection id
        let Some(part1) = hello.get(at..at + 8) else {
            return Err(short(self));
        };
        let mut nonce = part1.to_vec();
        at += 8 + 1; // filler
        let Some(caps_lo) = hello.get(at..at + 2) else {
            return Err(short(self));
        };
        let mut server_caps = u32::from(u16::from_le_bytes([caps_lo[0], caps_lo[1]]));
        at += 2 + 1 + 2; // charset, status
        let mut plugin = "mysql_native_password".to_owned();
        if let Some(caps_hi) = hello.get(at..at + 2) {
            server_caps |= u32::from(u16::from_le_bytes([caps_hi[0], caps_hi[1]])) << 16;
            let auth_len = usize::from(hello.get(at + 2).copied().unwrap_or(0));
            at += 2 + 1 + 10; // auth data length, reserved
            if server_caps & SECURE_CONNECTION != 0 {
                let n = auth_len.saturating_sub(8).max(13);
                if let Some(part2) = hello.get(at..at + n) {
                    let part2 = part2.strip_suffix(&[0]).unwrap_or(part2);
                    nonce.extend_from_slice(part2);
                }
                at += n;
            }
            if server_caps & PLUGIN_AUTH != 0 {
                if let Some(rest) = hello.get(at..) {
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    plugin = String::from_utf8_lossy(&rest[..end]).into_owned();
                }
            }
        }
        if server_caps & PROTOCOL_41 == 0 {
            return Err(Error::Config(format!(
                "MySQL at {} is older than 4.1 (no PROTOCOL_41)",
                self.peer
            )));
        }
        let mut caps = LONG_PASSWORD
            | LONG_FLAG
            | CONNECT_WITH_DB
            | PROTOCOL_41
            | TRANSACTIONS
            | SECURE_CONNECTION
            | MULTI_STATEMENTS
            | MULTI_RESULTS
            | PLUGIN_AUTH
            | PLUGIN_AUTH_LENENC;
        caps &= server_caps | SSL;
        let tls = match (cfg.ssl, server_caps & SSL != 0) {
            (SslMode::Disabled, _) | (SslMode::Preferred, false) => false,
            (_, true) => true,
            (_, false) => {
                return Err(Error::Config(format!(
                    "MySQL at {} does not offer TLS (ssl-mode={:?})",
                    self.peer, cfg.ssl
                )))
            }
        };
        if tls {
            caps |= SSL;
            let mut req = Vec::with_capacity(32);
            req.extend_from_slice(&caps.to_le_bytes());
            req.extend_from_slice(&MAX_PACKET.to_le_bytes());
            req.push(CHARSET);
            req.extend_from_slice(&[0; 23]);
            self.write_packet(&req, deadline)?;
            self.start_tls(cfg, deadline)?;
        } else {
            caps &= !SSL;
        }
        let password = cfg.password.as_deref().unwrap_or("").as_bytes();
        let response = self.auth_response(&plugin, password, &nonce)?;
        let mut p = Vec::with_capacity(128);
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&MAX_PACKET.to_le_bytes());
        p.push(CHARSET);
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(cfg.user.as_bytes());
        p.push(0);
        // One length byte: a lenenc integer below 251 with
        // PLUGIN_AUTH_LENENC, the SECURE_CONNECTION length without (a
        // scramble is at most 32 bytes).
        p.push(u8::try_from(response.len()).unwrap_or(0));
        p.extend_from_slice(&response);
        p.extend_from_slice(cfg.database.as_bytes());
        p.push(0);
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        self.write_packet(&p, deadline)?;
        self.auth_loop(&plugin, password, tls, deadline)
    }

    fn auth_response(&self, plugin: &str, password: &[u8], nonce: &[u8]) -> Result<Vec<u8>> {
        match plugin {
            "mysql_native_password" => Ok(native_scramble(password, nonce)),
            "caching_sha2_password" => Ok(sha2_scramble(password, nonce)),
            // The server picks again by the auth-switch request.
            _ => Ok(Vec::new()),
        }
    }

    fn auth_loop(
        &mut self,
        plugin: &str,
        password: &[u8],
        tls: bool,
        deadline: Instant,
    ) -> Result<()> {
        let mut plugin = plugin.to_owned();
        loop {
            let p = self.read_packet(deadline)?;
            match p.first() {
                Some(0x00) => return Ok(()),
                Some(0xff) => {
                    let e = server_error(&p);
                    self.broken = true;
                    return Err(match e.code {
                        1045 | 1044 | 1049 | 1698 => e.into_error(&self.peer),
                        _ => Error::Connection(format!(
                            "MySQL at {} refused the login: {} ({})",
                            self.peer, e.message, e.code
                        )),
                    });
                }
                Some(0xfe) => {
                    // Auth switch: plugin name, then its data.
                    let rest = &p[1..];
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    plugin = String::from_utf8_lossy(&rest[..end]).into_owned();
                    let data = rest.get(end + 1..).unwrap_or(&[]);
                    let nonce = data.strip_suffix(&[0]).unwrap_or(data).to_vec();
                    let answer = match plugin.as_str() {
                        "mysql_native_password" => native_scramble(password, &nonce),
                        "caching_sha2_password" => sha2_scramble(password, &nonce),
                        "mysql_clear_password" if tls => {
                            let mut v = password.to_vec();
                            v.push(0);
                            v
                        }
                        other => {
                            self.broken = true;
                            return Err(Error::Config(format!(
                                "MySQL at {} asks for the authentication plugin {other:?}, which this client does not speak (use mysql_native_password or caching_sha2_password)",
                                self.peer
                            )));
                        }
                    };
                    self.write_packet(&answer, deadline)?;
                }
                Some(0x01) if plugin == "caching_sha2_password" => match p.get(1) {
                    // Fast path: the server had the password cached.
                    Some(3) => {}
                    // Full authentication: the password in clear, over TLS only.
                    Some(4) if tls => {
                        let mut v = password.to_vec();
                        v.push(0);
                        self.write_packet(&v, deadline)?;
                    }
                    Some(4) => {
                        self.broken = true;
                        return Err(Error::Config(format!(
                            "MySQL at {} needs caching_sha2_password's full authentication, which this client does over TLS only: use ssl-mode=REQUIRED (or log in once with another client so the server caches the password, or use mysql_native_password)",
                            self.peer
                        )));
                    }
                    _ => return Err(self.protocol("caching_sha2_password")),
                },
                _ => return Err(self.protocol("during authentication")),
            }
        }
    }

    fn start_tls(&mut self, cfg: &MyConfig, deadline: Instant) -> Result<()> {
        let name = rustls::pki_types::ServerName::try_from(cfg.host.clone()).map_err(|e| {
            Error::Config(format!(
                "TLS with MySQL at {}: bad host name: {e}",
                self.peer
            ))
        })?;
        let config = tls_config(cfg.ssl)?;
        let tls = rustls::ClientConnection::new(config, name)
            .map_err(|e| Error::Config(format!("TLS with MySQL at {} failed: {e}", self.peer)))?;
        let placeholder = self.stream.sock().try_clone().map_err(|e| self.io(&e))?;
        let Stream::Tcp(tcp) = std::mem::replace(&mut self.stream, Stream::Tcp(placeholder)) else {
            return Err(self.protocol("TLS twice"));
        };
        let mut stream = rustls::StreamOwned::new(tls, tcp);
        self.aim(deadline)?;
        while stream.conn.is_handshaking() {
            if let Err(e) = stream.conn.complete_io(&mut stream.sock) {
                self.broken = true;
                return Err(if e.kind() == ErrorKind::InvalidData {
                    Error::Config(format!(
                        "TLS with MySQL at {} failed: {e} (ssl-mode={:?})",
                        self.peer, cfg.ssl
                    ))
                } else {
                    self.io(&e)
                });
            }
        }
        self.stream = Stream::Tls(Box::new(stream));
        self.aimed = None;
        Ok(())
    }

    /// Writes one packet (split at 16 MiB), by `deadline`.
    fn write_packet(&mut self, body: &[u8], deadline: Instant) -> Result<()> {
        let mut out = Vec::with_capacity(body.len() + 8);
        let mut chunks = body.chunks(0xff_ffff).peekable();
        let full_last = body.len().is_multiple_of(0xff_ffff);
        if body.is_empty() {
            out.extend_from_slice(&[0, 0, 0, self.seq]);
            self.seq = self.seq.wrapping_add(1);
        }
        while let Some(chunk) = chunks.next() {
            let n = u32::try_from(chunk.len()).unwrap_or(0).to_le_bytes();
            out.extend_from_slice(&[n[0], n[1], n[2], self.seq]);
            out.extend_from_slice(chunk);
            self.seq = self.seq.wrapping_add(1);
            if chunks.peek().is_none() && full_last && !body.is_empty() {
                out.extend_from_slice(&[0, 0, 0, self.seq]);
                self.seq = self.seq.wrapping_add(1);
            }
        }
        let r = self.aim(deadline).and_then(|()| {
            crate::runtime::eintr::retry(deadline, || self.stream.write_all(&out))
                .map_err(|e| self.io(&e))
        });
        if r.is_err() {
            self.broken = true;
            self.unsent = true;
        }
        r
    }

    /// Fills the read buffer to at least `n` bytes, by `deadline`.
    fn fill(&mut self, n: usize, deadline: Instant) -> Result<()> {
        while self.rbuf.len() < n {
            let mut chunk = [0u8; 16384];
            // A read cut short by a signal is tried again, aimed at what is
            // left: the read system call re-reads the same reply.
            let mut aimed = Ok(());
            let read = crate::runtime::eintr::retry(deadline, || {
                aimed = self.aim(deadline);
                match &aimed {
                    Ok(()) => self.stream.read(&mut chunk),
                    Err(_) => Ok(0),
                }
            });
            if let Err(e) = aimed {
                self.broken = true;
                return Err(e);
            }
            match read {
                Ok(0) => {
                    self.broken = true;
                    return Err(Error::Connection(format!(
                        "MySQL at {} closed the connection",
                        self.peer
                    )));
                }
                Ok(k) => self.rbuf.extend_from_slice(&chunk[..k]),
                Err(e) => {
                    self.broken = true;
                    return Err(self.io(&e));
                }
            }
        }
        Ok(())
    }

    /// The next whole packet (joined when split at 16 MiB).
    fn read_packet(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            self.fill(4, deadline)?;
            let len = usize::from(self.rbuf[0])
                | usize::from(self.rbuf[1]) << 8
                | usize::from(self.rbuf[2]) << 16;
            self.seq = self.rbuf[3].wrapping_add(1);
            self.fill(4 + len, deadline)?;
            body.extend_from_slice(&self.rbuf[4..4 + len]);
            self.rbuf.drain(..4 + len);
            if len < 0xff_ffff {
                return Ok(body);
            }
        }
    }

    /// Is this idle connection still open? (The server ended it: a
    /// restart, `wait_timeout`, a KILL; then its FIN or an error packet is
    /// waiting to be read.) Non-blocking. On TLS, bytes waiting may be
    /// housekeeping (a TLS 1.3 session ticket sent after the handshake):
    /// rustls reads them, and only plaintext or a close means the end.
    pub(crate) fn alive(&mut self) -> bool {
        if !self.rbuf.is_empty() || self.stream.sock().set_nonblocking(true).is_err() {
            return false;
        }
        let alive = loop {
            let mut one = [0u8; 1];
            match self.stream.sock().peek(&mut one) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => break true,
                Ok(n) if n > 0 => {}
                _ => break false,
            }
            let Stream::Tls(tls) = &mut self.stream else {
                break false;
            };
            let tls = &mut **tls;
            match tls.conn.read_tls(&mut tls.sock) {
                Ok(n) if n > 0 => {}
                _ => break false,
            }
            match tls.conn.process_new_packets() {
                Ok(state) if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed() => {}
                _ => break false,
            }
        };
        self.stream.sock().set_nonblocking(false).is_ok() && alive
    }

    /// Runs `sql` (one statement, or several separated by `;`), by
    /// `deadline`: the rows of every result set, or the server's first
    /// error (later statements of the batch did not run; the connection
    /// stays usable).
    pub(crate) fn query(
        &mut self,
        sql: &str,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<Row>, ServerError>> {
        self.unsent = false;
        self.seq = 0;
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(3); // COM_QUERY
        p.extend_from_slice(sql.as_bytes());
        self.write_packet(&p, deadline)?;
        let mut rows = Vec::new();
        loop {
            match self.read_result(&mut rows, deadline)? {
                Ok(status) if status & MORE_RESULTS != 0 => {}
                Ok(_) => return Ok(Ok(rows)),
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    /// Reads one result into `rows`; its status flags, or the server's error.
    fn read_result(
        &mut self,
        rows: &mut Vec<Row>,
        deadline: Instant,
    ) -> Result<std::result::Result<u16, ServerError>> {
        let first = self.read_packet(deadline)?;
        match first.first() {
            Some(0x00) => {
                let mut at = 1;
                lenenc(&first, &mut at);
                lenenc(&first, &mut at);
                return Ok(Ok(status_at(&first, at)));
            }
            Some(0xff) => return Ok(Err(server_error(&first))),
            Some(0xfb) => return Err(self.protocol("LOCAL INFILE request")),
            _ => {}
        }
        let mut at = 0;
        let columns = match lenenc(&first, &mut at) {
            Some(n) => usize::try_from(n).unwrap_or(0),
            None => return Err(self.protocol("column count")),
        };
        for _ in 0..columns {
            self.read_packet(deadline)?;
        }
        let eof = self.read_packet(deadline)?;
        if eof.first() != Some(&0xfe) {
            return Err(self.protocol("no EOF after the columns"));
        }
        loop {
            let p = self.read_packet(deadline)?;
            match p.first() {
                Some(0xfe) if p.len() < 9 => return Ok(Ok(status_at(&p, 3))),
                Some(0xff) => return Ok(Err(server_error(&p))),
                _ => {}
            }
            let mut at = 0;
            let mut row = Vec::with_capacity(columns);
            for _ in 0..columns {
                if p.get(at) == Some(&0xfb) {
                    at += 1;
                    row.push(None);
                    continue;
                }
                let n = lenenc(&p, &mut at).and_then(|n| usize::try_from(n).ok());
                let Some(cell) = n.and_then(|n| p.get(at..at + n)) else {
                    return Err(self.protocol("a short row"));
                };
                row.push(Some(String::from_utf8_lossy(cell).into_owned()));
                at += cell.len();
            }
            rows.push(row);
        }
    }
}

fn status_at(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([
        p.get(at).copied().unwrap_or(0),
        p.get(at + 1).copied().unwrap_or(0),
    ])
}

/// The rustls setup of `mode`: REQUIRED / PREFERRED encrypt without
/// verifying (as the MySQL clients do); VERIFY_CA checks the chain against
/// the system's CA store; VERIFY_IDENTITY also the host name.
fn tls_config(mode: SslMode) -> Result<Arc<rustls::ClientConfig>> {
    use std::sync::OnceLock;
    static LAX: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    static CA: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    static FULL: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let slot = match mode {
        SslMode::VerifyCa => &CA,
        SslMode::VerifyIdentity => &FULL,
        _ => &LAX,
    };
    if let Some(c) = slot.get() {
        return Ok(c.clone());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS setup failed: {e}")))?;
    let config = match mode {
        SslMode::VerifyCa | SslMode::VerifyIdentity => {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(Error::Config(
                    "ssl-mode=VERIFY_CA / VERIFY_IDENTITY: no CA certificate found in the system store".into(),
                ));
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| Error::Config(format!("TLS setup failed: {e}")))?;
            if mode == SslMode::VerifyIdentity {
                builder.with_webpki_verifier(verifier).with_no_client_auth()
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
                    .with_no_client_auth()
            }
        }
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth(),
    };
    Ok(slot.get_or_init(|| Arc::new(config)).clone())
}

type Verified = std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error>;
type SigValid = std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error>;

/// VERIFY_CA: the chain must verify; a name mismatch is accepted.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end: &rustls::pki_types::CertificateDer<'_>,
        inter: &[rustls::pki_types::CertificateDer<'_>],
        name: &rustls::pki_types::ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Verified {
        match self.0.verify_server_cert(end, inter, name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> SigValid {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> SigValid {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// REQUIRED / PREFERRED: any certificate (signatures still checked).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Verified {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> SigValid {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> SigValid {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scrambles, against values computed by the servers' formulas
    /// by hand (python3 hashlib).
    #[test]
    fn scrambles_follow_the_formulas() {
        let nonce = b"abcdefghijklmnopqrst";
        assert!(native_scramble(b"", nonce).is_empty());
        let n = native_scramble(b"pw", nonce);
        assert_eq!(n.len(), 20);
        // XOR-ing back with SHA1(nonce + SHA1(SHA1(pw))) gives SHA1(pw).
        let h1 = sha1_smol::Sha1::from(b"pw").digest().bytes();
        let h2 = sha1_smol::Sha1::from(h1).digest().bytes();
        let mut m = sha1_smol::Sha1::new();
        m.update(nonce);
        m.update(&h2);
        assert_eq!(xor(&n, &m.digest().bytes()), h1.to_vec());
        assert_eq!(sha2_scramble(b"pw", nonce).len(), 32);
        let mut at = 0;
        assert_eq!(lenenc(&[0xfc, 0x10, 0x27], &mut at), Some(10_000));
    }
}
