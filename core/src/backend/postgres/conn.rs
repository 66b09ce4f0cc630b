//! One connection to a PostgreSQL server, driven by hand: the
//! `postgres-protocol` codec over a std socket (TCP, unix, or TLS over
//! TCP by rustls), every read and write bounded by the caller's deadline.
//!
//! No runtime, no thread: a connection is a socket and two buffers, so a
//! forked child simply drops its inherited copies (closing its fds, writing
//! nothing). A statement is sent as ONE write of Parse/Bind/Execute/Sync of
//! the unnamed statement with text parameters (works through PgBouncer's
//! transaction pooling; nothing is escaped). Any I/O error or timeout
//! makes the connection unusable ([`Conn::broken`]): its reply may still be
//! in flight, so it is dropped, never pooled.

use super::url::{PgConfig, SslMode, Target};
use crate::error::{Error, Result};
use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use postgres_protocol::IsNull;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest socket timeout set (zero means "block forever" to the OS).
pub(crate) const MIN_IO: Duration = Duration::from_millis(1);

/// An error the server sent (the connection stays usable).
#[derive(Debug, Clone)]
pub(crate) struct ServerError {
    /// The SQLSTATE.
    pub(crate) code: String,
    pub(crate) message: String,
    /// It was the first reply to the statement (a FATAL error then means
    /// the session had ended before the statement was read).
    pub(crate) first: bool,
}

impl ServerError {
    /// The server ends the session with this error (shutdown, restart,
    /// a terminated backend, a lost connection): nothing more will come.
    pub(crate) fn fatal(&self) -> bool {
        self.code.starts_with("57P") || self.code.starts_with("08")
    }

    /// As the crate's error, about `peer`.
    pub(crate) fn into_error(self, peer: &str) -> Error {
        let text = format!(
            "Postgres at {peer} answered with an error: {} (SQLSTATE {})",
            self.message, self.code
        );
        match self.code.as_str() {
            c if c.starts_with("28") => Error::Config(text),
            "3D000" | "42501" | "3F000" => Error::Config(text),
            c if c.starts_with("08") || c.starts_with("57P") || c == "53300" => {
                Error::Connection(text)
            }
            _ => Error::Backend(text),
        }
    }
}

/// One row of text columns.
pub(crate) type Row = Vec<Option<String>>;

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn set_timeouts(&self, t: Duration) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s
                .set_read_timeout(Some(t))
                .and(s.set_write_timeout(Some(t))),
            Stream::Unix(s) => s
                .set_read_timeout(Some(t))
                .and(s.set_write_timeout(Some(t))),
            Stream::Tls(s) => s
                .sock
                .set_read_timeout(Some(t))
                .and(s.sock.set_write_timeout(Some(t))),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(buf),
            Stream::Unix(s) => s.write_all(buf),
            Stream::Tls(s) => s.write_all(buf).and_then(|()| s.flush()),
        }
    }
}

/// A connection to one server.
pub(crate) struct Conn {
    stream: Stream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// `host:port` or the socket path, for messages.
    peer: String,
    /// The socket timeouts now set (skips a system call when unchanged).
    aimed: Option<Duration>,
    /// An I/O error or a timeout happened: never use again.
    pub(crate) broken: bool,
    /// A write failed: the server runs no message it did not get whole,
    /// and Sync comes last, so that statement did not run.
    pub(crate) unsent: bool,
    /// Notifications read (the listener's connection), channel and payload.
    pub(crate) heard: Vec<(String, String)>,
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

impl Conn {
    /// Time left until `deadline`, or the error that says there is none.
    pub(crate) fn left(deadline: Instant, peer: &str) -> Result<Duration> {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| *d >= MIN_IO)
            .ok_or_else(|| {
                Error::Connection(format!(
                    "Postgres at {peer} did not answer in time (deadline passed)"
                ))
            })
    }

