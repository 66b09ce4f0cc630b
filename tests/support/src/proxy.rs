//! [`Proxy`]: a loopback TCP proxy in front of a server port that a test can
//! make silent or slow, for fault tests of clients that talk to Redis.
//!
//! Semantics (both directions, every connection, the same switches):
//!
//! - **Forwarding**: each accepted connection gets a fresh upstream
//!   connection and two pump threads, one per direction. A pump reads a
//!   chunk as soon as it arrives, stamps it with `read time + delay`, and
//!   writes it on, in order, once that time has come.
//! - **`blackhole(true)`**: nothing is forwarded, in either direction, but no
//!   socket is closed or reset and nothing is dropped: the pumps keep
//!   reading what the peers send (so neither peer's sends block) and *hold*
//!   the bytes. The peers see a silent network, as with a partition that
//!   TCP rides out by retransmitting. `blackhole(false)` delivers the held
//!   bytes, in order, at once (each no earlier than its own ready time):
//!   the late arrival of requests sent during the silence is part of the
//!   fault. Connections made while blackholed are accepted (the kernel
//!   completes the handshake) and connected upstream, then held silent too.
//! - **`delay(d)`**: every chunk read from now on is held `d` before it is
//!   forwarded (chunks read earlier keep their own ready time). Bytes
//!   already in flight keep flowing; a round trip takes at least `2 d`.
//! - End of stream from one peer is passed on (after the held bytes) as a
//!   half-close; a reset or error closes both sides of that connection.
//! - **`sever(true)`**: every live connection is closed at once, both
//!   sides (held bytes are discarded), and every connection accepted while
//!   it is on is closed as soon as it is accepted, never connected
//!   upstream: the client sees its connection cut, as when a middlebox
//!   restarts. `sever(false)` forwards new connections again.
//!
//! Threads: one acceptor (non-blocking accept polled every 2 ms), two pumps
//! per connection (reads with a 5 ms timeout). All of them check a stop
//! flag; [`Drop`] sets it, closes every socket and joins every thread, so a
//! dropped proxy leaves nothing running (held bytes are discarded then).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(5);

struct Switches {
    stop: AtomicBool,
    blackhole: AtomicBool,
    sever: AtomicBool,
    /// Delay in nanoseconds.
    delay_ns: AtomicU64,
    connections: AtomicU64,
    live: Mutex<Vec<Connection>>,
}

/// One proxied connection: its two sockets (kept so Drop can close them)
/// and its two pumps.
struct Connection {
    sockets: [TcpStream; 2],
    pumps: Vec<JoinHandle<()>>,
}

impl Connection {
    fn finished(&self) -> bool {
        self.pumps.iter().all(JoinHandle::is_finished)
    }
    fn close_and_join(self) {
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        for pump in self.pumps {
            let _ = pump.join();
        }
    }
}

