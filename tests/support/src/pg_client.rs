//! [`PgClient`]: a minimal PostgreSQL client for tests and benchmark
//! baselines, std only. One blocking TCP (or unix) socket with a read and
//! write timeout; trust, cleartext or md5 authentication (no SCRAM, no
//! TLS: the SSL request is never sent). Two ways to run SQL:
//!
//! - [`PgClient::query`]: the extended protocol with the unnamed statement
//!   (Parse/Bind/Describe/Execute/Sync, text parameters, text results) in
//!   ONE write, then the replies up to ReadyForQuery: one round trip, the
//!   same I/O style as the core's Postgres adapter (which drives
//!   `postgres-protocol` over a std socket the same way).
//! - [`PgClient::simple`]: the simple query protocol (several statements
//!   in one string; the rows of the last one that returned rows).
//!
//! Every value comes back as `Option<String>` (NULL is `None`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Rows of text values (`None` for NULL).
pub type Rows = Vec<Vec<Option<String>>>;

enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One connection; see the module docs.
pub struct PgClient {
    socket: Socket,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    /// Backend process id (from BackendKeyData).
    pid: i32,
    /// The row count of the last CommandComplete (`INSERT 0 1` -> 1).
    affected: u64,
}

/// An asynchronous notification heard on a connection that ran `LISTEN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The channel.
    pub channel: String,
    /// The payload.
    pub payload: String,
}

fn err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::other(msg.into())
}

impl PgClient {
    /// Connects to `127.0.0.1:port` as `postgres` to database `postgres`
    /// (trust), with a 5 s timeout on every read and write.
    pub fn connect(port: u16) -> std::io::Result<PgClient> {
        Self::connect_tcp("127.0.0.1", port, "postgres", None, "postgres")
    }

    /// Connects over TCP as `user` (with `password` if the server asks for
    /// one, cleartext or md5) to `database`.
    pub fn connect_tcp(
        host: &str,
        port: u16,
        user: &str,
        password: Option<&str>,
        database: &str,
    ) -> std::io::Result<PgClient> {
        let s = TcpStream::connect((host, port))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        Self::start(Socket::Tcp(s), user, password, database)
    }

    /// Connects over the unix socket `dir/.s.PGSQL.port`.
    pub fn connect_unix(
        dir: &Path,
        port: u16,
        user: &str,
        database: &str,
    ) -> std::io::Result<PgClient> {
        let s = UnixStream::connect(dir.join(format!(".s.PGSQL.{port}")))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        Self::start(Socket::Unix(s), user, None, database)
    }

