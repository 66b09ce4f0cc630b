//! Starts a throwaway PostgreSQL server (the testkit's `PgServer`) and
//! keeps it until stdin closes; prints `port=PORT` and `pid=POSTMASTER` first. For
//! `scripts/bench`, which pins this process (and so the server, which
//! inherits the CPU affinity) to its server core.
//!
//! ```sh
//! cargo run --release -p mistri_locks_core --example pg_serve < /some/fifo
//! ```

use mistri_locks_testkit::PgServer;
use std::io::{Read, Write};

fn main() {
    let server = PgServer::start();
    let mut out = std::io::stdout().lock();
    writeln!(out, "port={}", server.port()).unwrap();
    writeln!(out, "pid={}", server.pid()).unwrap();
    out.flush().unwrap();
    drop(out);
    // Until the script closes our stdin (or dies).
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(server);
}
