//! What a fault case does to a backend's server, as one trait: start it,
//! stop it, freeze and thaw it (SIGSTOP/SIGCONT of every process that
//! serves), restart it (now, after some downtime with the port dead, or as
//! a crash), and reach it, straight or through a [`Proxy`] whose network
//! the case can break. The fault suites' cases (`tests/support/fault_cases.rs`)
//! are generic over it; a new backend's harness implements it, and its
//! fault suite is a list of those cases.

use crate::{PgServer, Proxy, RedisServer};
use std::time::{Duration, Instant};

/// A throwaway server a fault case can break (module header).
pub trait FaultServer {
    /// A fresh server on a free loopback port.
    fn start() -> Self
    where
        Self: Sized;
    /// Its port.
    fn port(&self) -> u16;
    /// The URL a client opens to reach it straight.
    fn url(&self) -> String;
    /// The URL a client opens to reach it through `proxy`: its own URL
    /// with the proxy's port.
    fn url_via(&self, proxy: &Proxy) -> String {
        let own = format!("127.0.0.1:{}/", self.port());
        let url = self.url();
        assert!(url.contains(&own), "{url} does not name {own}");
        url.replace(&own, &format!("127.0.0.1:{}/", proxy.port()))
    }
    /// Stops it for good.
    fn stop(&mut self);
    /// Every process that serves stops (SIGSTOP): connections stay open,
    /// nothing answers, the server's clock keeps running.
    fn freeze(&mut self);
    /// Resumes a frozen server (SIGCONT).
    fn thaw(&mut self);
    /// Whether a restart keeps its leases (Postgres keeps its rows; a
    /// throwaway redis-server comes back empty). The cases of a restart at
    /// once differ on it.
    const KEEPS_DATA: bool;
    /// Down and back at once.
    fn restart(&mut self) {
        self.restart_after(Duration::ZERO);
    }
    /// Down, the port dead for `downtime`, and back.
    fn restart_after(&mut self, downtime: Duration);
    /// Killed as a crash would (SIGKILL of every server process) and back
    /// at once. The default is [`FaultServer::restart`], for a server whose
    /// restart is a SIGKILL already.
    fn crash_restart(&mut self) {
        self.restart();
    }
    /// A proxy in front of it, for network faults.
    fn proxy(&self) -> Proxy {
        Proxy::start(self.port())
    }
    /// Frozen for `downtime`, then thawed; the instants just before the
    /// freeze and just after the thaw.
    fn frozen_for(&mut self, downtime: Duration) -> (Instant, Instant) {
        let frozen = Instant::now();
        self.freeze();
        std::thread::sleep(downtime);
        self.thaw();
        (frozen, Instant::now())
    }
}

impl FaultServer for RedisServer {
    const KEEPS_DATA: bool = false;
    fn start() -> Self {
        RedisServer::start()
    }
    fn port(&self) -> u16 {
        RedisServer::port(self)
    }
    fn url(&self) -> String {
        RedisServer::url(self)
    }
    fn stop(&mut self) {
        RedisServer::stop(self);
    }
    fn freeze(&mut self) {
        RedisServer::freeze(self);
    }
    fn thaw(&mut self) {
        RedisServer::thaw(self);
    }
    fn restart_after(&mut self, downtime: Duration) {
        RedisServer::restart_after(self, downtime);
    }
}

impl FaultServer for PgServer {
    const KEEPS_DATA: bool = true;
    fn start() -> Self {
        PgServer::start()
    }
    fn port(&self) -> u16 {
        PgServer::port(self)
    }
    fn url(&self) -> String {
        PgServer::url(self)
    }
    fn stop(&mut self) {
        PgServer::stop(self);
    }
    fn freeze(&mut self) {
        PgServer::freeze(self);
    }
    fn thaw(&mut self) {
        PgServer::thaw(self);
    }
    fn restart_after(&mut self, downtime: Duration) {
        PgServer::restart_after(self, downtime);
    }
    fn crash_restart(&mut self) {
        PgServer::crash_restart(self);
    }
}
