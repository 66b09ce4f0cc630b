//! The committed header must be exactly what the pinned cbindgen makes of
//! the current sources (rustls-ffi's `ensure-header-updated`, as a test).
//!
//! Refresh it after changing the C API:
//!
//! ```sh
//! UPDATE_HEADER=1 cargo test -p mistri_locks_ffi header
//! ```

use std::path::PathBuf;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header_path() -> PathBuf {
    crate_dir().join("../include/mistri_locks.h")
}

/// The header as cbindgen generates it now, in memory.
fn generate() -> String {
    let dir = crate_dir();
    let mut config =
        cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("read ffi/cbindgen.toml");
    if let Some(after) = &mut config.after_includes {
        *after = after.replace("@VERSION@", env!("CARGO_PKG_VERSION"));
    }
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut out);
    String::from_utf8(out).expect("cbindgen wrote UTF-8")
}

fn first_difference(a: &str, b: &str) -> String {
    for (n, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  committed: {x}\n  generated: {y}", n + 1);
        }
    }
    format!(
        "one is a prefix of the other ({} vs {} lines)",
        a.lines().count(),
        b.lines().count()
    )
}

#[test]
fn header_matches_the_sources() {
    let generated = generate();
    let path = header_path();
    if std::env::var_os("UPDATE_HEADER").is_some_and(|v| v != "0") {
        std::fs::write(&path, &generated).expect("write include/mistri_locks.h");
        eprintln!("rewrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/mistri_locks.h is out of date with ffi/src ({}).\n\
         Refresh it with:\n\n    UPDATE_HEADER=1 cargo test -p mistri_locks_ffi header\n\n\
         and commit the result.",
        first_difference(&committed, &generated)
    );
}

#[test]
fn header_documents_every_function_and_type() {
    // Each declaration in the header is preceded by a doc comment.
    let header = std::fs::read_to_string(header_path()).expect("read the header");
    let lines: Vec<&str> = header.lines().collect();
    let mut undocumented = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let is_decl = line.starts_with("typedef ")
            || (line.starts_with("#define MISTRI_") && !line.starts_with("#define MISTRI_LOCKS_H"))
            || (line.contains("mistri_")
                && line.contains('(')
                && !line.starts_with([' ', '/', '*', '#']));
        if !is_decl {
            continue;
        }
        let prev = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .copied()
            .unwrap_or("");
        if !prev.trim_end().ends_with("*/") {
            undocumented.push(line.to_string());
        }
    }
    assert!(undocumented.is_empty(), "undocumented: {undocumented:#?}");
}