    /// Sets the read and write timeout of the socket.
    pub fn set_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match &self.socket {
            Socket::Tcp(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
            Socket::Unix(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
        }
    }

    /// The server process serving this connection.
    pub fn backend_pid(&self) -> i32 {
        self.pid
    }

    fn start(
        socket: Socket,
        user: &str,
        password: Option<&str>,
        database: &str,
    ) -> std::io::Result<PgClient> {
        let mut c = PgClient {
            socket,
            out: Vec::with_capacity(1024),
            inbuf: Vec::with_capacity(8192),
            pid: 0,
            affected: 0,
        };
        // StartupMessage: length, protocol 3.0, name/value pairs, 0.
        let mut body = Vec::new();
        body.extend_from_slice(&196_608i32.to_be_bytes());
        for (k, v) in [
            ("user", user),
            ("database", database),
            ("client_encoding", "UTF8"),
        ] {
            cstr(&mut body, k);
            cstr(&mut body, v);
        }
        body.push(0);
        c.out
            .extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        c.out.extend_from_slice(&body);
        c.send()?;
        loop {
            let (tag, msg) = c.read_message()?;
            match tag {
                b'R' => {
                    let code = be_i32(&msg[0..4]);
                    match code {
                        0 => {}
                        3 => {
                            let p = password.ok_or_else(|| err("server asks for a password"))?;
                            c.password_message(p);
                            c.send()?;
                        }
                        5 => {
                            let p = password.ok_or_else(|| err("server asks for a password"))?;
                            let salt = &msg[4..8];
                            let inner = md5_hex(format!("{p}{user}").as_bytes());
                            let mut salted = inner.into_bytes();
                            salted.extend_from_slice(salt);
                            let hashed = format!("md5{}", md5_hex(&salted));
                            c.password_message(&hashed);
                            c.send()?;
                        }
                        other => return Err(err(format!("authentication method {other} not supported by PgClient (trust, cleartext, md5 only)"))),
                    }
                }
                b'K' => c.pid = be_i32(&msg[0..4]),
                b'E' => return Err(err(error_text(&msg))),
                b'Z' => return Ok(c),
                _ => {} // ParameterStatus, NoticeResponse
            }
        }
    }

    fn password_message(&mut self, p: &str) {
        let mut body = Vec::new();
        cstr(&mut body, p);
        self.message(b'p', &body);
    }

    fn message(&mut self, tag: u8, body: &[u8]) {
        self.out.push(tag);
        self.out
            .extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        self.out.extend_from_slice(body);
    }

    fn send(&mut self) -> std::io::Result<()> {
        self.socket.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// Reads one backend message: (tag, body).
    fn read_message(&mut self) -> std::io::Result<(u8, Vec<u8>)> {
        loop {
            if self.inbuf.len() >= 5 {
                let len = be_i32(&self.inbuf[1..5]) as usize;
                if self.inbuf.len() > len {
                    let tag = self.inbuf[0];
                    let body = self.inbuf[5..1 + len].to_vec();
                    self.inbuf.drain(..1 + len);
                    return Ok((tag, body));
                }
            }
            let mut chunk = [0u8; 16384];
            let n = self.socket.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.inbuf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads replies up to ReadyForQuery: the rows of the last result
    /// with rows, or the server's error (after ReadyForQuery too, so the
    /// connection stays usable). The outer error is I/O (unusable then).
    fn collect(&mut self) -> std::io::Result<Result<Rows, String>> {
        let mut rows = Vec::new();
        let mut current: Rows = Vec::new();
        let mut failure = None;
        loop {
            let (tag, msg) = self.read_message()?;
            match tag {
                b'T' => current.clear(),
                b'D' => {
                    let n = u16::from_be_bytes([msg[0], msg[1]]) as usize;
                    let mut at = 2;
                    let mut row = Vec::with_capacity(n);
                    for _ in 0..n {
                        let len = be_i32(&msg[at..at + 4]);
                        at += 4;
                        if len < 0 {
                            row.push(None);
                        } else {
                            let len = len as usize;
                            row.push(Some(
                                String::from_utf8_lossy(&msg[at..at + len]).into_owned(),
                            ));
                            at += len;
                        }
                    }
                    current.push(row);
                }
                b'C' => {
                    let tag = String::from_utf8_lossy(msg.strip_suffix(b"\0").unwrap_or(&msg));
                    self.affected = tag
                        .rsplit(' ')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    if !current.is_empty() {
                        rows = std::mem::take(&mut current);
                    }
                }
                b'E' => failure = Some(error_text(&msg)),
                b'Z' => {
                    return Ok(match failure {
                        Some(e) => Err(e),
                        None => Ok(rows),
                    })
                }
                _ => {} // ParseComplete, BindComplete, NoData, RowDescription, notices, notifications
            }
        }
    }

    /// One statement with text parameters, in one write and one round
    /// trip (extended protocol, the unnamed statement). `Err` holds the
    /// server's error (`SQLSTATE: message`) or the I/O error's text.
    pub fn query(&mut self, sql: &str, params: &[&str]) -> Result<Rows, String> {
        self.query_opt(sql, &params.iter().map(|p| Some(*p)).collect::<Vec<_>>())
    }

    /// [`PgClient::query`] with NULL-able parameters.
    pub fn query_opt(&mut self, sql: &str, params: &[Option<&str>]) -> Result<Rows, String> {
        let mut body = Vec::with_capacity(sql.len() + 16);
        // Parse: unnamed statement, the SQL, no parameter types.
        body.push(0);
        cstr(&mut body, sql);
        body.extend_from_slice(&0i16.to_be_bytes());
        self.message(b'P', &body);
        // Bind: unnamed portal and statement, all text.
        body.clear();
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&0i16.to_be_bytes());
        body.extend_from_slice(&(params.len() as i16).to_be_bytes());
        for p in params {
            match p {
                Some(v) => {
                    body.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    body.extend_from_slice(v.as_bytes());
                }
                None => body.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        body.extend_from_slice(&0i16.to_be_bytes());
        self.message(b'B', &body);
        // Describe the portal (so rows come with a RowDescription),
        // Execute it (all rows), Sync.
        self.message(b'D', b"P\0");
        body.clear();
        body.push(0);
        body.extend_from_slice(&0i32.to_be_bytes());
        self.message(b'E', &body);
        self.message(b'S', &[]);
        self.send().map_err(|e| e.to_string())?;
        self.collect().map_err(|e| e.to_string())?
    }

    /// [`PgClient::query`] for a statement without rows: how many rows it
    /// touched (the count of its command tag, `UPDATE 1` -> 1).
    pub fn execute(&mut self, sql: &str, params: &[&str]) -> Result<u64, String> {
        self.query(sql, params)?;
        Ok(self.affected)
    }

    /// Runs `sql` with the simple query protocol (statements separated by
    /// `;`, no parameters): the rows of the last statement that had rows.
    pub fn simple(&mut self, sql: &str) -> Result<Rows, String> {
        let mut body = Vec::with_capacity(sql.len() + 1);
        cstr(&mut body, sql);
        self.message(b'Q', &body);
        self.send().map_err(|e| e.to_string())?;
        self.collect().map_err(|e| e.to_string())?
    }

    /// The first column of the first row of `sql` (simple protocol).
    pub fn value(&mut self, sql: &str) -> Result<Option<String>, String> {
        Ok(self
            .simple(sql)?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .flatten())
    }

    /// Waits up to `timeout` for notifications (after `LISTEN`): those
    /// that arrived, possibly none.
    pub fn notifications(&mut self, timeout: Duration) -> std::io::Result<Vec<Notification>> {
        let mut heard = Vec::new();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            // Parse what is buffered.
            while self.inbuf.len() >= 5 && self.inbuf.len() > be_i32(&self.inbuf[1..5]) as usize {
                let (tag, msg) = self.read_message()?;
                if tag == b'A' {
                    let rest = &msg[4..];
                    let mut parts = rest.split(|b| *b == 0);
                    let channel =
                        String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                    let payload =
                        String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                    heard.push(Notification { channel, payload });
                }
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !heard.is_empty() || left.is_zero() {
                return Ok(heard);
            }
            self.set_timeout(left.max(Duration::from_millis(1)))?;
            let mut chunk = [0u8; 4096];
            match self.socket.read(&mut chunk) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "closed",
                    ))
                }
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for PgClient {
    fn drop(&mut self) {
        // Terminate, politely; errors do not matter any more.
        self.out.clear();
        self.message(b'X', &[]);
        let _ = self.send();
    }
}

fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// `SQLSTATE: message` from an ErrorResponse body.
fn error_text(msg: &[u8]) -> String {
    let (mut code, mut text) = (String::new(), String::new());
    for field in msg.split(|b| *b == 0) {
        if let Some((&kind, value)) = field.split_first() {
            let value = String::from_utf8_lossy(value).into_owned();
            match kind {
                b'C' => code = value,
                b'M' => text = value,
                _ => {}
            }
        }
    }
    format!("{code}: {text}")
}

/// MD5 (RFC 1321) as lower-case hex, for md5 password authentication.
fn md5_hex(data: &[u8]) -> String {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let (mut a0, mut b0, mut c0, mut d0) = (
        0x6745_2301u32,
        0xefcd_ab89u32,
        0x98ba_dcfeu32,
        0x1032_5476u32,
    );
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_le_bytes());
    for chunk in msg.chunks(64) {
        let m: Vec<u32> = chunk
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    [a0, b0, c0, d0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn md5_known_answers() {
        assert_eq!(super::md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            super::md5_hex(b"The quick brown fox jumps over the lazy dog"),
            "9e107d9d372bb6826bd81d3542a419d6"
        );
    }
}
