//! What one listing ([`Locks::list`], an operator page refresh) costs the
//! Redis server, beside baselines measured in the same run on the same
//! server and keys (issue 39, finding 2): `LEASES` leases (held with
//! holder descriptions, ttl 10 min) in a fresh namespace, then
//! - `Locks::list("")`, `REFRESHES` times;
//! - the floor: a bare `SCAN MATCH NS:lease:*` (COUNT 500) with one
//!   pipelined `GET` per found lease per page (no ttl, no flags, no N-holder
//!   leases: less than a listing needs), `REFRESHES` times;
//! - 44a85b1's way, re-enacted: the same `SCAN`, then one round trip per
//!   lease (`MULTI` `PTTL` `GET` `TIME` `EXEC`), once.
//!
//! Each figure per refresh: commands (`INFO commandstats`, every call a
//! script makes counted, `INFO`/`CONFIG` not), Redis CPU
//! (`used_cpu_sys` + `used_cpu_user` of `INFO cpu`, delta) and the
//! client's wall time. Prints `key=value` lines for `scripts/bench`.
//!
//! `cargo run --release -p mistri_locks_core --example listing_cost -- redis://127.0.0.1:6379/0 10000 5`
use mistri_locks::Locks;
use redis::Connection;
use std::time::{Duration, Instant};

/// Sum of `calls=` over `INFO commandstats` (less `INFO` and `CONFIG`).
fn commands(con: &mut Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("cmdstat_")?;
            let (name, rest) = l.split_once(':')?;
            if name == "info" || name.starts_with("config") {
                return None;
            }
            rest.strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `used_cpu_sys + used_cpu_user` of `INFO cpu`, seconds.
fn cpu(con: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(con).unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, v) = l.trim().split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user")
                .then(|| v.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Runs `refresh` `times` times; prints commands, Redis CPU s and wall ms
/// per refresh under `tag`.
fn measure(con: &mut Connection, tag: &str, times: usize, mut refresh: impl FnMut()) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
    let cpu0 = cpu(con);
    let start = Instant::now();
    for _ in 0..times {
        refresh();
    }
    let wall = start.elapsed();
    let cpu1 = cpu(con);
    let cmds = commands(con);
    let n = times as f64;
    println!("listing_{tag}_cmds={:.0}", cmds as f64 / n);
    println!("listing_{tag}_cpu_s={:.4}", (cpu1 - cpu0) / n);
    println!("listing_{tag}_wall_ms={:.1}", wall.as_secs_f64() * 1e3 / n);
}

/// Every lease key of `ns`, page by page (`SCAN` COUNT 500), each page
/// handed to `page`.
fn scan_pages(con: &mut Connection, ns: &str, mut page: impl FnMut(&mut Connection, Vec<String>)) {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{ns}:lease:*"))
            .arg("COUNT")
            .arg(500)
            .query(con)
            .unwrap();
        page(con, keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args
        .first()
        .expect("usage: listing_cost URL [LEASES] [REFRESHES]");
    let leases: usize = args.get(1).map_or(10_000, |s| s.parse().unwrap());
    let refreshes: usize = args.get(2).map_or(5, |s| s.parse().unwrap());
    let ns = format!("bench:listing:{}", std::process::id());
    let locks = Locks::redis(url, &ns).unwrap();
    for i in 0..leases {
        assert!(locks
            .acquire(&format!("job-{i}"), Duration::from_secs(600))
            .unwrap());
    }
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    println!("listing_leases={leases}");
    println!("listing_refreshes={refreshes}");

    let mut listed = 0;
    measure(&mut con, "ours", refreshes, || {
        listed = locks.list("").unwrap().leases.len();
    });
    assert_eq!(listed, leases, "every lease listed");

    let mut floor_con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut got = 0;
    measure(&mut con, "floor", refreshes, || {
        got = 0;
        scan_pages(&mut floor_con, &ns, |c, keys| {
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("GET").arg(k);
            }
            let values: Vec<Option<Vec<u8>>> = pipe.query(c).unwrap();
            got += values.iter().flatten().count();
        });
    });
    assert_eq!(got, leases);

    measure(&mut con, "old", 1, || {
        scan_pages(&mut floor_con, &ns, |c, keys| {
            for k in &keys {
                let _: (i64, Option<Vec<u8>>, (u64, u64)) = redis::pipe()
                    .atomic()
                    .cmd("PTTL")
                    .arg(k)
                    .cmd("GET")
                    .arg(k)
                    .cmd("TIME")
                    .query(c)
                    .unwrap();
            }
        });
    });

    for i in 0..leases {
        locks.release(&format!("job-{i}")).unwrap();
    }
}
