//! A tour in three processes: two workers compete for one lease; the
//! operator (this process) asks the holder to stop with a flag; the other
//! worker takes over; then it is stopped too.
//!
//! Run: `cargo run -p mistri_locks_core --example demo [redis://...]`
//! (no argument: the Local adapter, an SQLite file in a temp folder — no
//! server needed).

use mistri_locks::{HoldOptions, Locks};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const JOB: &str = "demo:nightly-report";
const STOP: &str = "demo:stop";

fn open(target: &str) -> Locks {
    if target.starts_with("redis") {
        Locks::redis(target, "mistri:demo").expect("redis")
    } else {
        Locks::local(Some(std::path::Path::new(target))).expect("local database")
    }
}

fn worker(name: &str, target: &str) {
    let locks = open(target);
    let opts = HoldOptions {
        ttl: Duration::from_secs(3),
        heartbeat: Duration::from_millis(500),
        stop_key: Some(STOP.into()),
        ..HoldOptions::default()
    };
    let started = Instant::now();
    loop {
        // Don't start while a stop is being asked for.
        let stopping = locks.flag(STOP).expect("backend");
        let hold = if stopping {
            None
        } else {
            locks.hold(JOB, opts.clone()).expect("backend")
        };
        match hold {
            None => {
                if started.elapsed() > Duration::from_secs(20) {
                    println!("[{name}] gave up waiting");
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Some(hold) => {
                println!("[{name}] holds {JOB} (fence {}), working", hold.fence());
                let mut units = 0;
                while !hold.signal().wait(Some(Duration::from_millis(300))) {
                    units += 1;
                    println!("[{name}]   unit of work #{units}");
                }
                println!(
                    "[{name}] told to stop: {}",
                    hold.signal().reason().unwrap_or_default()
                );
                println!("[{name}] release: {:?}", hold.release().expect("release"));
                return;
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--worker" {
        return worker(&args[2], &args[3]);
    }
    let tmp = std::env::temp_dir().join(format!("mistri-demo-{}", std::process::id()));
    let target = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| tmp.join("locks.db").display().to_string());
    println!("backend: {target}");
    let locks = open(&target);
    locks.clear_flag(STOP).expect("backend");

    let exe = std::env::current_exe().expect("own path");
    let spawn = |name: &str| -> Child {
        Command::new(&exe)
            .args(["--worker", name, &target])
            .spawn()
            .expect("spawn worker")
    };
    let mut a = spawn("worker-a");
    std::thread::sleep(Duration::from_millis(300));
    let mut b = spawn("worker-b");
    std::thread::sleep(Duration::from_millis(1500));
    println!(
        "[operator] {JOB} held? {}",
        locks.held(JOB).expect("backend")
    );
    for round in 1..=2 {
        println!("[operator] raising {STOP} (round {round})");
        locks
            .set_flag(STOP, Duration::from_secs(30))
            .expect("backend");
        while locks.held(JOB).expect("backend") {
            std::thread::sleep(Duration::from_millis(50));
        }
        println!("[operator] {JOB} is free; lowering {STOP}");
        locks.clear_flag(STOP).expect("backend");
        std::thread::sleep(Duration::from_millis(1500));
    }
    for c in [&mut a, &mut b] {
        c.wait().expect("worker exit");
    }
    println!(
        "[operator] done; {JOB} held? {}",
        locks.held(JOB).expect("backend")
    );
    let _ = std::fs::remove_dir_all(tmp);
}
