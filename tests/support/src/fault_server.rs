//! What a fault case does to a backend's server, as one trait: start it,
//! stop it, freeze and thaw it (SIGSTOP/SIGCONT of every process that
//! serves), restart it (now, or after some downtime with the port dead),
//! and reach it through a [`Proxy`] whose network the case can break. The
//! fault suites' kit (`tests/support/fault_kit.rs`) drives faults through
//! it; a new backend's harness implements it and its fault suite lists
//! only its cases.

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
    /// Stops it for good.
    fn stop(&mut self);
    /// Every process that serves stops (SIGSTOP): connections stay open,
    /// nothing answers, the server's clock keeps running.
    fn freeze(&mut self);
    /// Resumes a frozen server (SIGCONT).
    fn thaw(&mut self);
    /// Down and back at once.
    fn restart(&mut self) {
        self.restart_after(Duration::ZERO);
    }
    /// Down, the port dead for `downtime`, and back.
    fn restart_after(&mut self, downtime: Duration);
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
    fn start() -> Self {
        RedisServer::start()
    }
    fn port(&self) -> u16 {
        RedisServer::port(self)
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
    fn start() -> Self {
        PgServer::start()
    }
    fn port(&self) -> u16 {
        PgServer::port(self)
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
}
