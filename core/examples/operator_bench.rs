//! The operator's state JSON for 10,000 leases, beside `mistri-locks list
//! --json` on the same data, in one run.
//!
//! A fresh Local database gets N leases (each with a holder description,
//! ttl 10 minutes). Then, alternating rounds:
//! - `operator::state_json`: what `GET /api/state` does, in this process:
//!   `Locks::list` + the render (both shown, and the render alone);
//! - `mistri-locks list --json` on the same file: the CLI's own process
//!   (start, open, list, serde_json render, print), as an operator runs it.
//!
//! `cargo build --release -p mistri_locks_cli && cargo run --release -p
//! mistri_locks_core --example operator_bench -- 10000` (the CLI is looked
//! for beside the example's own target folder, or in $MISTRI_LOCKS_BIN).
use mistri_locks::{operator, Locks};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

const ROUNDS: usize = 5;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn cli() -> PathBuf {
    if let Some(p) = std::env::var_os("MISTRI_LOCKS_BIN") {
        return p.into();
    }
    // target/<profile>/examples/operator_bench -> target/<profile>/mistri-locks
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("mistri-locks"))
        .expect("a target folder")
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a number of leases"))
        .unwrap_or(10_000);
    // `-- N --fill DB`: only make the N leases in DB (the browser test's
    // 10,000 rows, tests/web/).
    let args: Vec<String> = std::env::args().collect();
    if args.get(2).map(String::as_str) == Some("--fill") {
        let db = PathBuf::from(args.get(3).expect("--fill DB"));
        let locks = Locks::local(Some(&db)).unwrap();
        for i in 0..n {
            assert!(locks
                .acquire(&format!("report:{i:05}"), Duration::from_secs(600))
                .unwrap());
        }
        println!("{n} leases in {}", db.display());
        return;
    }
    let dir = std::env::temp_dir().join(format!("mistri-operator-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("locks.db");
    let locks = Locks::local(Some(&db)).unwrap();
    let started = Instant::now();
    for i in 0..n {
        assert!(locks
            .acquire(&format!("report:{i:05}"), Duration::from_secs(600))
            .unwrap());
    }
    println!(
        "{n} leases on Local ({}), made in {}",
        db.display(),
        ms(started.elapsed())
    );
    let bin = cli();
    assert!(
        bin.exists(),
        "no {} (build the CLI first, or set MISTRI_LOCKS_BIN)",
        bin.display()
    );

    let (mut list, mut render, mut both, mut cli_runs) = (vec![], vec![], vec![], vec![]);
    let mut sizes = (0, 0);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let listing = locks.list("").unwrap();
        let listed = t.elapsed();
        let t2 = Instant::now();
        let doc = operator::state_json(&listing, "", SystemTime::now());
        render.push(t2.elapsed());
        list.push(listed);
        both.push(t.elapsed());
        sizes.0 = doc.len();

        let t = Instant::now();
        let out = Command::new(&bin)
            .args(["--url", db.to_str().unwrap(), "list", "--json"])
            .output()
            .unwrap();
        cli_runs.push(t.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        sizes.1 = out.stdout.len();
    }
    println!("median of {ROUNDS} rounds, {n} leases:");
    println!(
        "  operator::state_json  list {} + render {} = {}  ({} KiB)",
        ms(median(list)),
        ms(median(render)),
        ms(median(both)),
        sizes.0 / 1024
    );
    println!(
        "  mistri-locks list --json (a process)       = {}  ({} KiB, pretty-printed)",
        ms(median(cli_runs)),
        sizes.1 / 1024
    );
    let _ = std::fs::remove_dir_all(&dir);
}