/// A TCP proxy on 127.0.0.1 in front of `127.0.0.1:upstream_port`.
///
/// # Examples
/// ```no_run
/// use mistri_locks_testkit::{Proxy, RedisServer};
/// let server = RedisServer::start();
/// let proxy = Proxy::start(server.port());
/// let url = proxy.url(); // give this to the client under test
/// proxy.blackhole(true); // ... the client now hears nothing
/// proxy.blackhole(false);
/// ```
pub struct Proxy {
    port: u16,
    switches: Arc<Switches>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port. Panics (a test helper) if it
    /// cannot bind.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("local addr").port();
        let switches = Arc::new(Switches {
            stop: AtomicBool::new(false),
            blackhole: AtomicBool::new(false),
            sever: AtomicBool::new(false),
            delay_ns: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            live: Mutex::new(Vec::new()),
        });
        let upstream: SocketAddr = ([127, 0, 0, 1], upstream_port).into();
        let acceptor = {
            let switches = switches.clone();
            std::thread::Builder::new()
                .name("proxy-accept".into())
                .spawn(move || accept_loop(listener, upstream, &switches))
                .expect("spawn proxy acceptor")
        };
        Proxy {
            port,
            switches,
            acceptor: Some(acceptor),
        }
    }

    /// Stops (`true`) or resumes (`false`) forwarding, without closing
    /// anything; bytes are held meanwhile and delivered on resume.
    pub fn blackhole(&self, on: bool) {
        self.switches.blackhole.store(on, Ordering::SeqCst);
    }

    /// Closes (`true`) every live connection and each new one as it is
    /// accepted, until called with `false`.
    pub fn sever(&self, on: bool) {
        self.switches.sever.store(on, Ordering::SeqCst);
        if on {
            let live: Vec<_> = self.switches.live.lock().unwrap().drain(..).collect();
            for connection in live {
                connection.close_and_join();
            }
        }
    }

    /// Holds every chunk read from now on for `delay` before forwarding it.
    /// `Duration::ZERO` turns delay off.
    pub fn delay(&self, delay: Duration) {
        let ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.switches.delay_ns.store(ns, Ordering::SeqCst);
    }

    /// The port clients should connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/0` for the proxy's port.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// How many client connections it has accepted so far.
    pub fn connections(&self) -> u64 {
        self.switches.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.switches.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // No new connection can appear now: the acceptor is gone.
        let live: Vec<_> = self.switches.live.lock().unwrap().drain(..).collect();
        for connection in live {
            connection.close_and_join();
        }
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, switches: &Arc<Switches>) {
    while !switches.stop.load(Ordering::SeqCst) {
        // Reap finished connections, so a long test does not pile up
        // sockets and threads.
        let done: Vec<_> = {
            let mut live = switches.live.lock().unwrap();
            let (done, running) = live.drain(..).partition(Connection::finished);
            *live = running;
            done
        };
        for connection in done {
            connection.close_and_join();
        }
        match listener.accept() {
            Ok((client, _)) if switches.sever.load(Ordering::SeqCst) => {
                let _ = client.shutdown(Shutdown::Both);
            }
            Ok((client, _)) => {
                if let Err(e) = connect(client, upstream, switches) {
                    eprintln!("proxy: could not connect upstream {upstream}: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn connect(
    client: TcpStream,
    upstream: SocketAddr,
    switches: &Arc<Switches>,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let server = match TcpStream::connect_timeout(&upstream, Duration::from_secs(1)) {
        Ok(s) => s,
        Err(e) => {
            // The client sees the refusal as a closed connection.
            let _ = client.shutdown(Shutdown::Both);
            return Err(e);
        }
    };
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(POLL))?;
        s.set_write_timeout(Some(POLL))?;
    }
    switches.connections.fetch_add(1, Ordering::SeqCst);
    let sockets = [client.try_clone()?, server.try_clone()?];
    let mut pumps = Vec::with_capacity(2);
    for (from, to, name) in [
        (client.try_clone()?, server.try_clone()?, "proxy-up"),
        (server, client, "proxy-down"),
    ] {
        let switches = switches.clone();
        pumps.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || pump(from, to, &switches))?,
        );
    }
    switches
        .live
        .lock()
        .unwrap()
        .push(Connection { sockets, pumps });
    Ok(())
}

/// Moves bytes `from` → `to` under the switches until either side ends or
/// the proxy stops.
fn pump(mut from: TcpStream, mut to: TcpStream, switches: &Switches) {
    let mut held: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut eof = false;
    loop {
        if switches.stop.load(Ordering::SeqCst) {
            return;
        }
        // Forward what is due, unless silent.
        if !switches.blackhole.load(Ordering::SeqCst) {
            while let Some((ready, chunk)) = held.front_mut() {
                if *ready > Instant::now() {
                    break;
                }
                match to.write(chunk) {
                    Ok(0) => return close(&from, &to),
                    Ok(n) if n == chunk.len() => {
                        held.pop_front();
                    }
                    Ok(n) => {
                        chunk.drain(..n);
                    }
                    Err(e) if would_block(&e) => break,
                    Err(_) => return close(&from, &to),
                }
            }
        }
        if eof {
            if held.is_empty() {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // Read with a short timeout; the timeout bounds how stale the
        // forwarding loop above can get.
        let wait = match held.front() {
            Some((ready, _)) if !switches.blackhole.load(Ordering::SeqCst) => ready
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), POLL),
            _ => POLL,
        };
        let _ = from.set_read_timeout(Some(wait));
        match from.read(&mut buf) {
            Ok(0) => eof = true,
            Ok(n) => {
                let delay = Duration::from_nanos(switches.delay_ns.load(Ordering::SeqCst));
                held.push_back((Instant::now() + delay, buf[..n].to_vec()));
            }
            Err(e) if would_block(&e) => {}
            Err(_) => return close(&from, &to),
        }
    }
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

fn close(a: &TcpStream, b: &TcpStream) {
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}