    fn aim(&mut self, deadline: Instant) -> Result<()> {
        let left = Self::left(deadline, &self.peer)?;
        if self.aimed.is_some_and(|t| t.abs_diff(left) < MIN_IO) {
            return Ok(());
        }
        self.aimed = None;
        self.stream.set_timeouts(left).map_err(|e| self.io(&e))?;
        self.aimed = Some(left);
        Ok(())
    }

    fn io(&self, e: &std::io::Error) -> Error {
        if is_timeout(e) {
            Error::Connection(format!("Postgres at {} did not answer in time", self.peer))
        } else {
            Error::Connection(format!(
                "lost the connection to Postgres at {}: {e}",
                self.peer
            ))
        }
    }

    /// Opens, (TLS,) authenticates and waits for the server to be ready,
    /// all by `deadline`.
    pub(crate) fn connect(cfg: &PgConfig, target: &Target, deadline: Instant) -> Result<Conn> {
        let peer = target.describe();
        let deadline = match cfg.connect_timeout {
            Some(t) => deadline.min(Instant::now() + t),
            None => deadline,
        };
        let refused = |e: std::io::Error| {
            let why = if is_timeout(&e) {
                "timed out".to_owned()
            } else {
                e.to_string()
            };
            Error::Connection(format!("cannot reach Postgres at {peer}: {why}"))
        };
        let stream = match target {
            Target::Tcp { host, port } => {
                let addrs: Vec<_> = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| {
                        Error::Connection(format!("cannot resolve Postgres host {host}: {e}"))
                    })?
                    .collect();
                let mut last = None;
                let mut tcp = None;
                for addr in addrs {
                    let left = Self::left(deadline, &peer)?;
                    match TcpStream::connect_timeout(&addr, left) {
                        Ok(s) => {
                            tcp = Some(s);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let tcp = match tcp {
                    Some(s) => s,
                    None => {
                        return Err(refused(last.unwrap_or_else(|| {
                            std::io::Error::new(ErrorKind::NotFound, "no address")
                        })))
                    }
                };
                let _ = tcp.set_nodelay(true);
                Stream::Tcp(tcp)
            }
            Target::Unix { .. } => {
                let path = peer.clone();
                Stream::Unix(UnixStream::connect(&path).map_err(refused)?)
            }
        };
        let mut con = Conn {
            stream,
            rbuf: BytesMut::with_capacity(8192),
            wbuf: BytesMut::with_capacity(1024),
            peer,
            aimed: None,
            broken: false,
            unsent: false,
            heard: Vec::new(),
        };
        if let (Target::Tcp { host, .. }, true) = (target, cfg.ssl != SslMode::Disable) {
            con = con.tls(host, cfg.ssl, deadline)?;
        }
        con.startup(cfg, deadline)?;
        Ok(con)
    }

    fn tls(mut self, host: &str, mode: SslMode, deadline: Instant) -> Result<Conn> {
        frontend::ssl_request(&mut self.wbuf);
        self.flush(deadline)?;
        let mut answer = [0u8; 1];
        self.aim(deadline)?;
        let n = self.stream.read(&mut answer).map_err(|e| self.io(&e))?;
        match (n, answer[0], mode) {
            (1, b'S', _) => {}
            (1, b'N', SslMode::Prefer) => return Ok(self),
            (1, b'N', _) => {
                return Err(Error::Config(format!(
                    "Postgres at {} does not offer TLS (sslmode=require)",
                    self.peer
                )))
            }
            _ => {
                return Err(Error::Connection(format!(
                    "Postgres at {} answered the TLS request with {answer:?}",
                    self.peer
                )))
            }
        }
        let Stream::Tcp(tcp) = self.stream else {
            unreachable!("TLS is asked on TCP only");
        };
        let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| {
            Error::Config(format!(
                "TLS with Postgres at {}: bad host name: {e}",
                self.peer
            ))
        })?;
        let tls = rustls::ClientConnection::new(tls_config()?, name).map_err(|e| {
            Error::Config(format!("TLS with Postgres at {} failed: {e}", self.peer))
        })?;
        self.stream = Stream::Tls(Box::new(rustls::StreamOwned::new(tls, tcp)));
        self.aimed = None;
        Ok(self)
    }

    fn startup(&mut self, cfg: &PgConfig, deadline: Instant) -> Result<()> {
        let mut params: Vec<(&str, &str)> = vec![
            ("user", &cfg.user),
            ("database", &cfg.dbname),
            ("client_encoding", "UTF8"),
        ];
        if let Some(app) = &cfg.application_name {
            params.push(("application_name", app));
        }
        frontend::startup_message(params.iter().copied(), &mut self.wbuf)
            .map_err(|e| Error::Config(format!("bad startup parameter: {e}")))?;
        self.flush(deadline)?;
        let password = || {
            cfg.password.as_deref().ok_or_else(|| {
                Error::Config(format!(
                    "Postgres at {} asks for a password and the URL has none",
                    cfg.target.describe()
                ))
            })
        };
        let mut scram: Option<ScramSha256> = None;
        loop {
            match self.read_message(deadline)? {
                Message::AuthenticationOk => {}
                Message::AuthenticationCleartextPassword => {
                    frontend::password_message(password()?.as_bytes(), &mut self.wbuf)
                        .map_err(|e| self.io(&e))?;
                    self.flush(deadline)?;
                }
                Message::AuthenticationMd5Password(body) => {
                    let hash = md5_hash(cfg.user.as_bytes(), password()?.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut self.wbuf)
                        .map_err(|e| self.io(&e))?;
                    self.flush(deadline)?;
                }
                Message::AuthenticationSasl(body) => {
                    let mut mechanisms = body.mechanisms();
                    let mut ok = false;
                    while let Some(m) = mechanisms.next().map_err(|e| self.io(&e))? {
                        ok |= m == SCRAM_SHA_256;
                    }
                    if !ok {
                        return Err(Error::Config(format!(
                            "Postgres at {} offers no SASL mechanism this client speaks (SCRAM-SHA-256)",
                            self.peer
                        )));
                    }
                    let s = ScramSha256::new(password()?.as_bytes(), ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut self.wbuf)
                        .map_err(|e| self.io(&e))?;
                    self.flush(deadline)?;
                    scram = Some(s);
                }
                Message::AuthenticationSaslContinue(body) => {
                    let s = scram.as_mut().ok_or_else(|| self.protocol("SASL continue"))?;
                    s.update(body.data()).map_err(|e| self.auth(&e))?;
                    frontend::sasl_response(s.message(), &mut self.wbuf)
                        .map_err(|e| self.io(&e))?;
                    self.flush(deadline)?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let s = scram.as_mut().ok_or_else(|| self.protocol("SASL final"))?;
                    s.finish(body.data()).map_err(|e| self.auth(&e))?;
                }
                Message::ErrorResponse(body) => {
                    return Err(server_error(&body).into_error(&self.peer));
                }
                Message::ReadyForQuery(_) => return Ok(()),
                Message::BackendKeyData(_)
                | Message::ParameterStatus(_)
                | Message::NoticeResponse(_) => {}
                _ => {
                    return Err(Error::Config(format!(
                        "Postgres at {} asks for an authentication method this client does not speak (use md5, scram-sha-256, password or trust)",
                        self.peer
                    )))
                }
            }
        }
    }

    fn auth(&self, e: &std::io::Error) -> Error {
        Error::Config(format!(
            "Postgres at {} failed the SCRAM exchange: {e}",
            self.peer
        ))
    }

    fn protocol(&mut self, what: &str) -> Error {
        self.broken = true;
        Error::Connection(format!(
            "Postgres at {} sent an unexpected message ({what})",
            self.peer
        ))
    }

    /// Writes the buffered messages, by `deadline`.
    fn flush(&mut self, deadline: Instant) -> Result<()> {
        let r = self.aim(deadline).and_then(|()| {
            let buf = self.wbuf.split();
            self.stream.write_all(&buf).map_err(|e| self.io(&e))
        });
        if r.is_err() {
            self.broken = true;
            self.unsent = true;
        }
        r
    }

    /// The next message, by `deadline`; `Ok(None)` at the deadline when
    /// `soft` (the listener's slices: a partial message stays buffered).
    fn next_message(&mut self, deadline: Instant, soft: bool) -> Result<Option<Message>> {
        loop {
            match Message::parse(&mut self.rbuf) {
                Ok(Some(m)) => return Ok(Some(m)),
                Ok(None) => {}
                Err(e) => {
                    self.broken = true;
                    return Err(Error::Connection(format!(
                        "Postgres at {} sent a malformed message: {e}",
                        self.peer
                    )));
                }
            }
            if soft && deadline <= Instant::now() + MIN_IO {
                return Ok(None);
            }
            let mut chunk = [0u8; 8192];
            // A read cut short by a signal is tried again, aimed at what is
            // left: the read system call re-reads the same reply (nothing
            // is sent again), so any statement is safe.
            let mut aimed = Ok(());
            let read = crate::runtime::eintr::retry(deadline, || {
                aimed = self.aim(deadline);
                match &aimed {
                    Ok(()) => self.stream.read(&mut chunk),
                    Err(_) => Ok(0),
                }
            });
            if let Err(e) = aimed {
                if soft {
                    return Ok(None);
                }
                self.broken = true;
                return Err(e);
            }
            match read {
                Ok(0) => {
                    self.broken = true;
                    return Err(Error::Connection(format!(
                        "Postgres at {} closed the connection",
                        self.peer
                    )));
                }
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if soft && is_timeout(&e) => return Ok(None),
                // Cut short by a signal past the deadline (the listener's
                // wait, resumed after SIGSTOP/SIGCONT): nothing was read,
                // the connection is whole; a wait that heard nothing.
                Err(e) if soft && e.kind() == ErrorKind::Interrupted => return Ok(None),
                Err(e) => {
                    self.broken = true;
                    return Err(self.io(&e));
                }
            }
        }
    }

    fn read_message(&mut self, deadline: Instant) -> Result<Message> {
        match self.next_message(deadline, false)? {
            Some(Message::NotificationResponse(n)) => {
                if let (Ok(c), Ok(p)) = (n.channel(), n.message()) {
                    self.heard.push((c.to_owned(), p.to_owned()));
                }
                self.read_message(deadline)
            }
            Some(m) => Ok(m),
            None => unreachable!("a hard read returns a message or an error"),
        }
    }

    /// Runs one statement with text parameters (`None`: NULL), by
    /// `deadline`: the rows, or the server's error (then the connection is
    /// still usable).
    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[Option<&str>],
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<Row>, ServerError>> {
        frontend::parse("", sql, std::iter::empty(), &mut self.wbuf).map_err(|e| self.io(&e))?;
        frontend::bind(
            "",
            "",
            std::iter::empty(),
            params.iter(),
            |p, buf| match p {
                Some(text) => {
                    buf.extend_from_slice(text.as_bytes());
                    Ok(IsNull::No)
                }
                None => Ok(IsNull::Yes),
            },
            std::iter::empty(),
            &mut self.wbuf,
        )
        .map_err(|_| Error::InvalidArgument("too many statement parameters".into()))?;
        frontend::execute("", 0, &mut self.wbuf).map_err(|e| self.io(&e))?;
        frontend::sync(&mut self.wbuf);
        self.flush(deadline)?;
        self.collect(deadline)
    }

    /// Runs `sql` by the simple protocol (several statements, no
    /// parameters: the schema's DDL, `LISTEN`), by `deadline`.
    pub(crate) fn simple(
        &mut self,
        sql: &str,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<Row>, ServerError>> {
        frontend::query(sql, &mut self.wbuf).map_err(|e| self.io(&e))?;
        self.flush(deadline)?;
        self.collect(deadline)
    }

    /// Reads the replies up to ReadyForQuery.
    fn collect(&mut self, deadline: Instant) -> Result<std::result::Result<Vec<Row>, ServerError>> {
        let mut rows = Vec::new();
        let mut failed: Option<ServerError> = None;
        let mut seen_any = false;
        loop {
            let message = match self.read_message(deadline) {
                Ok(m) => m,
                // FATAL (the server is going away: shutdown, restart,
                // terminated backend) comes as an error, then the close.
                Err(_) if failed.as_ref().is_some_and(ServerError::fatal) => {
                    self.broken = true;
                    return Ok(Err(failed.unwrap_or_else(|| unreachable!())));
                }
                Err(e) => return Err(e),
            };
            match message {
                Message::DataRow(body) => {
                    seen_any = true;
                    let buf = body.buffer();
                    let mut row = Vec::new();
                    let mut ranges = body.ranges();
                    while let Some(r) = ranges.next().map_err(|e| self.io(&e))? {
                        row.push(r.map(|r| String::from_utf8_lossy(&buf[r]).into_owned()));
                    }
                    rows.push(row);
                }
                Message::ErrorResponse(body) => {
                    let mut e = server_error(&body);
                    e.first = !seen_any;
                    seen_any = true;
                    if e.fatal() {
                        self.broken = true;
                    }
                    failed = Some(e);
                }
                Message::ReadyForQuery(_) => {
                    return Ok(match failed {
                        Some(e) => Err(e),
                        None => Ok(rows),
                    })
                }
                Message::ParameterStatus(_) | Message::NoticeResponse(_) => {}
                Message::ParseComplete
                | Message::BindComplete
                | Message::CommandComplete(_)
                | Message::EmptyQueryResponse
                | Message::NoData
                | Message::RowDescription(_) => seen_any = true,
                _ => return Err(self.protocol("in a statement's replies")),
            }
        }
    }

    /// Waits until `until` for notifications (the listener): returns those
    /// heard (also any read during a statement). A timeout is not an error.
    pub(crate) fn notifications(&mut self, until: Instant) -> Result<Vec<(String, String)>> {
        if self.heard.is_empty() {
            if let Some(m) = self.next_message(until, true)? {
                match m {
                    Message::NotificationResponse(n) => {
                        if let (Ok(c), Ok(p)) = (n.channel(), n.message()) {
                            self.heard.push((c.to_owned(), p.to_owned()));
                        }
                    }
                    Message::ParameterStatus(_) | Message::NoticeResponse(_) => {}
                    Message::ErrorResponse(body) => {
                        // FATAL: the server is going away.
                        self.broken = true;
                        return Err(server_error(&body).into_error(&self.peer));
                    }
                    _ => return Err(self.protocol("while listening")),
                }
            }
            // Drain whatever else is already buffered.
            while let Ok(Some(m)) = Message::parse(&mut self.rbuf) {
                if let Message::NotificationResponse(n) = m {
                    if let (Ok(c), Ok(p)) = (n.channel(), n.message()) {
                        self.heard.push((c.to_owned(), p.to_owned()));
                    }
                }
            }
        }
        Ok(std::mem::take(&mut self.heard))
    }

    /// Who this connection talks to.
    pub(crate) fn peer(&self) -> &str {
        &self.peer
    }
}

fn server_error(body: &postgres_protocol::message::backend::ErrorResponseBody) -> ServerError {
    let mut code = String::new();
    let mut message = String::new();
    let mut fields = body.fields();
    while let Ok(Some(f)) = fields.next() {
        let value = String::from_utf8_lossy(f.value_bytes()).into_owned();
        match f.type_() {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    ServerError {
        code,
        message,
        first: false,
    }
}

/// The TLS setup of `sslmode=require` / `prefer`: encrypted, the server's
/// certificate not verified (as libpq does in those modes).
fn tls_config() -> Result<Arc<rustls::ClientConfig>> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    if let Some(c) = CONFIG.get() {
        return Ok(c.clone());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS setup failed: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        .with_no_client_auth();
    Ok(CONFIG.get_or_init(|| Arc::new(config)).clone())
}

/// Accepts any certificate (signatures are still checked): libpq's
/// `require`.
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
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
