//! The backends: [`memory::Memory`] (one process), [`local::Local`] (the
//! processes of one host, an SQLite file), [`redis`] (one server, the
//! master Sentinel names, or a Cluster), [`postgres`] (tables in a
//! PostgreSQL database), and [`open`], the one dispatcher
//! from a URL every face goes through. Each implements
//! [`crate::Adapter`] and nothing above it.

pub(crate) mod local;
pub(crate) mod memory;
pub(crate) mod postgres;
pub(crate) mod redis;

use crate::contract::adapter::Adapter;
use crate::error::Result;
use redis::cluster::RedisCluster;
use redis::sentinel::Sentinel;
use redis::url::{parse_host_list, take_own_params};
use redis::{Redis, DEFAULT_TIMEOUT};
use std::sync::Arc;

/// The adapter for `url` with keys under `namespace`: the one dispatcher
/// every face's Redis constructor goes through.
///
/// # Errors
/// [`Error::Config`] for an unparsable URL or an unknown scheme;
/// [`Error::InvalidArgument`] for a bad namespace or a bad
/// `min_replicas` / `replica_timeout`.
pub fn open(url: &str, namespace: &str) -> Result<Arc<dyn Adapter>> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
    if scheme == "postgres" || scheme == "postgresql" {
        return Ok(Arc::new(postgres::Postgres::open(url, namespace)?));
    }
    let (rest, ack, sentinel_params) = take_own_params(url)?;
    let tls = scheme.starts_with("rediss");
    let base = if tls { "rediss" } else { "redis" };
    match scheme {
        "redis+cluster" | "rediss+cluster" => {
            let parts = parse_host_list(&rest, base)?;
            Ok(Arc::new(RedisCluster::open(parts, namespace, ack)?))
        }
        "redis+sentinel" | "rediss+sentinel" => {
            let parts = parse_host_list(&rest, base)?;
            let sentinel = Sentinel::new(parts, &sentinel_params)?;
            Ok(Arc::new(Redis::open_sentinel(sentinel, namespace, ack)?))
        }
        _ => Ok(Arc::new(
            Redis::with_timeout(&rest, namespace, DEFAULT_TIMEOUT)?
                .replicated(ack)
                .accepting_eviction(ack.accept_eviction),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn unknown_schemes_are_config_errors() {
        assert!(matches!(open("http://x", "ns"), Err(Error::Config(_))));
        assert!(matches!(
            open("redis+sentinel://127.0.0.1:1", "ns"),
            Err(Error::Config(_))
        ));
    }
}
